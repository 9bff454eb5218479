"""A recording fed into a live meeting as if it were happening now (the page's replay, `minutia live REC`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from app.live.session import MeetingSession
from encoders.audio import SAMPLE_RATE
from encoders.errors import InputError


def replay(
    session: MeetingSession,
    path: str | Path,
    speed: float = 1.0,
    stop: threading.Event | None = None,
    chunk_seconds: float = 0.5,
    finish: bool = True,
    until: float | None = None,
) -> None:
    """Feed a recording into ``session`` as if it were live (``speed`` x real time; 0 = as fast as possible),
    up to ``until`` seconds of it when given."""
    from encoders.media import iter_media

    if speed < 0:
        raise InputError("speed must be >= 0")
    if until is not None and until <= 0:
        raise InputError("until must be > 0 seconds")
    if speed == 0:
        session.decode_in_fixed_steps()
    started = time.perf_counter()
    for item in iter_media(Path(path), chunk_seconds=chunk_seconds):
        if stop is not None and stop.is_set():
            break
        if until is not None and item.time >= until:
            break
        if speed > 0:
            delay = started + item.time / speed - time.perf_counter()
            if delay > 0:
                if stop is not None:
                    if stop.wait(delay):
                        break
                else:
                    time.sleep(delay)
        if item.audio is not None:
            session.feed_audio(item.audio, SAMPLE_RATE, wait=speed == 0)
        if item.frame is not None:
            session.feed_video(item.frame, item.time, wait=speed == 0)
    if finish:
        session.finish()
