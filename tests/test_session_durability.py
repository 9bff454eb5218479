"""Saved meetings: never overwritten by accident, written by one process at a time, and a SIGKILL mid-meeting
loses at most the last checkpoint interval, with transcript, KV and position that agree.

Real Runtimes over the tiny in-process Gemma 3, a real encrypted disk store in a temporary home; a second
Runtime on the same home stands for a second process (an flock conflicts across open files). Names and claims
need no words: those Runtimes hear through the stand-in recogniser (tests/scripted_parts.py); the `minutia live`
runs below are other processes, which load the provisioned Whisper.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from scripted_parts import scripted_meeting

from app.platform.config import load_settings
from app.platform.models import EMBEDDED_ASR, models_dir
from app.live.runtime import Runtime
from encoders.errors import InputError


_ASR = models_dir(load_settings().home) / EMBEDDED_ASR  # the provisioned Whisper, read from its own folder


_SCRIPT = scripted_meeting([("SPEAKER_00", "Hello.")])  # never said: the meetings below are silence


def _runtime(home, tiny_llm_dir) -> Runtime:
    if not (_ASR / ".minutia-complete").is_file():
        pytest.skip(f"the embedded ASR model is not provisioned in {_ASR.parent}")
    return Runtime(load_settings(overrides={"home": str(home), "llm": {"model": str(tiny_llm_dir)},
                                            "asr": {"model": str(_ASR)}}))


def _saved_meeting(runtime: Runtime, session_id: str, seconds: float, **kwargs) -> None:
    session = runtime.new_session(session_id, autosave=True, **kwargs)
    session.feed_audio(np.zeros(int(16000 * seconds), np.float32), 16000)
    session.finish()
    session.save()
    runtime.close_session(session_id)


def test_a_saved_meeting_is_not_overwritten_without_replace(tmp_path, scripted_runtime):
    runtime = scripted_runtime(_SCRIPT, tmp_path)
    try:
        _saved_meeting(runtime, "kept", 3.0)
        with pytest.raises(InputError, match="already saved.*--replace"):
            runtime.new_session("kept", autosave=True)
        assert runtime.sessions() == []
        unsaved = runtime.new_session("kept")  # a session that does not save may reuse the name
        runtime.close_session(unsaved.session_id)
        _saved_meeting(runtime, "kept", 1.0, replace=True)
        resumed = runtime.resume_session("kept")
        assert resumed.stream_seconds == pytest.approx(1.0)
        runtime.close_session("kept")
    finally:
        runtime.close()


def test_a_forget_waits_for_the_meeting_being_saved_elsewhere(tmp_path, scripted_runtime):
    """Issue 49 F1: forgetting a source of a meeting that another process is saving must be refused, or that process
    goes on saving under the shredded key and the meeting can no longer be read."""
    from app.live.forget import forget_source

    live, other = scripted_runtime(_SCRIPT, tmp_path), scripted_runtime(_SCRIPT, tmp_path)
    try:
        live.new_session("L1", autosave=True)
        with pytest.raises(InputError, match="open in another process"):
            forget_source(other, "L1", "SPEAKER_00")
    finally:
        live.close()
        other.close()


def test_one_writer_per_session_id(tmp_path, scripted_runtime):
    first, second = scripted_runtime(_SCRIPT, tmp_path), scripted_runtime(_SCRIPT, tmp_path)
    try:
        first.new_session("dup", autosave=True)
        with pytest.raises(InputError, match="open in another process"):
            second.new_session("dup", autosave=True)
        first.close_session("dup")  # released: now the other one may take it
        second.new_session("dup", autosave=True)
        second.close_session("dup")
    finally:
        first.close()
        second.close()


def test_a_dead_process_leaves_no_lock(tmp_path, tiny_llm_dir):
    """SIGKILL of the holder: the kernel drops the flock, the name is free at once."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from app.platform.store import SessionClaim; "
        "claim = SessionClaim(Path(sys.argv[1]), 'crashy'); print('held', flush=True); time.sleep(60)"), str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        from app.platform.store import SessionClaim

        with pytest.raises(InputError, match=f"pid {holder.pid}"):
            SessionClaim(tmp_path, "crashy")
        holder.kill()
        holder.wait(10)
        time.sleep(0.1)
        SessionClaim(tmp_path, "crashy").release()
    finally:
        holder.kill()


