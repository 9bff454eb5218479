"""Forgetting one speaker of a saved meeting (app/live/forget.py) on the stand-in parts and the tiny Gemma 3: the
meeting is rebuilt without that speaker's words, saved under a new source, and the old sources are shredded."""

from __future__ import annotations

import json
import time

import pytest
import torch

from app.live.forget import forget_source
from app.text.transcript import Transcript, Turn, turns_from_words
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

    report = forget_source(runtime, "met", "SPEAKER_01")
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
    forgot = [r for r in log if r["details"].get("forgot")]
    assert len(forgot) == 1 and forgot[0]["details"]["words_removed"] == 8 and forgot[0]["source"] == "SPEAKER_01"


def test_forgetting_an_unknown_speaker_or_meeting_changes_nothing(session_parts):
    runtime, meeting = session_parts
    _meeting(runtime, meeting, "kept").save()
    runtime.close_session("kept")
    store = runtime.session_store()
    before = sorted(store.list("kept"))
    with pytest.raises(InputError, match=r"no speaker 'Zed'; its speakers: SPEAKER_00, SPEAKER_01"):
        forget_source(runtime, "kept", "Zed")
    with pytest.raises(InputError, match="no saved session 'gone'"):
        forget_source(runtime, "gone", "SPEAKER_00")
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
    assert "forgot SPEAKER_01 in session cli: 8 words removed" in done.stdout and "1 old key destroyed" in done.stdout
    listed = cli()
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == "mic-without-SPEAKER_01", listed.stdout
    rows = {line.split()[1] for line in lines[1:] if line.startswith("│")}
    assert {"SPEAKER_00", "screen"} <= rows and "SPEAKER_01" not in rows, listed.stdout  # the lineage table
    unknown = cli("--source", "SPEAKER_07")
    assert unknown.returncode == 2 and "no source 'SPEAKER_07'" in unknown.stderr, unknown.stderr
    named = unknown.stderr.split("its sources: ")[-1].strip().split(", ")
    assert sorted(named) == ["SPEAKER_00", "mic-without-SPEAKER_01", "screen"], unknown.stderr  # key and content
    screen = cli("--source", "screen")
    assert screen.returncode == 0, screen.stderr[-3000:]
    assert "forgot screen in session cli: 2 slides removed (held in " in screen.stdout, screen.stdout
    again = cli("--source", "slides")
    assert again.returncode == 2 and "nothing from the screen" in again.stderr, again.stderr
    # Shredding a key source takes the meeting out of the library too (the library cannot tell its words apart).
    key_source = cli().stdout.splitlines()[0]
    shred = cli("--source", key_source)
    assert shred.returncode == 0 and "forgot meeting cli in the library too" in shred.stdout, shred.stdout


def test_a_forgotten_speakers_name_passes_to_no_one(session_parts):
    """Others still address the forgotten speaker ("Bob, can you ...?"); with Bob's turns gone, the address
    rule would name whoever speaks next Bob. The forgotten name is kept with the meeting and given to no one."""
    runtime, _ = session_parts
    session = runtime.new_session("named", source="mic")
    said = [Turn("SPEAKER_00", "Good morning everyone. Bob, can you give us the numbers?", 0.0, 4.0),
            Turn("SPEAKER_01", "Sure. We spent thirty thousand dollars so far.", 4.5, 8.0),
            Turn("SPEAKER_02", "The pilot starts on Monday.", 8.5, 10.0),
            Turn("SPEAKER_00", "Great. Bob, can you send the report?", 10.5, 13.0),
            Turn("SPEAKER_01", "Yes, I will send it on Friday.", 13.5, 16.0),
            Turn("SPEAKER_02", "Bob, what did the new servers cost?", 16.5, 18.0),
            Turn("SPEAKER_01", "About two thousand dollars a month.", 18.5, 20.0)]
    session.add_transcript(Transcript(said))
    session.finish(timeout=120)
    assert "Bob" in session.transcript().speakers
    session.save()
    runtime.close_session("named")

    report = forget_source(runtime, "named", "Bob")
    assert report.speaker == "SPEAKER_01" and report.name == "Bob"
    resumed = runtime.resume_session("named")
    assert "Bob" not in resumed.transcript().speakers, resumed.transcript().speakers
    # His reply went with him: the question put to him is not called open (it is unknown, not unanswered).
    assert resumed.forgotten_names == ("Bob",)
    assert not any("servers" in q.text for q in resumed.summary().open_questions)
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

    forget_source(runtime, "kept-names", "SPEAKER_01")
    resumed = runtime.resume_session("kept-names")
    assert resumed.speakers() == {"SPEAKER_00": "Alice"}
    assert {t.speaker for t in resumed.transcript().turns} == {"Alice"}
    runtime.close_session("kept-names")


