"""A MeetingSession end to end on stand-in parts (tests/conftest.py: a scripted recogniser, a diarizer that
knows whose turn it is, the tiny in-process Gemma 3): the session's own work — committing words, closing
lines, prefilling the KV, answering, saving and resuming — runs for real, with no model to provision."""

from __future__ import annotations

from app.events import LineClosed, WordsCommitted

RATE = 16000


def _replay(session, audio) -> None:
    for start in range(0, len(audio), RATE // 2):
        session.feed_audio(audio[start:start + RATE // 2], RATE)
    session.finish(timeout=120)


def test_words_are_committed_with_speakers_and_lines_close(session_parts):
    runtime, meeting = session_parts
    session = runtime.new_session("parts")
    events: list = []
    session.subscribe(events.append)
    _replay(session, meeting.audio)

    words = [w for turn in session.transcript().turns for w in turn.text.split()]
    said = "Good morning. The pilot will cost twelve thousand dollars. Fine. Maria will send the contract on Friday."
    assert words == said.split()
    assert [t.speaker for t in session.transcript().turns] == ["SPEAKER_00", "SPEAKER_01"]
    lines = [e.line for e in events if isinstance(e, LineClosed)]
    assert [line.text for line in lines] == ["Good morning.", "The pilot will cost twelve thousand dollars.", "Fine.",
                                             "Maria will send the contract on Friday."]
    assert [line.speaker_change for line in lines] == [True, False, True, False]
    assert sum(len(e.words) for e in events if isinstance(e, WordsCommitted)) == len(words)
    assert session.state == "finished"


def test_lines_are_prefilled_and_a_question_is_answered(session_parts):
    runtime, meeting = session_parts
    session = runtime.new_session("asked")
    _replay(session, meeting.audio)
    assert session.wait_until_prefilled(timeout=60)

    kv = session.kv_stats()
    assert kv["lines"] == 4 and kv["tokens"] > 0
    answer = session.ask("How much will the pilot cost?")
    assert "12,000" in answer.text or "twelve thousand" in answer.text.lower()
    assert answer.citations and answer.citations[0].speaker == "SPEAKER_00"
    assert session.summary().summary


def test_a_saved_meeting_resumes_where_it_stopped(session_parts):
    runtime, meeting = session_parts
    session = runtime.new_session("kept")
    _replay(session, meeting.audio)
    report = session.save()
    tokens, words = session.kv_stats()["tokens"], session.snapshot().counters["committed_words"]
    runtime.close_session("kept")

    resumed = runtime.resume_session("kept")
    assert resumed.kv_stats()["tokens"] == tokens == report.seq_length  # loaded, not prefilled again
    assert resumed.snapshot().counters["committed_words"] == words
    assert resumed.stream_seconds == round(len(meeting.audio) / RATE, 3)
