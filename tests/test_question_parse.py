"""app/answering/question_parse.py: who attended is read from the question's grammar, so short and unseen phrasings are
found and questions that only share the words are not (issue 48/49: "Who attended?" got "does not say")."""

from __future__ import annotations

import pytest

from app.answering.question_parse import (addressed, asks_how_long, asks_what_one_will_do, asks_who_attended,
                                          asks_who_spoke_most, named_subjects, tells_the_listener)
from app.answering.retrieval import base_form, stems

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


@pytest.mark.parametrize("question, most", [("Who spoke the most?", "most"), ("Who talked most?", "most"),
                                            ("Who did most of the talking?", "most"), ("Who spoke the least?", "least"),
                                            ("Who said the most about the invoice?", None), ("Who will talk most?", None),
                                            ("Who spoke more, Anna or Ben?", None), ("Who will send the memo?", None)])
def test_who_spoke_most(question, most):
    assert asks_who_spoke_most(question) == most


@pytest.mark.parametrize("question, asked", [("How long was the meeting?", True), ("How long did the call last?", True),
                                             ("What was the duration of the session?", True),
                                             ("How long will the migration take?", False),
                                             ("How long was the outage?", False), ("How long did the audit take?", False)])
def test_how_long_the_meeting_was(question, asked):
    assert asks_how_long(question) is asked


def test_meeting_level_questions_are_answered_from_the_record():
    from app.answering.answers import AnswerFinder
    from app.text.transcript import Transcript, Turn

    meeting = Transcript([Turn("Ana", "Morning all, the agenda has three items and the first is the invoice run.", 0.0, 5.0),
                          Turn("Ben", "Fine.", 5.0, 6.0),
                          Turn("Ana", "The invoice run moves to Thursday because the bank is closed on Wednesday.", 6.0, 12.0),
                          Turn("Cleo", "I will tell the accounts team.", 12.0, 14.0)],
                         source="t")
    finder = AnswerFinder(meeting)
    assert finder.answer("Who talked most?").text.startswith("Ana, with 27 of the 34 words")
    assert finder.answer("Who spoke the least?").text.startswith("Ben")
    assert finder.answer("How long did the call last?").text == "About 14 seconds, from 00:00 to 00:14."
    assert finder.answer("Who attended?").text == "Ana, Ben and Cleo."


def test_a_slide_is_no_attendee():
    """The live path places slides among the turns as "Slide": the helper's new-user try got "Slide, Alice, Bob and
    Carol." for who attended (issue 49)."""
    from app.answering.answers import AnswerFinder
    from app.text.transcript import SLIDE_SPEAKER, Transcript, Turn

    meeting = Transcript([Turn(SLIDE_SPEAKER, "Budget; Pilot: 12,000 dollars", 0.0, 0.0),
                          Turn("Ana", "The pilot costs twelve thousand, and the slides have every figure of it.", 1.0, 5.0),
                          Turn("Ben", "Fine.", 5.0, 6.0)])
    assert AnswerFinder(meeting).answer("Who attended?").text == "Ana and Ben."
    assert AnswerFinder(meeting).answer("Who spoke the least?").text.startswith("Ben")


@pytest.mark.parametrize("question, events", [
    ("When does the harvest begin?", ["begin"]),
    ("When will the fence be painted?", ["paint"]),  # the passive's verb
    ("When is the bake sale?", []),  # only the subject says the event
    ("When does the roof need to be repaired?", ["repair"]),  # past the light verb
    ("When will Ravi come back?", ["come back"]),  # a phrasal verb keeps its particle
    ("When is the barn dance planned?", []),  # planning is no event
    ("When was the new price mentioned?", []),  # nor is saying: everything in a meeting is said
    ("When does the orchard trip depart?", ["depart"]),  # tagged a noun, but it has an auxiliary
])
def test_the_events_a_question_names(question, events):
    from app.answering.question_parse import asked_events

    assert asked_events(question) == events


@pytest.mark.parametrize("sentence, date, event", [
    ("I will rent the coach by Monday, May 4th.", "Monday, May 4th", ("rent", ("coach",))),
    ("The cider tasting begins on Saturday, May 16th.", "Saturday, May 16th", ("begin", ())),
    ("My part: sort the seeds, finished by Friday, June 12th.", "Friday, June 12th", ("finish", ())),
    ("The barn dance is on Friday, June 5th.", "Friday, June 5th", None),  # only "is" holds it
    ("I'll have it done by Friday, May 8th.", "Friday, May 8th", None),
])
def test_the_event_a_date_is_said_of(sentence, date, event):
    from app.answering.question_parse import date_event

    at = sentence.index(date)
    assert date_event(sentence, at, at + len(date)) == event


