"""A MeetingSession end to end on stand-in parts (tests/scripted_parts.py: a recogniser that reads words from
tones, a diarizer that knows whose voice it hears, a vision pipeline whose OCR and CLIP read scripted slides; the
tiny in-process Gemma 3): the session's own work — committing words, closing lines, showing slides, prefilling
the KV, answering, saving and resuming — runs for real, with no model to provision."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.live.events import LineClosed, SlideShown, WordsCommitted
from encoders.errors import InputError

RATE = 16000


def _replay(session, audio) -> None:
    for start in range(0, len(audio), RATE // 2):
        session.feed_audio(audio[start:start + RATE // 2], RATE)
    session.finish(timeout=120)


def test_a_recording_fed_as_fast_as_it_goes_is_decoded_in_the_same_steps_however_it_arrives(session_parts):
    """``decode_in_fixed_steps`` (replay at speed 0): the decode windows are the same whether the audio comes in one burst or trickles in with pauses a busy machine would cause."""
    import time

    runtime, meeting = session_parts
    recogniser = runtime.transcriber
    windows: list[list[int]] = []

    def recording(audio, options=None):
        windows[-1].append(len(audio))
        return type(recogniser).transcribe(recogniser, audio, options)

    recogniser.transcribe = recording
    texts = []
    for pause in (0.0, 0.13):
        windows.append([])
        session = runtime.new_session(f"fixed-{int(pause * 100)}")
        session.decode_in_fixed_steps()
        for n, start in enumerate(range(0, len(meeting.audio), RATE // 4)):
            session.feed_audio(meeting.audio[start:start + RATE // 4], RATE, wait=True)
            if pause and n % 3 == 0:
                time.sleep(pause)  # the decoder catches up and waits: a live loop would decode shorter steps
        session.finish(timeout=120)
        texts.append([t.text for t in session.transcript().turns])
    del recogniser.transcribe
    assert windows[0] == windows[1] and len(windows[0]) >= 3, windows
    assert texts[0] == texts[1] and texts[0]


def test_the_live_recogniser_gets_the_configured_whisper_window(scripted_runtime, tmp_path):
    """``asr.stream_window_margin_seconds`` reaches every live decode (the encoder sees the buffer plus that much
    padding instead of a 30 s window); unset, the decodes ask for the whole window."""
    from tests.scripted_parts import scripted_meeting

    meeting = scripted_meeting([("SPEAKER_00", "Good morning."), ("SPEAKER_01", "The pilot costs twelve.")])
    for margin in (None, 2.5):
        runtime = scripted_runtime(meeting, tmp_path / str(margin), asr={"stream_window_margin_seconds": margin})
        recogniser, margins = runtime.transcriber, []

        def recording(audio, options=None, recogniser=recogniser, margins=margins):
            margins.append(options.window_margin_seconds)
            return type(recogniser).transcribe(recogniser, audio, options)

        recogniser.transcribe = recording
        try:
            _replay(runtime.new_session("window"), meeting.audio)
        finally:
            runtime.close()
        assert margins and set(margins) == {margin}, margins


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


def test_slides_become_lines_once_each_and_reach_the_timeline(session_parts):
    """Slide 0, slide 1, then slide 0 again, at 2 frames a second beside the audio: the real keyframe detector and
    de-duplication run on the stand-in OCR and CLIP, so each slide is shown once, enters the KV as a line of its
    own, and is found on the timeline by its embedding."""
    runtime, meeting = session_parts
    session = runtime.new_session("shown")
    events: list = []
    session.subscribe(events.append)
    for second, number in enumerate([0, 0, 1, 1, 1, 0, 0]):
        for half in (0.0, 0.5):
            session.feed_video(meeting.slide_frame(number), second + half, wait=True)
    _replay(session, meeting.audio)
    assert session.wait_until_prefilled(timeout=60)

    shown = [e.slide for e in events if isinstance(e, SlideShown)]
    assert [(s.time, s.text) for s in shown] == [(0.0, "Budget; Pilot: $12,000"),
                                                 (2.0, "Next steps; Contract by Friday")]
    assert [s.text for s in session.snapshot().slides] == [s.text for s in shown]
    assert session.kv_stats()["lines"] == 4 + 2  # the spoken lines and one line per slide
    query = meeting.vision().embedder.embed_texts([meeting.slides[1]])[0]
    hit = session.timeline.top_segments(1, query=query, modality="video")
    assert hit and hit[0].segment.start_s == 2.0 and hit[0].segment.text == shown[1].text


def test_a_short_slide_is_not_lost_while_a_slow_reader_works(scripted_runtime, tmp_path):
    """A replay far faster than real time: 20 frames of slide 0, 3 of slide 1, 20 of slide 2, all at once, while
    reading the first slide takes a second (a model loading). Keyframes are found as frames arrive, so only three
    wait for the reader and slide 1 is shown (with the frames themselves queued, the 40 frames after the first
    pushed it out of the 8-frame queue)."""
    import time

    from scripted_parts import ScriptedEmbedder, ScriptedSlideReader, scripted_meeting

    from encoders.vision import VisionPipeline

    meeting = scripted_meeting([("SPEAKER_00", "Here are the slides.")], slides=["Agenda", "Price\n$12,000", "Plan"])

    class SlowFirstRead(ScriptedSlideReader):
        reads = 0

        def read(self, frame):
            SlowFirstRead.reads += 1
            if SlowFirstRead.reads == 1:
                time.sleep(1.0)
            return super().read(frame)

    def vision() -> VisionPipeline:
        return VisionPipeline(reader=SlowFirstRead(meeting.slides), embedder=ScriptedEmbedder(meeting.slides))

    runtime = scripted_runtime(meeting, tmp_path, vision=vision)
    try:
        session = runtime.new_session("fast")
        shown: list = []
        session.subscribe(lambda e: shown.append(e.slide.text) if isinstance(e, SlideShown) else None)
        frames = [0] * 20 + [1] * 3 + [2] * 20
        for k, number in enumerate(frames):
            session.feed_video(meeting.slide_frame(number), k * 1.0)
        _replay(session, meeting.audio)
        assert session.wait_until_prefilled(timeout=60)
        assert shown == ["Agenda", "Price; $12,000", "Plan"], shown
        assert session.snapshot().counters["video_dropped_frames"] == 0
    finally:
        runtime.close()


def test_bad_input_is_refused_for_that_request_only(session_parts):
    runtime, meeting = session_parts
    session = runtime.new_session("done")
    _replay(session, meeting.audio)
    with pytest.raises(InputError):
        session.ask("   ")
    with pytest.raises(InputError):
        session.feed_audio(np.zeros(100, dtype=np.float32), 16000)  # finished sessions take no more input
    other = runtime.new_session()
    with pytest.raises(InputError):
        other.feed_video(np.zeros((4, 4), dtype=np.uint8))
    with pytest.raises(InputError):
        other.feed_audio(np.full(10, np.nan, dtype=np.float32), 16000)
    assert other.snapshot().state in ("idle", "live")
    runtime.close_session(other.session_id)
    assert session.ask("How much will the pilot cost?").text  # the finished meeting still answers


def test_a_resumed_meetings_cold_blocks_keep_its_source(scripted_runtime, tmp_path):
    """The blocks a resumed meeting holds in its cold tier are tagged with the meeting's source, as they were
    before the save, so forgetting that source reaches them (they were tagged with no source at all)."""
    from app.text.transcript import Transcript, Turn
    from tests.scripted_parts import scripted_meeting

    meeting = scripted_meeting([("SPEAKER_00", "Good morning.")])
    runtime = scripted_runtime(meeting, tmp_path, kv={"block_size": 8, "budget_floor_tokens": 0, "recent_tokens": 16,
                                                      "cold": {"spill_to_store": False}})
    try:
        session = runtime.new_session("long", source="mic")
        said = [Turn(f"SPEAKER_0{i % 2}", f"Item {i}: the team reviewed budget line {i} and agreed on the next step.",
                     i * 5.0, i * 5.0 + 4.0) for i in range(40)]
        session.add_transcript(Transcript(said))
        session.finish(timeout=120)
        cold = session._context.cache.cold_tier
        assert cold is not None and cold.placement.blocks, "nothing was evicted to the cold tier"
        assert {info.source for info in cold.placement.blocks.values()} == {"mic"}
        session.save()
        runtime.close_session("long")
        log = runtime.settings.home / "audit.log"
        before = len(log.read_text().splitlines())
        resumed = runtime.resume_session("long")
        records = [json.loads(line) for line in log.read_text().splitlines()[before:]]
        assert sum("manifest" in r["blocks"] for r in records if r["op"] in ("get", "read")) == 1  # read once, not twice
        placement = resumed._context.cache.cold_tier.placement
        assert placement.blocks and {info.source for info in placement.blocks.values()} == {"mic"}
        runtime.close_session("long")
    finally:
        runtime.close()


def test_the_snapshot_says_how_far_the_recogniser_has_decoded(session_parts):
    """The page's progress line (issue 23) reads ``decoded_seconds`` beside ``stream_seconds``: audio fed
    while the recogniser is held back is heard but not yet transcribed; once it catches up both agree."""
    import threading

    runtime, meeting = session_parts
    recogniser = runtime.transcriber
    gate = threading.Event()

    def held(audio, options=None):
        gate.wait(60)
        return type(recogniser).transcribe(recogniser, audio, options)

    recogniser.transcribe = held
    try:
        session = runtime.new_session("progress")
        session.feed_audio(meeting.audio, RATE, wait=True)
        snapshot = session.snapshot()
        assert snapshot.stream_seconds == pytest.approx(len(meeting.audio) / RATE, abs=0.01)
        assert snapshot.decoded_seconds < snapshot.stream_seconds - 1.0
        gate.set()
        session.finish(timeout=120)
    finally:
        gate.set()
        del recogniser.transcribe
    done = session.snapshot()
    assert done.decoded_seconds == pytest.approx(done.stream_seconds, abs=0.01)


def test_a_worker_failure_ends_the_session_with_a_plain_message(session_parts):
    """The page and the bot show the session's error: no exception names, paths or errnos (issue 23)."""
    runtime, meeting = session_parts
    recogniser = runtime.transcriber

    def broken(audio, options=None):
        raise OSError(2, "No such file or directory", "/home/someone/.cache/minutia/models/whisper/model.bin")

    recogniser.transcribe = broken
    try:
        session = runtime.new_session("broken")
        session.feed_audio(meeting.audio, RATE, wait=True)
        session.finish(timeout=60)
    finally:
        del recogniser.transcribe
    snapshot = session.snapshot()
    assert snapshot.state == "error"
    assert "speech stopped" in snapshot.error and "server log" in snapshot.error
    for leak in ("/home", "Errno", "OSError", "model.bin"):
        assert leak not in snapshot.error


