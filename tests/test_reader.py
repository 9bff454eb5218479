"""The general reader on meetings it was not written for: questions about the meeting itself, questions in the
asker's own words, who-questions answered with a person, spoken lines tidied, and abstention only when the meeting
never mentions the thing asked about. Real MiniLM (the packaged embedder), no LLM."""

from __future__ import annotations

import pytest

from app.answering.answers import NOT_IN_MEETING, AnswerFinder
from app.answering.spoken import tidy
from app.answering.meeting_record import MeetingAsk, meeting_ask
from app.answering.retrieval import default_embedder
from app.text.transcript import Transcript, Turn

LINES = [
    ("PERSON2", "Okay, so welcome everyone, let's go through the agenda for the demo next week."),
    ("PERSON5", "Ehm, I have a question about the server setup."),
    ("PERSON2", "Sure. [PERSON7] from the data team will prepare the corpus for the shared task."),
    ("PERSON9", "Uh, I I am a bit stressed because the project officer will watch the whole demo."),
    ("PERSON5", "The translation module runs on the machines in Prague, the speech recognition in Trento."),
    ("PERSON2", "Good. [PERSON5], can you check the stream with the subtitles tomorrow?"),
    ("PERSON5", "Yes, I can do that tomorrow morning."),
    ("PERSON2", "Then we meet again on Thursday at ten to rehearse."),
    ("PERSON9", "And the streaming of the demo was tested yesterday, it worked with a small delay."),
    ("PERSON2", "Fine, so the demo setup is done, thank you all."),
]


@pytest.fixture(scope="module")
def finder():
    embedder = default_embedder()
    if embedder is None:
        pytest.skip("the packaged sentence embedder is not installed")
    return AnswerFinder(Transcript([Turn(s, t) for s, t in LINES]), embedder)


@pytest.mark.parametrize("question, kind", [
    ("Who took part in the call?", MeetingAsk.ATTENDEES),
    ("Who was present at this meeting?", MeetingAsk.ATTENDEES),
    ("What was this meeting for?", MeetingAsk.PURPOSE),
    ("Who was leading the call?", MeetingAsk.LEADER),
    ("Who left the meeting before the end?", None),
    ("Who left the meeting early?", None),
    ("When is the next meeting?", None),
    ("Who will prepare the corpus?", None),
])
def test_questions_about_the_meeting_itself(finder, question, kind):
    assert meeting_ask(question, finder.index.embedder) is kind


def test_who_attended_is_every_speaker(finder):
    answer = finder.answer("Who took part in the call?")
    assert answer.text == "PERSON2, PERSON5 and PERSON9."
    assert {c.speaker for c in answer.citations} == {"PERSON2", "PERSON5", "PERSON9"}


def test_who_led_is_who_held_the_floor(finder):
    assert finder.answer("Who was leading the call?").text.startswith("PERSON2")


def test_the_purpose_is_read_from_central_lines(finder):
    answer = finder.answer("What was this meeting for?")
    assert answer.text != NOT_IN_MEETING and answer.citations
    assert "demo" in answer.text.lower()


def test_a_question_in_other_words_is_answered_not_abstained(finder):
    # no one line holds "nervous" or "presenter": the meeting still says what it is about (the demo, the officer)
    answer = finder.answer("Why is the presenter nervous about the demo with the project officer?")
    assert answer.text != NOT_IN_MEETING
    assert any("officer" in c.text for c in answer.citations)


def test_who_is_answered_with_a_person_named_in_the_line(finder):
    answer = finder.answer("Who is responsible for the corpus of the shared task?")
    assert answer.text == "PERSON7."  # named in PERSON2's line, not PERSON2


def test_who_commits_is_the_speaker(finder):
    assert finder.answer("Who will check the subtitle stream?").text.startswith("PERSON5")


@pytest.mark.parametrize("question", [
    "How much did the catering for the party cost?",
    "Who will hire the new graphic designer?",
    "When does the marketing campaign launch?",
])
def test_what_the_meeting_never_mentions_is_not_said(finder, question):
    answer = finder.answer(question)
    assert answer.text == NOT_IN_MEETING and not answer.citations


def test_a_model_answer_that_restates_the_question_is_not_kept():
    t = Transcript([Turn(s, t) for s, t in LINES])
    echo = AnswerFinder(t, None, generate=lambda q, ev: ("The translation module runs on the translation module.", 0.9))
    answer = echo.answer("Where does the translation module run?")
    assert "Prague" in answer.text  # the line itself, not the echo


@pytest.mark.parametrize("said, tidied", [
    ("So uh, I I said, that [PERSON8] is alr- already starting to prepare slides.",
     "So I said, that [PERSON8] is already starting to prepare slides."),
    ("ehm the the budget is fine", "The budget is fine"),
    ("The e-mail went out, um, yesterday.", "The e-mail went out, yesterday."),
])
def test_spoken_lines_are_tidied_for_an_answer(said, tidied):
    assert tidy(said) == tidied