def test_a_date_answers_only_the_event_it_is_said_of():
    """After Carol was forgotten, "When does the pilot start?" got the test plan's date from Alice's line about the
    pilot (issue 49 F5): a date held by another event acting on something else ("rent the coach") answers no other
    question; a date held by a light verb, by a verb acting on nothing, by the asked verb or one close in meaning
    does; when every date is another event's, the meeting does not say."""
    from app.answering.answers import NOT_IN_MEETING, AnswerFinder
    from app.answering.retrieval import default_embedder
    from app.text.transcript import Transcript, Turn

    meeting = Transcript([
        Turn("Ana", "For the orchard trip, I will rent the coach by Monday, May 4th.", 0.0, 6.0),
        Turn("Ben", "I can print the maps. I'll have it done by Friday, May 8th.", 6.0, 12.0),
        Turn("Ana", "The cider tasting begins on Saturday, May 16th.", 12.0, 17.0),
        Turn("Ben", "My part: sort the seeds, finished by Friday, June 12th.", 17.0, 22.0),
    ], source="t")
    finder = AnswerFinder(meeting, default_embedder())
    assert finder.answer("When does the orchard trip depart?").text == NOT_IN_MEETING  # only the coach's date
    assert finder.answer("When will the coach be rented?").text == "Monday, May 4th"
    assert finder.answer("By what date will the maps be printed?").text == "Friday, May 8th"
    assert finder.answer("When does the cider tasting start?").text == "Saturday, May 16th"  # begins ~ start
    assert finder.answer("By what day should someone sort the seeds?").text == "Friday, June 12th"  # finishing it


@pytest.mark.parametrize("line, spoken_to", [
    ("So now Anna, if you can describe the status of your work.", ["Anna"]),
    ("What do you think, Peter?", ["Peter"]),
    ("So Maria please tell us about the budget.", ["Maria"]),
    ("So now [PERSON10] if you can describe what you are working on.", ["[PERSON10]"]),
    ("So that Peter knows where to pick up the data.", []),  # talked of
    ("Maria can tell us about the budget.", []),  # said of her, not to her
    ("It should all be on Peter's disks.", []),
    ("I think Anna has the numbers.", []),
])
def test_the_person_a_line_speaks_to_is_read_from_its_grammar(line, spoken_to):
    assert addressed(line) == spoken_to


@pytest.mark.parametrize("line, doers", [
    ("And [PERSON5] and [PERSON11] should select the video and test the performance.", ["[PERSON5]", "[PERSON11]"]),
    ("Maria will send the contract on Friday.", ["Maria"]),
    ("[PROJECT7] is only a small conference.", []),  # said of it: no one does anything
    ("I think we should ask Peter.", []),  # Peter is asked, not asking
    ("Anna said Ben should send the contract.", ["Ben"]),  # Anna only says so
])
def test_the_people_a_line_has_do_something(line, doers):
    assert named_subjects(line) == doers


@pytest.mark.parametrize("line, asks", [
    ("But try sending him an e-mail.", True),
    ("Please send it to Anna.", True),
    ("Could you send me the slides?", True),
    ("You should write the introduction.", True),
    ("Do you know when it starts?", False),  # asks what they know
    ("Let's move to the next point.", False),  # the speaker too
    ("Thank you.", False),
    ("See you tomorrow.", False),
    ("He could be the person who does the downloading.", False),
])
def test_a_line_that_asks_the_listener_to_act(line, asks):
    assert tells_the_listener(line) is asks


@pytest.mark.parametrize("question, person", [
    ("What should [PERSON3] do next?", "PERSON3"),
    ("What is Peter going to do?", "Peter"),
    ("What does Maria have to do before Friday?", "Maria"),
    ("What did Anna do yesterday?", None),  # behind, not ahead
    ("What should we do next?", None),  # no one named
    ("What does Anna do for a living?", None),
    ("What did Anna want to do?", None),  # wanted, not ahead
])
def test_a_question_asking_what_someone_will_do(question, person):
    assert asks_what_one_will_do(question) == person
