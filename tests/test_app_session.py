"""The live session: the bundled stand-up replayed into a MeetingSession with the real embedded models.

Whisper base transcribes as the audio arrives, the online diarizer labels the committed words, the
closed lines are prefilled into Gemma 3 270M's TieredCache and a question is answered from it.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from app.platform.config import load_settings
from app.platform.models import EMBEDDED_ASR, EMBEDDED_LLM, models_dir
from app.live.runtime import Runtime
from app.live.replay import replay
from encoders.audio import to_mono_16k
from encoders.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
STANDUP = ROOT / "samples" / "standup"
sys.path.insert(0, str(ROOT / "samples"))
from textnorm import normalize  # noqa: E402

_HOME = load_settings().home
_MISSING = [m for m in (EMBEDDED_ASR, EMBEDDED_LLM) if not (models_dir(_HOME) / m / ".minutia-complete").is_file()]
needs_models = pytest.mark.skipif(bool(_MISSING), reason=f"embedded models {_MISSING} not provisioned in {_HOME}")


def _wer(reference: str, hypothesis: str) -> float:
    import jiwer

    return jiwer.wer(normalize(reference), normalize(hypothesis))


@pytest.fixture(scope="module")
def store_env(tmp_path_factory) -> dict[str, str]:
    """A session store and master key of the test's own (never the user's home)."""
    from kvstore.crypto import MasterKey

    folder = tmp_path_factory.mktemp("store")
    MasterKey.generate(folder / "master.key")
    return {"MINUTIA_STORE__PATH": str(folder / "sessions"), "MINUTIA_STORE__KEY_FILE": str(folder / "master.key")}


@pytest.fixture(scope="module")
def runtime(store_env):
    overrides = {"store": {"path": store_env["MINUTIA_STORE__PATH"], "key_file": store_env["MINUTIA_STORE__KEY_FILE"]}}
    rt = Runtime(load_settings(overrides=overrides))
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def replayed(runtime):
    """The stand-up replayed as fast as the models go, with a question asked while it is still running.

    Speed 0 decodes in fixed steps (``decode_in_fixed_steps``): at a multiple of real time the decode windows,
    and so the words, followed the machine's speed, and a slower CI machine heard other words."""
    session = runtime.new_session(source="standup")
    events: list = []
    session.subscribe(events.append)
    mid_answer: list = []
    feeder = threading.Thread(target=replay, args=(session, STANDUP / "meeting.ogg"), kwargs={"speed": 0, "finish": False})
    feeder.start()
    # Mid-meeting: once the pilot's price has been committed, ask about it while the meeting goes on.
    import time

    started = time.time()
    while time.time() - started < 300 and session.snapshot().state != "error":
        words = session.snapshot().transcript.words
        if re.search(r"cost \$?12\b", " ".join(w.text.lower() for w in words)):
            mid_answer.append((session.ask("How much will the pilot cost?"), len(words)))
            break
        time.sleep(0.2)
    feeder.join()
    session.finish(timeout=300)
    return session, events, mid_answer


@needs_models
def test_live_transcript_matches_the_reference(replayed):
    session, events, _ = replayed
    snap = session.snapshot()
    assert snap.state == "finished", snap.error
    reference = json.loads((STANDUP / "reference.json").read_text())
    ref_text = " ".join(t["text"] for t in reference["turns"])
    hyp_text = " ".join(t.text for t in snap.transcript.turns)
    assert _wer(ref_text, hyp_text) < 0.10
    assert snap.tentative == ""
    kinds = {e.kind for e in events}
    assert {"words", "line", "state"} <= kinds


@needs_models
def test_live_speakers_are_named_and_stable(replayed):
    session, _, _ = replayed
    snap = session.snapshot()
    speakers = snap.transcript.speakers
    assert {"Alice", "Bob", "Carol"} <= set(speakers), speakers
    reference = json.loads((STANDUP / "reference.json").read_text())
    # Word-level speaker accuracy against the script's turns (by time).
    ref_turns = [(t["start"], t["end"], t["speaker"]) for t in reference["turns"]]
    right = total = 0
    for word in snap.transcript.words:
        mid = (word.start + word.end) / 2
        gold = next((s for a, b, s in ref_turns if a - 0.3 <= mid <= b + 0.3), None)
        if gold is not None:
            total += 1
            right += gold == word.speaker
    assert total > 100 and right / total > 0.85, (right, total)


@needs_models
def test_live_kv_holds_the_meeting_as_audio_tokens(replayed):
    session, _, _ = replayed
    snap = session.snapshot()
    kv = snap.kv
    assert kv["tokens"] > 300 and kv["lines"] >= 10
    assert kv["bytes_by_modality"].get("audio", 0) > 0
    # Under the live budget's floor (2048 tokens) nothing is compressed yet: what is held is the full
    # cache plus the per-block metadata (key bounds, scores), which must stay a small share.
    assert kv["tokens"] < 2048 and 0 < kv["tiered_kv_bytes"] <= 1.2 * kv["full_precision_bytes"]
    # The timeline maps stream time to the tokens of the lines spoken then.
    ranges = session.timeline.tokens_in(20.0, 40.0)
    assert ranges and all(0 < a < b <= kv["tokens"] for a, b in ranges)


