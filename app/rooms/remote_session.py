"""A room's meeting on a Ray cluster, seen from the bot as if it ran in the bot's own process.

The room bot (app/rooms/bot.py) drives a :class:`~app.live.session.MeetingSession`: it feeds audio and video, asks, renames,
forgets, and turns the session's events into data-channel messages. With ``minutia bot --ray-address`` each room's
meeting runs in a :class:`~app.rooms.room_fleet.RoomActor` that Ray places over the cluster's nodes (and restarts on
another node when one dies); :class:`RemoteSession` is the part of the session's surface the bot uses, forwarded
to that actor through :class:`~app.rooms.room_fleet.RemoteRoom`. The session's events are collected by a thread of
its own every ``poll_seconds`` (the host keeps them, app/rooms/room_host.py) and handed to the subscribers in order.

Named participants: the bot sends who spoke in each 20 ms frame with the audio, and the host labels their words
by it as a session in the bot's process does (app/rooms/participants.py). Not forwarded: the KV placement's transfer
counters on /metrics. After a takeover the restarted host hears again the audio its last checkpoint did not cover, so the words of those
seconds are sent to the room a second time.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import numpy as np

from app.platform.config import Settings
from app.live.events import Failed, SessionEvent, StateChanged
from app.rooms.room_fleet import RemoteRoom
from app.rooms.room_host import RATE, EventBatch
from encoders.errors import InputError

log = logging.getLogger(__name__)


class RemoteSession:
    """The bot's view of a meeting hosted by a Ray actor (see the module docstring): a LiveMeeting
    (app/live/meeting.py), as a local session is."""

    autosave = True  # a room's host always checkpoints to the session store: that is how it survives its node

    def __init__(self, room: RemoteRoom, settings: Settings, poll_seconds: float = 0.2) -> None:
        self.room, self.settings, self.poll_seconds = room, settings, poll_seconds
        self.session_id = room.session_id
        self.on_transfer: Callable[[str, str, int, float], None] | None = None  # saves happen in the host
        self._state = room.progress().state
        self._listeners: list[Callable[[SessionEvent], None]] = []
        self._lock = threading.Lock()
        self._collecting = threading.Lock()
        self._epoch: str | None = None
        self._seq = 0
        self.missed_events = 0
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name=f"events-{self.session_id}", daemon=True)
        self._poller.start()

    # ------------------------------------------------------------------ events
    def subscribe(self, callback: Callable[[SessionEvent], None]) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return unsubscribe

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.collect()
            except InputError as exc:  # the room lost its host for good: say so once, then stop
                log.error("room %s: events no longer reach the bot: %s", self.room.name, exc)
                self._deliver(Failed(str(exc)))
                return
            except Exception as exc:  # a slow or busy host (a forget rebuilding the meeting): try again
                log.warning("room %s: collecting events failed: %s", self.room.name, exc)

    def collect(self) -> int:
        """Hand the host's new events to the subscribers now; returns how many there were. One collection at a
        time (the poller, a finish, a forget), so each event is delivered once and in order."""
        with self._collecting:
            batch: EventBatch = self.room.call("events_since", self._epoch, self._seq, timeout=60)
            if batch.epoch != self._epoch and self._epoch is not None:
                log.warning("room %s: its host was restarted; its events are read from the resumed meeting on",
                            self.room.name)
            self._epoch, self._seq = batch.epoch, batch.next_seq
            self.missed_events += batch.missed
            for event in batch.events:
                self._deliver(event)
            return len(batch.events)

    def _deliver(self, event: SessionEvent) -> None:
        if isinstance(event, (StateChanged, Failed)):
            self._state = "error" if isinstance(event, Failed) else event.state
        with self._lock:
            listeners = list(self._listeners)
        for callback in listeners:
            try:
                callback(event)
            except Exception:  # one listener's fault must not stop the others
                log.exception("a listener of room %s failed", self.room.name)

    # ------------------------------------------------------------------ the session's surface
    @property
    def state(self) -> str:
        return self._state

    def feed_audio(self, samples: np.ndarray, sample_rate: int, frames: list | None = None) -> None:
        """``frames``: who spoke in each 20 ms frame (a named participant, "" or None), for the host's labels."""
        if sample_rate != RATE:
            raise InputError(f"a room on the cluster takes {RATE} Hz audio, got {sample_rate} Hz")
        self.room.feed_audio(samples, frames)

    def feed_video(self, frame: np.ndarray) -> None:
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] not in (3, 4) or frame.dtype != np.uint8:
            raise InputError(f"a video frame must be HxWx3 uint8 RGB, got shape {frame.shape} and dtype {frame.dtype}")
        self.room.feed_video(frame)

    def finish(self, timeout: float | None = None) -> None:
        self._state = self.room.finish().state
        self.collect()  # the last words and the "finished" state reach the room before this returns

    def go_on(self) -> None:
        """New audio after the end: the host resumes the finished meeting (app/rooms/room_host.py)."""
        self._state = self.room.call("go_on").state

    def forget(self, speaker: str):
        """The host rebuilds the meeting without ``speaker`` and goes on in the rebuilt session (resumed: it says
        no state of its own until it hears something, so its state is read here)."""
        report = self.room.call("forget", speaker)
        self.collect()
        self._state = self.room.progress().state
        return report

    def ask(self, question: str):
        return self.room.ask(question)

    def snapshot(self):
        return self.room.call("snapshot", timeout=30)

    def transcript(self):
        return self.room.transcript()

    def rename_speaker(self, speaker: str, name: str) -> str:
        return self.room.call("rename_speaker", speaker, name)

    def keep_names(self, names: dict[str, str]) -> None:
        if names:
            self.room.call("keep_names", names)

    def close(self) -> None:
        self._stop.set()
        self._poller.join(5)