def test_a_speaker_renamed_by_the_user_keeps_the_name_in_answers_and_after_a_resume(session_parts):
    """The user knows who SPEAKER_01 is: the name holds over what the meeting says, reaches "who" answers, and is
    saved with the meeting; a name already taken, an empty name or an unknown speaker are refused."""
    from app.text.transcript import Transcript, Turn

    runtime, _ = session_parts
    session = runtime.new_session("renamed", source="mic")
    session.add_transcript(Transcript([
        Turn("SPEAKER_00", "Good morning. I am Alice and I run the pilot.", 0.0, 4.0),
        Turn("SPEAKER_01", "I will send the report to the board on Friday.", 4.5, 8.0),
    ]))
    session.finish(timeout=120)
    assert session.speakers() == {"SPEAKER_00": "Alice", "SPEAKER_01": None}
    with pytest.raises(InputError, match="already names another speaker"):
        session.rename_speaker("SPEAKER_01", "Alice")
    with pytest.raises(InputError, match="1-40 characters"):
        session.rename_speaker("SPEAKER_01", "  ")
    with pytest.raises(InputError, match="no speaker 'Zed'"):
        session.rename_speaker("Zed", "Dana")
    lines = session.kv_stats()["lines"]
    assert session.rename_speaker("SPEAKER_01", " Dana ") == "SPEAKER_01"
    assert session.speakers() == {"SPEAKER_00": "Alice", "SPEAKER_01": "Dana"}
    assert "Dana" in session.ask("Who will send the report?").text
    assert session.rename_speaker("Alice", "Alicia") == "SPEAKER_00"  # by the name it goes by now
    # the KV's lines keep the speaker they were written with: a note after them, in the KV and on its timeline,
    # tells the model who that is now (the meeting had finished: the note is prefilled by the rename itself)
    assert session.wait_until_prefilled(60) and session.kv_stats()["lines"] == lines + 2
    notes = [seg.text for seg in session.timeline.segments() if seg.modality == "text"]
    assert notes == ["The speaker written above as SPEAKER_01 is Dana.",
                     "The speaker written above as Alice or SPEAKER_00 is Alicia."], notes
    session.save()
    runtime.close_session("renamed")
    resumed = runtime.resume_session("renamed")
    assert resumed.speakers() == {"SPEAKER_00": "Alicia", "SPEAKER_01": "Dana"}
    runtime.close_session("renamed")


