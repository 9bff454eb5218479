"""app/answering/agents.py: who a line has do a task, from its grammar (the generator swap's who-will questions got
the speaker of "I'm putting you down to ...", and the person thanked before "Count on me to ...")."""

from __future__ import annotations

import pytest

from app.answering.agents import LISTENER, SPEAKER, task_doer
from app.answering.answers import AnswerFinder
from test_app_actions import _diarized as _turns  # a diarized transcript from (label, text) pairs

TASK = "booking the venue"


@pytest.mark.parametrize("line, doer", [
    ("I've signed you up to book the venue.", LISTENER),  # the object of the verb that governs "to book"
    ("You can count on Maria to book the venue.", "Maria"),  # the object of its preposition
    ("I asked Omar to book the venue by Friday.", "Omar"),
    ("Please book the venue before Friday.", LISTENER),  # a bare imperative
    ("Could you book the venue?", LISTENER),
    ("My job this week is to book the venue.", SPEAKER),  # whose job it is
    ("The venue will be booked by Priya.", "Priya"),  # a passive's agent
    ("I'll try to book the venue tomorrow.", SPEAKER),  # no object: the governing verb's subject
    ("[PERSON4] will book the venue.", "[PERSON4]"),
    ("The venue is lovely in spring.", None),  # no verb of the task
    ("We should book the venue.", None),  # the team: no one person
])
def test_the_doer_of_a_task_is_read_from_the_grammar(line, doer):
    assert task_doer(line, TASK) == doer


def test_who_will_names_the_one_a_line_signs_up_not_its_speaker_or_the_one_thanked():
    signed_up = _turns(("Omar", "Priya, I've put you down to book the venue by Friday."), ("Priya", "Fine by me."))
    assert AnswerFinder(signed_up).answer("Who is booking the venue?").text == "Priya."
    volunteers = _turns(("Priya", "The caterer has confirmed."),
                        ("Omar", "Great work, Priya. You can count on me to book the venue by Friday."),
                        ("Priya", "Thanks."))
    assert AnswerFinder(volunteers).answer("Who is booking the venue?").text == "Omar."


def test_the_person_the_question_names_is_not_the_answer():
    """"Who is Priya waiting for to book the venue?" is someone else than Priya, though her line has her book it."""
    finder = AnswerFinder(_turns(("Priya", "I will book the venue as soon as the budget is approved."),
                                 ("Omar", "Fine.")))
    line = finder.sentences[0]
    task = "book the venue"
    assert finder.people.task_doer(line, "Who will book the venue?", task) == "Priya"
    assert finder.people.task_doer(line, "Who is Priya waiting for to book the venue?", task) is None


@pytest.mark.parametrize("line", [
    "I told her to book the venue.",  # the object does it, though the line does not name her
    "I'm going to the office on Monday to book the venue.",  # a day is no one
    "I won't book the venue, someone else has to.",  # refused
    "I don't think you should book the venue.",  # doubted on the way up
    "Should I book the venue?",  # a question names only the one it asks
    "I booked the venue yesterday.",  # done already
    "We need Anna or Ben to book the venue.",  # not yet one of them
])
def test_lines_that_name_no_one_who_will_do_it(line):
    assert task_doer(line, TASK) is None


def test_a_passive_governing_verb_leaves_the_task_to_its_subject():
    assert task_doer("I was asked by Tom to book the venue.", TASK) == SPEAKER
