"""app/question_parse.py: who attended is read from the question's grammar, so short and unseen phrasings are
found and questions that only share the words are not (issue 48/49: "Who attended?" got "does not say")."""

from __future__ import annotations

import pytest

from app.question_parse import asks_who_attended
from app.retrieval import base_form, stems

ATTENDED = ["Who attended?", "Who was there?", "Who joined the call?", "Who participated?",
            "Who were the participants?", "Who was on the call?", "List the attendees.", "Which people joined the sync?",
            "Who joined?", "Who was present?", "Who took part?", "Who was in the session?", "Name the participants."]
NOT_ATTENDED = ["Who left the call early?", "Who will send the invoice?", "Who talked the most?",
                "Who joined the company last year?", "Who attended the trade fair in Lyon?", "Who was present at the audit?",
                "Who was absent?", "Who took part in the survey?", "Who is there to help with the move?",
                "Who will attend the workshop on Monday?", "Who was in charge?", "Who was on the jury?",
                "What was the call about?", "Who chaired the session?", "Who joined remotely?", "Who attended late?"]


@pytest.mark.parametrize("question", ATTENDED)
def test_ways_of_asking_who_attended(question):
    assert asks_who_attended(question)


@pytest.mark.parametrize("question", NOT_ATTENDED)
def test_questions_that_only_share_its_words(question):
    assert not asks_who_attended(question)


def test_irregular_verb_forms_meet_their_verb():
    """"When will the contract be sent?" must reach "Maria will send the contract": the stemmer keeps "sent"."""
    assert base_form("sent") == "send" and base_form("chosen") == "choose" and base_form("budget") == "budget"
    assert set(stems("When will the contract be sent?")) <= set(stems("Maria will send the contract on Friday."))
    assert stems("Who led the review?") == stems("Who leads the review?")
    assert set(stems("The sends and the sending")) == {"send"}  # regular forms stem as before