STANDUP = Path(__file__).resolve().parent.parent / "samples" / "standup"
CHECKPOINT_SECONDS = 3.0
_LINE = re.compile(r"^(\d\d):(\d\d) (.+?): (.+)$")


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())


@pytest.mark.slow  # ~60 s: Whisper on the stand-up until a few checkpoints are written, then a resume
def test_sigkill_loses_at_most_the_last_checkpoint(tmp_path, tiny_llm_dir):
    """`minutia live --save` killed with SIGKILL mid-meeting: every line it printed more than a checkpoint
    interval before the kill is in the saved session, the saved words are exactly those of the saved
    lines, and the saved position is where those words end, not how much audio had arrived."""
    _runtime(tmp_path, tiny_llm_dir).close()  # skips when Whisper is not provisioned
    env = {**os.environ, "MINUTIA_HOME": str(tmp_path), "MINUTIA_LLM__MODEL": str(tiny_llm_dir),
           "MINUTIA_ASR__MODEL": str(_ASR), "MINUTIA_STORE__AUTOSAVE_SECONDS": str(CHECKPOINT_SECONDS),
           "COLUMNS": "1000"}
    live = subprocess.Popen([sys.executable, "-m", "app.cli", "live", str(STANDUP), "--speed", "0", "--save",
                             "--session", "crashed"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    printed: list[tuple[float, str]] = []  # (wall time printed, text)

    def read() -> None:
        for raw in live.stdout:
            match = _LINE.match(raw.strip())
            if match:
                printed.append((time.monotonic(), match.group(4)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and live.poll() is None:
            if printed and time.monotonic() - printed[0][0] > 4 * CHECKPOINT_SECONDS and len(printed) >= 6:
                break
            time.sleep(0.1)
        assert live.poll() is None, "the replay ended before it could be killed"
        live.kill()
        killed = time.monotonic()
        live.wait(30)
    finally:
        live.kill()
    reader.join(10)

    runtime = _runtime(tmp_path, tiny_llm_dir)
    try:
        session = runtime.resume_session("crashed")
        transcript = session.transcript()
        words = [w for turn in transcript.turns for w in turn.words]
        saved = _norm(" ".join(w.text for w in words))
        old = [text for at, text in printed if at < killed - CHECKPOINT_SECONDS - 5.0]
        assert old, printed
        for text in old:
            assert _norm(text) in saved, (text, saved)
        assert words and session.stream_seconds == pytest.approx(words[-1].end, abs=0.01)
        assert session.stream_seconds < 106  # the stand-up is 106 s: the replay had not finished
        stats = session.kv_stats()
        assert stats["lines"] >= len(old)
        runtime.close_session("crashed")
    finally:
        runtime.close()


def test_live_save_of_silence_fails_and_keeps_nothing(tmp_path, tiny_llm_dir):
    """3 s of silence through `live --save --out`: exit 2 with one `error:` line, no .srt, no saved session
    (it used to exit 0, write an empty .srt and save an empty meeting)."""
    import wave

    _runtime(tmp_path, tiny_llm_dir).close()
    quiet = tmp_path / "quiet.wav"
    with wave.open(str(quiet), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(b"\0\0" * 48000)
    env = {**os.environ, "MINUTIA_HOME": str(tmp_path / "home"), "MINUTIA_LLM__MODEL": str(tiny_llm_dir),
           "MINUTIA_ASR__MODEL": str(_ASR), "COLUMNS": "1000"}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "app.cli", "live", str(quiet), "--speed", "0", "--save",
                           "--session", "quiet", "--out", str(out)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == [
        "error: quiet.wav contains no speech"], proc.stderr
    assert not any(out.glob("*.srt"))
    runtime = _runtime(tmp_path / "home", tiny_llm_dir)
    try:
        with pytest.raises(InputError, match="no saved session"):
            runtime.resume_session("quiet")
    finally:
        runtime.close()
