"""Forgetting one speaker of a saved meeting (app/forget.py) on the stand-in parts and the tiny Gemma 3: the
meeting is rebuilt without that speaker's words, saved under a new source, and the old sources are shredded."""

from __future__ import annotations

import json
import time

import pytest
import torch

from app.forget import forget_speaker
from app.transcript import Transcript, Turn, turns_from_words
from encoders.errors import InputError

RATE = 16000
PROBE = "\nQuestion: Who will send the contract, and when?\nAnswer:"


def _meeting(runtime, meeting, session_id: str):
    session = runtime.new_session(session_id, source="mic")
    for second, number in enumerate([0, 0, 1, 1]):
        session.feed_video(meeting.slide_frame(number), second * 1.0, wait=True)
    for start in range(0, len(meeting.audio), RATE // 2):
        session.feed_audio(meeting.audio[start:start + RATE // 2], RATE)
    session.finish(timeout=120)
    return session


def test_a_forgotten_speaker_is_gone_from_the_transcript_the_kv_and_every_old_ciphertext(session_parts):
    runtime, meeting = session_parts
    session = _meeting(runtime, meeting, "met")
    session.save()
    saved_words = session.transcript().words
    assert {"SPEAKER_00", "SPEAKER_01"} <= {w.speaker for w in saved_words}
    position, slides = session.stream_seconds, session.snapshot().slides
    runtime.close_session("met")
    store = runtime.session_store()
    encrypted = store._inner
    copies = [("met", b, encrypted.inner.get("met", b)) for b in encrypted.list("met")]  # a backup taken before
    assert not encrypted.verify_shredded("mic", copies)

    report = forget_speaker(runtime, "met", "SPEAKER_01")
    assert (report.speaker, report.words_removed, report.slides) == ("SPEAKER_01", 8, 2)
    assert report.source == "mic-without-SPEAKER_01" and store.sources("met") == [report.source]
    assert [s.source for s in report.shredded] == ["mic"] and report.shredded[0].keys_destroyed == 1
    assert encrypted.verify_shredded("mic", copies)  # the backup cannot be decrypted any more

    resumed = runtime.resume_session("met")
    words = resumed.transcript().words
    assert {w.speaker for w in words} == {"SPEAKER_00"} and "contract" not in " ".join(w.text for w in words)
    assert [(w.text, w.start, w.end) for w in words] == [(w.text, w.start, w.end) for w in saved_words
                                                         if w.speaker == "SPEAKER_00"]  # times kept
    assert [s.text for s in resumed.snapshot().slides] == [s.text for s in slides]
    assert resumed.stream_seconds == position  # a continuation starts where the meeting stopped
    query = meeting.vision().embedder.embed_texts([meeting.slides[1]])[0]  # slides are still found by picture
    hit = resumed.timeline.top_segments(1, query=query, modality="video")
    assert hit and hit[0].segment.text == slides[1].text
    after = resumed._context.next_token_logits(PROBE)
    tokens = resumed.kv_stats()["tokens"]
    runtime.close_session("met")

    # The rebuilt KV is exactly the one of a meeting in which the forgotten speaker never spoke.
    never = runtime.new_session("never", source="mic")
    kept = [w for w in saved_words if w.speaker == "SPEAKER_00"]
    never.add_transcript(Transcript(turns_from_words(kept)), slides=slides, until=position)
    never.finish(timeout=120)
    assert never.kv_stats()["tokens"] == tokens
    assert torch.equal(never._context.next_token_logits(PROBE), after)
    runtime.close_session("never")

    log = [json.loads(line) for line in (runtime.settings.home / "audit.log").read_text().splitlines()]
    shreds = [r for r in log if r["op"] == "delete" and r["details"].get("shredded") and r["session"] == "met"]
    assert [r["source"] for r in shreds] == ["mic"] and shreds[0]["details"]["keys_destroyed"] == 1
    forgot = [r for r in log if r["details"].get("forgot_speaker")]
    assert len(forgot) == 1 and forgot[0]["details"]["words_removed"] == 8 and forgot[0]["source"] == "SPEAKER_01"


def test_forgetting_an_unknown_speaker_or_meeting_changes_nothing(session_parts):
    runtime, meeting = session_parts
    _meeting(runtime, meeting, "kept").save()
    runtime.close_session("kept")
    store = runtime.session_store()
    before = sorted(store.list("kept"))
    with pytest.raises(InputError, match=r"no speaker 'Zed'; its speakers: SPEAKER_00, SPEAKER_01"):
        forget_speaker(runtime, "kept", "Zed")
    with pytest.raises(InputError, match="no saved session 'gone'"):
        forget_speaker(runtime, "gone", "SPEAKER_00")
    assert sorted(store.list("kept")) == before and store.sources("kept") == ["mic"]


def test_minutia_forget_speaker_on_the_command_line(session_parts, tiny_llm_dir):
    """The command a user runs: a name the transcript does not have is refused with the speakers it has; a
    label is forgotten, and the meeting answers no more about what only that speaker said."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    runtime, meeting = session_parts
    _meeting(runtime, meeting, "cli").save()
    runtime.close_session("cli")
    home = runtime.settings.home
    runtime.close()  # the store and its audit log are the command's now
    env = {**os.environ, "MINUTIA_HOME": str(home), "HF_HUB_OFFLINE": "1"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", "forget", "--session", "cli", "--llm", str(tiny_llm_dir),
                               *args], capture_output=True, text=True, cwd=Path(__file__).parent.parent, timeout=300,
                              env=env)

    wrong = cli("--speaker", "Maria")
    assert wrong.returncode == 2 and "its speakers: SPEAKER_00, SPEAKER_01" in wrong.stderr, wrong.stderr[-2000:]
    assert "Traceback" not in wrong.stderr
    both = cli("--speaker", "SPEAKER_01", "--source", "mic")
    assert both.returncode == 2 and "not both" in both.stderr
    done = cli("--speaker", "SPEAKER_01")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "forgot SPEAKER_01 in session cli: 8 word(s) removed" in done.stdout and "1 old key(s) destroyed" in done.stdout
    listed = cli()
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == ["mic-without-SPEAKER_01", "speakers (for --speaker): SPEAKER_00"], listed.stdout


def test_a_forgotten_speakers_name_passes_to_no_one(session_parts):
    """Others still address the forgotten speaker ("Bob, can you ...?"); with Bob's turns gone, the address
    rule would name whoever speaks next Bob. The forgotten name is kept with the meeting and given to no one."""
    runtime, _ = session_parts
    session = runtime.new_session("named", source="mic")
    said = [Turn("SPEAKER_00", "Good morning everyone. Bob, can you give us the numbers?", 0.0, 4.0),
            Turn("SPEAKER_01", "Sure. We spent thirty thousand dollars so far.", 4.5, 8.0),
            Turn("SPEAKER_02", "The pilot starts on Monday.", 8.5, 10.0),
            Turn("SPEAKER_00", "Great. Bob, can you send the report?", 10.5, 13.0),
            Turn("SPEAKER_01", "Yes, I will send it on Friday.", 13.5, 16.0)]
    session.add_transcript(Transcript(said))
    session.finish(timeout=120)
    assert "Bob" in session.transcript().speakers
    session.save()
    runtime.close_session("named")

    report = forget_speaker(runtime, "named", "Bob")
    assert report.speaker == "SPEAKER_01" and report.name == "Bob"
    resumed = runtime.resume_session("named")
    assert "Bob" not in resumed.transcript().speakers, resumed.transcript().speakers
    runtime.close_session("named")


def test_the_speakers_who_stay_keep_their_names(session_parts):
    """Alice is named only by Bob ("Thanks, Alice."): rebuilt without Bob's turns, the evidence is gone, but the
    name known before the forget stays hers, and it survives the save and a resume."""
    runtime, _ = session_parts
    session = runtime.new_session("kept-names", source="mic")
    said = [Turn("SPEAKER_00", "Good morning everyone. The pilot starts on Monday.", 0.0, 4.0),
            Turn("SPEAKER_01", "Thanks, Alice. We spent thirty thousand dollars so far.", 4.5, 8.0),
            Turn("SPEAKER_00", "Good. The report is due on Friday.", 8.5, 11.0)]
    session.add_transcript(Transcript(said))
    session.finish(timeout=120)
    assert session.speakers() == {"SPEAKER_00": "Alice", "SPEAKER_01": None}
    session.save()
    runtime.close_session("kept-names")

    forget_speaker(runtime, "kept-names", "SPEAKER_01")
    resumed = runtime.resume_session("kept-names")
    assert resumed.speakers() == {"SPEAKER_00": "Alice"}
    assert {t.speaker for t in resumed.transcript().turns} == {"Alice"}
    runtime.close_session("kept-names")


def test_a_speaker_is_forgotten_while_the_meeting_goes_on(session_parts):
    """A live meeting without a session store: the speaker heard so far is forgotten (what the recogniser still
    held is transcribed first, so none of it escapes), and the meeting goes on in the rebuilt session, which
    takes new audio and holds the KV of a meeting in which that speaker never spoke."""
    from app.forget import forget_in_live_meeting

    runtime, meeting = session_parts
    session = runtime.new_session("live-forget", source="mic")
    cut = int(meeting.turns[1][1] * RATE) + RATE // 4  # after the second turn
    session.feed_audio(meeting.audio[:cut], RATE)
    deadline = time.monotonic() + 120
    while "SPEAKER_01" not in session.speakers() and time.monotonic() < deadline:  # in the captions: forgettable
        time.sleep(0.1)
    with pytest.raises(InputError, match="no speaker 'Zed'"):
        forget_in_live_meeting(runtime, session, "Zed", timeout=120)
    assert session.state != "finished"  # refused before anything changed: the meeting goes on as it was

    rebuilt, report = forget_in_live_meeting(runtime, session, "SPEAKER_01", timeout=120)
    assert (report.speaker, report.words_removed) == ("SPEAKER_01", 8) and report.source == "mic-without-SPEAKER_01"
    assert rebuilt is runtime.session("live-forget") and session.state != rebuilt.state
    said = " ".join(w.text for w in rebuilt.transcript().words)
    assert "contract" not in said and "pilot" in said
    position = rebuilt.stream_seconds
    assert position >= meeting.turns[1][1]  # times go on from where the meeting was

    rebuilt.feed_audio(meeting.audio[:RATE * 3], RATE)  # more audio: the meeting goes on in the rebuilt session
    rebuilt.finish(timeout=120)
    words = rebuilt.transcript().words
    assert len(words) > len(said.split()) and words[-1].start >= position
    runtime.close_session("live-forget")


def test_a_rename_after_the_end_reaches_the_save_so_a_forget_keeps_it(session_parts):
    """A meeting that saves itself has ended (a bot room whose audio stopped); then a speaker is renamed and
    another forgotten. The forget rebuilds the meeting from its save: the name given after the end must be in it
    (it was lost before: no checkpoint runs once a meeting has ended)."""
    from app.forget import forget_in_live_meeting

    runtime, _ = session_parts
    session = runtime.new_session("renamed-late", source="mic", autosave=True)
    session.add_transcript(Transcript([
        Turn("SPEAKER_00", "Good morning everyone. The pilot starts on Monday.", 0.0, 4.0),
        Turn("SPEAKER_01", "We spent thirty thousand dollars so far.", 4.5, 8.0),
        Turn("SPEAKER_00", "Good. The report is due on Friday.", 8.5, 11.0)]))
    session.finish(timeout=120)
    assert session.rename_speaker("SPEAKER_00", "Dana") == "SPEAKER_00"
    rebuilt, report = forget_in_live_meeting(runtime, session, "SPEAKER_01", timeout=120)
    assert report.speaker == "SPEAKER_01"
    assert rebuilt.speakers() == {"SPEAKER_00": "Dana"}
    assert {t.speaker for t in rebuilt.transcript().turns} == {"Dana"}
    runtime.close_session("renamed-late")