def test_a_speaker_is_forgotten_while_the_meeting_goes_on(session_parts):
    """A live meeting without a session store: the speaker heard so far is forgotten (what the recogniser still
    held is transcribed first, so none of it escapes), and the meeting goes on in the rebuilt session, which
    takes new audio and holds the KV of a meeting in which that speaker never spoke."""
    from app.live.forget import forget_in_live_meeting

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
    from app.live.forget import forget_in_live_meeting

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


def test_the_lineage_of_a_saved_meeting_is_what_its_timeline_says(session_parts):
    """Each speaker and the screen with the KV blocks their tokens sit in: every token of the timeline's lines is
    counted once, and a block is shared exactly when lines of two sources fall in it."""
    from app.live.forget import saved_lineage
    from app.live.lineage import SCREEN, source_of

    runtime, meeting = session_parts
    session = _meeting(runtime, meeting, "lin")
    session.save()
    timeline = session.timeline
    runtime.close_session("lin")
    found = {s.source: s for s in saved_lineage(runtime.session_store(), "lin", block_size=16)}
    assert set(found) == {"SPEAKER_00", "SPEAKER_01", SCREEN}
    assert found[SCREEN].segments == 2 and found[SCREEN].kind == "screen" and found["SPEAKER_01"].kind == "speaker"
    for source, held in found.items():
        lines = [seg for seg in timeline.segments() if source_of(seg) == source]
        assert held.tokens == sum(seg.token_end - seg.token_start for seg in lines) > 0
        for block in held.blocks:
            inside = {source_of(seg) for seg in timeline.segments_for_tokens(block * 16, (block + 1) * 16)} - {None}
            assert source in inside
        shared = [b for b in held.blocks
                  if len({source_of(seg) for seg in timeline.segments_for_tokens(b * 16, (b + 1) * 16)} - {None}) > 1]
        assert held.shared == len(shared)
    assert sum(s.shared for s in found.values()) > 0  # a turn ends mid-block: lineage is per source, not per block


def test_the_screen_is_forgotten_with_every_slide_it_showed(scripted_runtime, tmp_path):
    """`forget --source screen`: the slides leave the meeting, the timeline and the KV (which is then the one of
    a meeting nobody shared a screen in), a figure only the screen showed is no longer answered, the words stay,
    the old key is shredded (a backup of its blocks cannot be read) and the audit log says what went."""
    from app.live.forget import saved_lineage
    from app.live.lineage import SCREEN
    from tests.scripted_parts import scripted_meeting

    meeting = scripted_meeting([
        ("SPEAKER_00", "Good morning. The pilot will cost twelve thousand dollars."),
        ("SPEAKER_01", "Fine. Maria will send the contract on Friday."),
    ], slides=["Venue\nDeposit: $4,500", "Next steps\nContract by Friday"])
    runtime = scripted_runtime(meeting, tmp_path / "home")
    try:
        session = _meeting(runtime, meeting, "shared")
        assert "4,500" in session.ask("How much is the deposit?").text
        session.save()
        words, position = session.transcript().words, session.stream_seconds
        runtime.close_session("shared")
        store = runtime.session_store()
        encrypted = store._inner
        copies = [("shared", b, encrypted.inner.get("shared", b)) for b in encrypted.list("shared")]
        held = {s.source: s for s in saved_lineage(store, "shared", runtime.settings.kv.block_size)}[SCREEN]

        report = forget_source(runtime, "shared", "Slides")
        assert (report.forgotten, report.speaker, report.slides_removed, report.slides) == (SCREEN, None, 2, 0)
        assert (report.words_removed, report.words_kept) == (0, len(words))
        assert (report.blocks, report.shared_blocks) == (len(held.blocks), held.shared) and report.blocks > 0
        assert report.source == "mic-without-screen" and store.sources("shared") == [report.source]
        assert encrypted.verify_shredded("mic", copies)

        resumed = runtime.resume_session("shared")
        assert resumed.snapshot().slides == [] and not resumed.timeline.segments_in(0, 1e9, modality="video")
        assert [(w.text, w.start) for w in resumed.transcript().words] == [(w.text, w.start) for w in words]
        assert SCREEN not in {s.source for s in saved_lineage(store, "shared", runtime.settings.kv.block_size)}
        answer = resumed.ask("How much is the deposit?")
        assert "4,500" not in answer.text and "twelve" in resumed.ask("How much will the pilot cost?").text.lower()
        probe = "\nQuestion: How much is the deposit?\nAnswer:"
        after, tokens = resumed._context.next_token_logits(probe), resumed.kv_stats()["tokens"]
        runtime.close_session("shared")

        never = runtime.new_session("never", source="mic")  # the same words, no screen shared
        never.add_transcript(Transcript(turns_from_words(words)), until=position)
        never.finish(timeout=120)
        assert never.kv_stats()["tokens"] == tokens and torch.equal(never._context.next_token_logits(probe), after)
        runtime.close_session("never")

        log = [json.loads(line) for line in (runtime.settings.home / "audit.log").read_text().splitlines()]
        forgot = [r for r in log if r["details"].get("forgot")]
        assert len(forgot) == 1 and forgot[0]["source"] == SCREEN
        assert forgot[0]["details"]["kind"] == "screen" and forgot[0]["details"]["slides_removed"] == 2
        assert forgot[0]["details"]["blocks"] == report.blocks
    finally:
        runtime.close()