def test_every_committed_word_lands_in_the_commit_latency_histogram_on_metrics(session_parts):
    """The histogram counts every word of the meeting (the recent-lags list keeps 2,000), as /metrics shows it."""
    from prometheus_client.parser import text_string_to_metric_families

    from app.platform.metrics import Metrics
    from app.live.session_speech import LagHistogram

    runtime, meeting = session_parts
    session = runtime.new_session("latency")
    _replay(session, meeting.audio)
    snap = session.snapshot()
    words, lags = snap.counters["committed_words"], session.commit_lags()
    assert words > 0 and snap.counters["commit_lag_count"] == words == len(lags)
    buckets = dict(snap.counters["commit_lag_buckets"])
    assert buckets[60.0] == sum(lag <= 60.0 for lag in lags) and buckets[1.0] == sum(lag <= 1.0 for lag in lags)
    text = Metrics(lambda: [("latency", session)]).render()[0].decode()
    samples = {(s.name, s.labels.get("le")): s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name.startswith("minutia_asr_commit_latency_seconds")}
    assert samples[("minutia_asr_commit_latency_seconds_count", None)] == words
    assert samples[("minutia_asr_commit_latency_seconds_bucket", "+Inf")] == words
    assert samples[("minutia_asr_commit_latency_seconds_sum", None)] == pytest.approx(sum(lags))
    histogram = LagHistogram()
    for seconds in (0.2, 0.5, 0.7, 4.0, 100.0):
        histogram.observe(seconds)
    assert histogram.cumulative()[:5] == [(0.5, 2), (1.0, 3), (2.0, 3), (3.0, 3), (5.0, 4)] and histogram.count == 5