def test_pronouns_and_words_for_a_group_name_nobody():
    from app.text.speakers import speaker_names
    from test_app_actions import _diarized

    t = _diarized(("SPEAKER_00", "Hi guys, can we start?"), ("SPEAKER_01", "Yes. Thanks, guys."),
                  ("SPEAKER_00", "He said the demo works. Guys, any news?"), ("SPEAKER_01", "Thanks guys, nothing."))
    assert not {"Guys", "He"} & set(speaker_names(t).values())


def test_a_live_session_keeps_the_speakers_a_transcript_names(session_parts):
    """Replayed from a transcript whose speakers are names already, a live meeting answers as the batch path does:
    'Hi guys' used to rename PERSON10 'Guys' in the live session only."""
    runtime, _ = session_parts
    session = runtime.new_session("given-names", source="transcript")
    said = [Turn("PERSON10", "Good morning. Bob, can you start with the demo?", 0.0, 3.0),
            Turn("PERSON3", "Thanks, Alice. The server is ready.", 3.5, 6.0),
            Turn("PERSON10", "Great. Bob, can you send the link?", 6.5, 9.0),
            Turn("PERSON3", "Sure, Alice, I will send it today.", 9.5, 12.0),
            Turn("SPEAKER_07", "Hi, I'm Dana, I can test it tomorrow.", 12.5, 15.0)]
    session.add_transcript(Transcript(said))
    session.finish(timeout=120)
    assert session.transcript().speakers == ["PERSON10", "PERSON3", "Dana"]  # the anonymous one is still named
    runtime.close_session("given-names")


def test_a_yes_or_no_about_what_the_meeting_never_says_is_not_invented(finder):
    # "cancel" is never said, the demo is: no "Yes." from a line about the demo
    assert finder.answer("Is the demo cancelled?").text == NOT_IN_MEETING


@pytest.mark.parametrize("line, question, person", [
    ("Monday will be fine for the corpus of the shared task.", "Who will prepare the corpus of the shared task?", "Ben"),
    ("[Inaudible] the corpus for the shared task is in progress.", "Who is responsible for the shared task corpus?",
     "Ben"),
    ("[PERSON1] prepares the corpus.", "Did PERSON10 or someone else prepare the corpus?", "PERSON1"),
    ("Ed will send it to me tomorrow.", "Who needed the corpus sent?", "Ed"),
])
def test_the_person_a_line_is_about(line, question, person):
    from app.answering.people import person_in
    from app.text.sentences import Sentence

    assert person_in(Sentence(line, "Ben", 0, None), ["Ben", "Ana"], question) == person


@pytest.mark.parametrize("said", ["We need short- and long-term plans.", "Pages 10- 20 are done.",
                                  "The UM team had had enough.", "I know that that is true."])
def test_tidying_never_changes_what_a_line_says(said):
    assert tidy(said) == said


def test_who_attended_and_who_led_an_empty_record_is_not_said():
    from app.answering.meeting_record import attendees, leader

    assert attendees(Transcript([]), []) == ("", []) and leader(Transcript([]), []) == ("", [])


def test_a_few_words_from_an_unplaced_voice_are_not_an_attendee():
    """A live diarizer can give a known voice a new label for a moment; "Who attended?" then listed a person who was
    not there. A few words in one turn from an unnamed label are said as such, not counted."""
    from app.answering.meeting_record import attendees
    from app.text.sentences import split_sentences

    turns = [Turn("Alice", "Good morning, let us start with the budget for the pilot.", 0, 4),
             Turn("Bob", "The pilot will cost twelve thousand dollars in total.", 4, 8),
             Turn("SPEAKER_03", "yes right", 8, 9),
             Turn("Carol", "We have spent thirty thousand so far this year.", 9, 13)]
    transcript = Transcript(turns)
    said, cited = attendees(transcript, split_sentences(transcript))
    assert said == ("Alice, Bob and Carol. A few words (2) came from a voice not matched to anyone; it may be one "
                    "of them.")
    assert [s.speaker for s in cited] == ["Alice", "Bob", "Carol"]
    longer = Transcript(turns[:2] + [Turn("SPEAKER_03", "I think the pilot should wait until the contract is signed.", 8, 12)])
    assert attendees(longer, split_sentences(longer))[0] == "Alice and Bob, and 1 unnamed speaker."
    twice = Transcript(turns[:3] + [Turn("Carol", "Fine.", 9, 10), Turn("SPEAKER_03", "ok", 10, 11)])
    assert attendees(twice, split_sentences(twice))[0] == "Alice, Bob and Carol, and 1 unnamed speaker."
    alone = Transcript([Turn("SPEAKER_00", "Hello everyone and welcome to the weekly planning call.", 0, 2),
                        Turn("SPEAKER_01", "hi", 2, 3)])
    assert attendees(alone, split_sentences(alone))[0] == ("1 speaker, not named. A few words (1) came from "
                                                           "a voice not matched to anyone; it may be that speaker.")
    short = Transcript([Turn("SPEAKER_00", "hi", 0, 1), Turn("SPEAKER_01", "hello", 1, 2)])
    assert attendees(short, split_sentences(short))[0] == "2 speakers, none of them named."