def test_the_screen_is_forgotten_while_the_meeting_goes_on(session_parts):
    """In a live meeting ("forget: screen" in a bot room, the page's Forget box): what the screen showed so far
    goes; the speakers' words stay; later frames are read again (the screen is still shared)."""
    from app.live.forget import forget_in_live_meeting

    runtime, meeting = session_parts
    session = _meeting(runtime, meeting, "live-screen")
    rebuilt, report = forget_in_live_meeting(runtime, session, "screen", timeout=120)
    assert (report.forgotten, report.slides_removed, report.words_removed) == ("screen", 2, 0)
    assert rebuilt.snapshot().slides == [] and "contract" in " ".join(w.text for w in rebuilt.transcript().words)
    runtime.close_session("live-screen")


def test_a_speaker_named_mid_meeting_is_one_source_with_all_their_blocks():
    """Issue 49 F7: lines committed after a speaker was named hold the name on the timeline; the listing showed
    "Carol" and "SPEAKER_05" apart, and a forget of SPEAKER_05 reported 0 blocks."""
    from app.live.lineage import blocks_of, lineage
    from kvstore.timeline import TimelineIndex

    timeline = TimelineIndex()
    timeline.add("audio", 0.0, 2.0, 0, 40, speaker="SPEAKER_05", text="Hi, Carol here.")
    timeline.add("audio", 2.0, 4.0, 40, 90, speaker="SPEAKER_01", text="Hi Carol.")
    timeline.add("audio", 4.0, 6.0, 90, 200, speaker="Carol", text="The pilot costs twelve thousand.")
    names = {"SPEAKER_05": "Carol"}
    carol = blocks_of(timeline, 64, "SPEAKER_05", names)
    assert carol is not None and carol.blocks == (0, 1, 2, 3) and carol.tokens == 40 + 110 and carol.name == "Carol"
    assert [s.source for s in lineage(timeline, 64, names)] == ["SPEAKER_05", "SPEAKER_01"]
    assert {s.source for s in lineage(timeline, 64)} == {"SPEAKER_05", "SPEAKER_01", "Carol"}  # unnamed: as saved


def test_a_saved_meeting_is_in_the_library_and_a_forget_reaches_it(session_parts, monkeypatch):
    """Issue 51: a saved meeting that has ended is recorded in the meeting library under its session id; forgetting
    a speaker records the rebuilt meeting over it, so the library keeps none of their words."""
    from app.library.record import open_library

    runtime, meeting = session_parts
    session = _meeting(runtime, meeting, "lib")
    session.save()
    runtime.close_session("lib")
    library = open_library(runtime.settings, create_key=False, embedder=False)
    try:
        record = library.get("lib")
        assert {"SPEAKER_00", "SPEAKER_01"} <= set(record.speakers) and library.started("lib")
        assert any(f.meeting == "lib" for f in library.search("contract"))
        forget_source(runtime, "lib", "SPEAKER_01")
        record = library.get("lib")
        assert "SPEAKER_01" not in record.speakers and library.search("contract") == []
        assert "contract" not in json.dumps(record.transcript) + record.summary
    finally:
        library.close()
    # forgetting in the library alone would come back at the meeting's next save: the command says where to forget
    from typer.testing import CliRunner

    from app.cli import app

    monkeypatch.setenv("MINUTIA_HOME", str(runtime.settings.home))
    said = CliRunner().invoke(app, ["library", "forget", "lib", "--speaker", "SPEAKER_00"])
    assert isinstance(said.exception, InputError) and "minutia forget --session lib" in str(said.exception)