@pytest.mark.parametrize("fixed_steps", [True, False], ids=["speed-0", "real-time"])
@pytest.mark.parametrize("moment", ["middle", "last-word", "past-the-end"])
def test_asking_at_a_moment_waits_for_its_words_and_always_returns(session_parts, fixed_steps, moment):
    """``live --ask-at T`` (issue 49): the question waits until words are committed up to T, however fast the
    recording is fed, and returns when T is at the last word or past the end (the recogniser holds its last words,
    and less than one fixed step of audio, until the input ends: waiting for them used to hang)."""
    import threading

    runtime, meeting = session_parts
    session = runtime.new_session(f"at-{moment}-{fixed_steps}")
    if fixed_steps:
        session.decode_in_fixed_steps()
    last_word = meeting.turns[-1][1] - 0.1  # a turn's end counts the gap after its last word
    at = {"middle": last_word / 2, "last-word": last_word - 0.05, "past-the-end": last_word + 100}[moment]

    def feed() -> None:
        for start in range(0, len(meeting.audio), RATE // 4):
            session.feed_audio(meeting.audio[start:start + RATE // 4], RATE, wait=fixed_steps)

    feeder = threading.Thread(target=feed, daemon=True)
    asking = threading.Thread(target=session.wait_until_committed, args=(at, lambda: not feeder.is_alive()),
                              daemon=True)
    feeder.start()
    asking.start()
    asking.join(timeout=90)
    assert not asking.is_alive(), f"still waiting at {session.committed_seconds:.2f} s for {at:.2f} s"
    assert session.committed_seconds >= min(at, last_word - 0.1), (session.committed_seconds, at)
    if moment != "middle":  # the whole meeting is in: what was said at the end can be asked about
        assert "Friday." in session.transcript().turns[-1].text
    session.finish(timeout=60)
