"""Saved meetings are never overwritten by accident, and one session id is written by one process at a time.

Real Runtimes over the tiny in-process Gemma 3, a real encrypted disk store in a temporary home; a second
Runtime on the same home stands for a second process (an flock conflicts across open files).
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from app.config import load_settings
from app.runtime import Runtime
from encoders.errors import InputError


def _runtime(home, tiny_llm_dir) -> Runtime:
    return Runtime(load_settings(overrides={"home": str(home), "llm": {"model": str(tiny_llm_dir)}}))


def _saved_meeting(runtime: Runtime, session_id: str, seconds: float, **kwargs) -> None:
    session = runtime.new_session(session_id, autosave=True, **kwargs)
    session.feed_audio(np.zeros(int(16000 * seconds), np.float32), 16000)
    session.finish()
    session.save()
    runtime.close_session(session_id)


def test_a_saved_meeting_is_not_overwritten_without_replace(tmp_path, tiny_llm_dir):
    runtime = _runtime(tmp_path, tiny_llm_dir)
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


def test_one_writer_per_session_id(tmp_path, tiny_llm_dir):
    first, second = _runtime(tmp_path, tiny_llm_dir), _runtime(tmp_path, tiny_llm_dir)
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
        "import sys, time; from pathlib import Path; from app.store import SessionClaim; "
        "claim = SessionClaim(Path(sys.argv[1]), 'crashy'); print('held', flush=True); time.sleep(60)"), str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        from app.store import SessionClaim

        with pytest.raises(InputError, match=f"pid {holder.pid}"):
            SessionClaim(tmp_path, "crashy")
        holder.kill()
        holder.wait(10)
        time.sleep(0.1)
        SessionClaim(tmp_path, "crashy").release()
    finally:
        holder.kill()
