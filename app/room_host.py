"""One room's meeting, hosted in one process and kept in the session store so that another process can take it over.

A :class:`RoomHost` runs a :class:`~app.session.MeetingSession` that checkpoints to the encrypted session store
(Redis when the rooms run on a cluster) every ``store.autosave_seconds`` of wall time. Made again with the same
session id after its process or node died, it resumes the meeting from the last checkpoint (KV cache, transcript,
timeline), and its client sends the audio from the checkpoint's position on again
(:class:`app.room_fleet.RemoteRoom`). Audio carries its stream time, so a chunk sent twice is heard once and a
chunk after a gap is refused until the gap is filled. Ray-free: the fleet wraps it in an actor.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Callable

import numpy as np

from app.config import Settings
from encoders.audio import SAMPLE_RATE as RATE

log = logging.getLogger(__name__)

_SLACK = 0.002  # stream seconds: a chunk's start within this of the host's clock continues it


@dataclass(frozen=True)
class RoomProgress:
    """Where a room's meeting stands in its host."""

    session_id: str
    stream_seconds: float  # audio heard so far, in stream time
    saved_seconds: float | None  # what the last checkpoint covers; a takeover brings the audio from here on again
    turns: int  # committed turns in the transcript
    state: str
    error: str | None
    resumed: bool  # this host took the meeting over from a checkpoint
    host: str  # hostname:pid of the process hosting the room


@dataclass(frozen=True)
class Fed:
    """The answer to :meth:`RoomHost.feed`: the host's clock after the chunk, and whether it was refused for a gap."""

    stream_seconds: float
    gap: bool = False


class RoomHost:
    """A room's :class:`MeetingSession` in this process, autosaved; resumed from the store when a save exists."""

    def __init__(self, settings: Settings, session_id: str, source: str = "room",
                 make_runtime: Callable[[Settings], object] | None = None) -> None:
        from app.runtime import Runtime
        from kvstore.persist import MANIFEST

        self.runtime = make_runtime(settings) if make_runtime is not None else Runtime(settings)
        try:
            self.resumed = self.runtime.session_store().contains(session_id, MANIFEST)
            if self.resumed:  # a host before this one saved the meeting, then died
                self.session = self.runtime.resume_session(session_id, autosave=True)
                log.info("room %s taken over at %.1f s", session_id, self.session.stream_seconds)
            else:
                self.session = self.runtime.new_session(session_id, source=source, autosave=True)
        except BaseException:
            self.runtime.close()
            raise
        self.session_id = session_id

    def feed(self, samples: np.ndarray, start: float, fill_gap: bool = False) -> Fed:
        """Hear 16 kHz mono ``samples`` that begin at ``start`` stream seconds. What this host has heard already is
        skipped (a chunk sent again after a takeover); a chunk that begins after the host's clock is refused
        (``gap``) unless ``fill_gap``, which fills the missing time with silence (audio lost for good)."""
        samples = np.asarray(samples, np.float32)
        have = self.session.stream_seconds
        skip = int(round((have - float(start)) * RATE))
        if skip < -int(_SLACK * RATE):
            if not fill_gap:
                return Fed(have, gap=True)
            samples = np.concatenate([np.zeros(-skip, np.float32), samples])
            skip = 0
        if max(skip, 0) < len(samples):
            self.session.feed_audio(samples[max(skip, 0):], RATE)
        return Fed(self.session.stream_seconds)

    def progress(self) -> RoomProgress:
        """Where the room is; polled every second by its RemoteRoom, so it reads a few fields and the transcript's
        turns, not a whole snapshot (no KV statistics, no slides)."""
        session = self.session
        return RoomProgress(self.session_id, round(session.stream_seconds, 3), session.saved_seconds,
                            len(session.transcript().turns), session.state, session.error, self.resumed,
                            f"{socket.gethostname()}:{os.getpid()}")

    def transcript(self):
        return self.session.transcript()

    def ask(self, question: str):
        return self.session.ask(question)

    def finish(self, timeout: float | None = 600.0) -> RoomProgress:
        """End of the room's audio: everything heard is committed, prefilled and saved."""
        self.session.finish(timeout)
        return self.progress()

    def close(self) -> None:
        self.runtime.close()
