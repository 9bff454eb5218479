"""ui/asked.py (issue 49): questions asked while an answer is being written are queued, not lost; each is answered,
in the order asked, against its own meeting; a failure is that question's alone; a new meeting drops the old list."""

from __future__ import annotations

import time

from tests.test_session_parts import RATE
from ui import render
from ui.asked import ANSWERING, AskedQuestions
from ui.inputs import user_message


def _meeting(runtime, meeting, name: str):
    session = runtime.new_session(name)
    for start in range(0, len(meeting.audio), RATE // 2):
        session.feed_audio(meeting.audio[start:start + RATE // 2], RATE)
    session.finish(timeout=120)
    assert session.wait_until_prefilled(timeout=60)
    return session


def test_questions_asked_a_fifth_of_a_second_apart_are_all_answered_in_order(session_parts):
    runtime, meeting = session_parts
    session = _meeting(runtime, meeting, "asked")
    asked = AskedQuestions(render.answer_markdown, user_message)
    questions = ["How much will the pilot cost?", "Who will send the contract?", "When will Maria send the contract?"]
    for n, question in enumerate(questions):
        shown = asked.ask(session, question)
        assert shown[-2:] == [{"role": "user", "content": question}, {"role": "assistant", "content": ANSWERING}]
        assert len(shown) == 2 * (n + 1)  # every earlier question still there
        time.sleep(0.2)
    assert asked.wait(120)
    messages = asked.messages()
    assert [m["content"] for m in messages[0::2]] == questions
    answers = [m["content"] for m in messages[1::2]]
    assert ANSWERING not in answers, answers
    assert "12,000" in answers[0] or "twelve thousand" in answers[0].lower(), answers[0]
    assert "Maria" in answers[1] and "Friday" in answers[2], answers


def test_a_failed_question_is_said_and_the_next_one_is_still_answered(session_parts):
    runtime, meeting = session_parts
    session = _meeting(runtime, meeting, "failing")
    asked = AskedQuestions(render.answer_markdown, user_message)
    asked.ask(session, "x" * 5000)  # too long a question: refused for this question alone
    asked.ask(session, "How much will the pilot cost?")
    assert asked.wait(120)
    first, second = [m["content"] for m in asked.messages()[1::2]]
    assert first.startswith("⚠️") and "Traceback" not in first
    assert "12,000" in second or "twelve thousand" in second.lower(), second


def test_a_new_meeting_clears_the_questions_and_drops_late_answers(session_parts):
    runtime, meeting = session_parts
    session = _meeting(runtime, meeting, "cleared")
    asked = AskedQuestions(render.answer_markdown, user_message)
    asked.ask(session, "How much will the pilot cost?")
    before = asked.version
    asked.clear()
    assert asked.messages() == [] and asked.version > before
    assert asked.wait(120)
    assert asked.messages() == []  # the answer to the last meeting's question did not land in this one