@needs_models
def test_question_mid_meeting_and_after(replayed):
    session, events, mid = replayed
    assert mid, "the question was not asked mid-meeting"
    answer, words_then = mid[0]
    assert "12" in answer.text, answer
    assert answer.citations and answer.citations[0].start is not None
    assert len(session.transcript().words) > words_then + 50  # the meeting went on after the question
    answer = session.ask("When is the release?")
    assert "april" in answer.text.lower() and "14" in answer.text, answer
    assert any("april" in c.text.lower() for c in answer.citations)
    answer = session.ask("Who will send the new contract to the payment company?")
    assert answer.text.startswith("Bob"), answer
    assert session.ask("How much will the catering cost?").text == "The meeting does not say."
    assert any(e.kind == "answer" for e in events)
    # Rolled back: questions leave nothing in the meeting's cache.
    assert session.snapshot().kv["tokens"] == session._context.tokens == session._context.cache.get_seq_length()


@needs_models
def test_summary_and_action_items(replayed):
    session, _, _ = replayed
    summary = session.summary()
    assert summary.summary.startswith("The meeting was about")
    items = session.action_items()
    # Three commitments in the meeting (contract, budget, test plan); streaming ASR and online speaker
    # labels may garble or cut one of them, the contract one is said in one clean sentence.
    assert len(items) >= 2 and any("contract" in item.task.lower() for item in items), items


def test_audio_layouts_become_mono_16k():
    stereo48 = np.stack([np.sin(np.linspace(0, 200, 48000)), np.zeros(48000)], axis=1).astype(np.float32)
    out = to_mono_16k(stereo48, 48000)
    assert out.dtype == np.float32 and out.ndim == 1 and abs(len(out) - 16000) <= 2
    pcm = (np.ones((2, 1600)) * 16384).astype(np.int16)  # (channels, n) from a WebRTC frame
    out = to_mono_16k(pcm, 16000)
    assert out.shape == (1600,) and np.allclose(out, 0.5, atol=1e-3)
    with pytest.raises(InputError):
        to_mono_16k(np.zeros((2, 2, 2)), 16000)
    with pytest.raises(InputError):
        to_mono_16k(np.zeros(10), 0)


@needs_models
def test_minutia_live_replays_a_video_meeting(tmp_path):
    """The command a user runs: words and slides appear as they are committed; a question is answered mid-replay."""
    import os
    import subprocess

    script = Path(sys.executable).with_name("minutia")
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "app.cli"]
    proc = subprocess.run(
        [*cmd, "live", str(ROOT / "samples" / "standup-video"), "--speed", "0", "--until", "42", "--ask",
         "How much will the pilot cost?", "--ask-at", "36", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "slide at" in out and "Budget" in out
    assert re.search(r"^\d\d:\d\d (Alice|Bob|Carol): ", out, re.M), out[:2000]
    answer = re.search(r"^answer: (.*)$", out, re.M)
    assert answer and "12" in answer.group(1), out[-2000:]
    assert (tmp_path / "meeting.json").is_file() and (tmp_path / "meeting.srt").is_file()
    memory = re.search(r"holds the meeting in ([\d.]+) MB: ([\d.]+) MB of it \(([\d.]+) MB uncompressed\) and ([\d.]+) MB of "
                       r"index", " ".join(proc.stderr.split()))
    assert memory, proc.stderr[-2000:]
    held, payload, full, index = map(float, memory.groups())
    assert 0 < payload <= full + 0.01 and 0 < index < held  # the meeting itself never takes more than uncompressed
    transcript = json.loads((tmp_path / "meeting.json").read_text())
    assert 30 < transcript["duration"] <= 42.5, transcript["duration"]  # --until 42: the rest is not replayed
    bad = subprocess.run([*cmd, "live", str(ROOT / "README.md")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "error:" in bad.stderr


@needs_models
def test_saved_meeting_resumes_without_prefill_and_same_logits(replayed, runtime, store_env):
    """Durable sessions: save, drop the session, load it back: same next-token logits, then a restart."""
    import os
    import subprocess

    import torch

    session, _, _ = replayed
    probe = "\nQuestion: Who will update the budget?\nAnswer:"
    before = session._context.next_token_logits(probe)
    report = session.save()
    assert report.blocks > 0 and report.bytes_written > 0
    again = session.save()  # incremental: nothing changed, nothing rewritten
    assert again.blocks_written <= 2
    words = len(session.transcript().words)
    runtime.close_session(session.session_id)
    resumed = runtime.resume_session(session.session_id)
    after = resumed.kv_stats() and resumed._context.next_token_logits(probe)
    assert torch.equal(before.argmax(), after.argmax())
    assert (before - after).abs().max().item() <= 1e-5
    assert len(resumed.transcript().words) == words and resumed.snapshot().slides == []
    assert resumed._context.tokens == report.seq_length  # loaded, not prefilled again
    runtime.close_session(resumed.session_id)

    # A restart: another process resumes the meeting from the encrypted store and answers from it.
    script = Path(sys.executable).with_name("minutia")
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "app.cli"]
    proc = subprocess.run([*cmd, "resume", session.session_id, "--ask", "When is the release?", "--json"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **store_env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["seq_length"] == report.seq_length and data["words"] == words
    assert "april" in data["answers"][0]["text"].lower()
    missing = subprocess.run([*cmd, "resume", "no-such-meeting"], capture_output=True, text=True, timeout=300,
                             cwd=ROOT, env={**os.environ, **store_env})
    assert missing.returncode == 2 and "no saved session" in missing.stderr
