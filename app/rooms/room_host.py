"""One room's meeting, hosted in one process and kept in the session store so that another process can take it over.

A :class:`RoomHost` runs a :class:`~app.live.session.MeetingSession` that checkpoints to the encrypted session store
(Redis when the rooms run on a cluster) every ``store.autosave_seconds`` of wall time. Made again with the same
session id after its process or node died, it resumes the meeting from the last checkpoint (KV cache, transcript,
timeline), and its client sends the audio from the checkpoint's position on again
(:class:`app.rooms.room_fleet.RemoteRoom`). Audio carries its stream time, so a chunk sent twice is heard once and a
chunk after a gap is refused until the gap is filled. Ray-free: the fleet wraps it in an actor.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from app.platform.config import Settings
from app.live.events import Answered, SessionEvent
from app.rooms.mixer import MIX_FRAME
from app.rooms.participants import Participants
from encoders.audio import SAMPLE_RATE as RATE

log = logging.getLogger(__name__)

_SLACK = 0.002  # stream seconds: a chunk's start within this of the host's clock continues it
_KEPT_EVENTS = 4096  # events a host keeps for its client to collect; older ones are counted as missed


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


def _save_changes(session) -> None:
    """A rename since the end goes on with the meeting; a store that fails now loses only that (logged)."""
    try:
        session.save_changes()
    except Exception:
        log.exception("session %s: the changes since its end could not be saved", session.session_id)


@dataclass(frozen=True)
class EventBatch:
    """The answer to :meth:`RoomHost.events_since`: the session's events after the client's position.

    ``epoch`` names the host process's event log: a client that sees a new epoch (the host was restarted and
    resumed the meeting) starts again from its beginning. ``missed`` counts events dropped before they were
    collected."""

    epoch: str
    next_seq: int
    events: tuple[SessionEvent, ...]
    missed: int = 0


class RoomHost:
    """A room's :class:`MeetingSession` in this process, autosaved; resumed from the store when a save exists."""

    def __init__(self, settings: Settings, session_id: str, source: str = "room",
                 make_runtime: Callable[[Settings], object] | None = None) -> None:
        from app.live.runtime import Runtime
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
        self._tracks = Participants()  # frames' speakers, queued with the audio: named participants' words
        self.session.diarizer_for = self._tracks.diarizer
        self.epoch = uuid.uuid4().hex[:12]
        self._events: deque[SessionEvent] = deque(maxlen=_KEPT_EVENTS)
        self._first_seq = 0  # sequence number of self._events[0]
        self._events_lock = threading.Lock()
        self._unsubscribe = self.session.subscribe(self._keep_event)

    # ------------------------------------------------------------------ events, for a client in another process
    def _keep_event(self, event: SessionEvent) -> None:
        if isinstance(event, Answered):  # the asker has the answer already
            return
        with self._events_lock:
            if len(self._events) == self._events.maxlen:
                self._first_seq += 1
            self._events.append(event)

    def events_since(self, epoch: str | None, seq: int) -> EventBatch:
        """The events after ``seq`` of the log ``epoch`` (all of this host's when the epoch is not its own)."""
        with self._events_lock:
            start = seq if epoch == self.epoch else 0
            skip = max(start - self._first_seq, 0)
            missed = max(self._first_seq - start, 0)
            events = tuple(list(self._events)[skip:])
            return EventBatch(self.epoch, self._first_seq + len(self._events), events, missed)

    def _switch(self, session) -> None:
        """The room goes on in ``session`` (after a forget or a continuation): its events from now on."""
        self._unsubscribe()
        self._tracks.clear()  # frames queued for the old session (it is done)
        session.diarizer_for = self._tracks.diarizer
        self.session = session
        self._unsubscribe = session.subscribe(self._keep_event)

    def feed(self, samples: np.ndarray, start: float, fill_gap: bool = False, frames: list | None = None) -> Fed:
        """Hear 16 kHz mono ``samples`` that begin at ``start`` stream seconds. What this host has heard already is
        skipped (a chunk sent again after a takeover); a chunk that begins after the host's clock is refused
        (``gap``) unless ``fill_gap``, which fills the missing time with silence (audio lost for good).
        ``frames``: who spoke in each 20 ms frame (named participants label their words by it)."""
        samples = np.asarray(samples, np.float32)
        frames = list(frames) if frames is not None else [None] * (len(samples) // MIX_FRAME)
        have = self.session.stream_seconds
        skip = int(round((have - float(start)) * RATE))
        if skip < -int(_SLACK * RATE):
            if not fill_gap:
                return Fed(have, gap=True)
            frames = [None] * (-skip // MIX_FRAME) + frames
            samples = np.concatenate([np.zeros(-skip, np.float32), samples])
            skip = 0
        skip = max(skip, 0)
        if skip < len(samples):
            kept = frames[int(round(skip / MIX_FRAME)):]
            self._tracks.queue(kept)  # before the audio: the recogniser's thread may take it at once
            try:
                self.session.feed_audio(samples[skip:], RATE)
            except Exception:
                self._tracks.unqueue(len(kept))
                raise
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

    def snapshot(self):
        return self.session.snapshot()

    def signals(self) -> dict:
        """The meeting's KV figures once its last answer's comparisons are done: its golden signals, which the
        fleet's canary compares (app/platform/canary.py) when the room closes."""
        self.session.settle()
        return self.session.snapshot().kv or {}

    def ask(self, question: str):
        return self.session.ask(question)

    def feed_video(self, frame: np.ndarray) -> bool:
        """A frame, sent without waiting for an answer: one the session refuses (it just finished) is dropped."""
        from encoders.errors import InputError

        try:
            self.session.feed_video(frame)
            return True
        except InputError as exc:
            log.debug("room %s: video frame dropped: %s", self.session_id, exc)
            return False

    def rename_speaker(self, speaker: str, name: str) -> str:
        return self.session.rename_speaker(speaker, name)

    def keep_names(self, names: dict[str, str]) -> None:
        self.session.keep_names(names)

    def forget(self, speaker: str):
        """Forget ``speaker`` while the meeting goes on (app/live/forget.py): the room goes on in the rebuilt session,
        saved and resumed under the same id. Returns the report."""
        from app.live.forget import forget_in_live_meeting

        session, report = forget_in_live_meeting(self.runtime, self.session, speaker)
        self._switch(session)
        return report

    def go_on(self) -> RoomProgress:
        """New audio after the end of the room's stream: the finished meeting is resumed from its save (same id,
        times go on), as the bot does for a room in its own process."""
        if self.session.state == "finished":
            _save_changes(self.session)
            self.runtime.close_session(self.session_id)
            self._switch(self.runtime.resume_session(self.session_id, autosave=True))
        return self.progress()

    def finish(self, timeout: float | None = 600.0) -> RoomProgress:
        """End of the room's audio: everything heard is committed, prefilled and saved."""
        self.session.finish(timeout)
        return self.progress()

    def close(self) -> None:
        self._unsubscribe()
        self.runtime.close()
