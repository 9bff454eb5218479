"""Live rooms on Ray: each room's meeting in an actor that Ray places over the cluster's nodes and restarts on
another node when its process or node dies.

The actor is a :class:`~app.rooms.room_host.RoomHost`: its session checkpoints to the session store (Redis, so every
node reads it) every ``store.autosave_seconds``. Ray restarts a dead actor with the same arguments
(``max_restarts``), and the new host resumes the meeting from the last checkpoint. The client side,
:class:`RemoteRoom`, keeps the audio the last checkpoint does not cover yet and, when it notices the takeover
(a call fails with the actor's death, or the host refuses a chunk for a gap), sends that audio again from the
checkpoint's position: no line committed before the failure is lost, and questions are answered from the
restored KV cache. Audio older than ``replay_seconds`` that no checkpoint covers is dropped and counted.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from app.platform.canary import rollout_for
from app.platform.config import Settings
from app.platform.ray_cluster import join_ray, leave_ray
from app.rooms.room_host import RATE, RoomHost, RoomProgress
from encoders.errors import InputError

log = logging.getLogger(__name__)

_PROGRESS_EVERY = 1.0  # wall seconds between the client's looks at the host's last checkpoint


@dataclass(frozen=True)
class FleetOptions:
    ray_address: str | None = None  # None: a local Ray runtime for this process
    cpus_per_room: float = 1.0
    replay_seconds: float = 300.0  # audio kept for a takeover when no checkpoint covers it
    takeover_timeout: float = 180.0  # how long a room waits for Ray to restart its host

    def __post_init__(self):
        if self.cpus_per_room <= 0 or self.replay_seconds <= 0 or self.takeover_timeout <= 0:
            raise InputError("cpus per room, replay seconds and the takeover timeout must be positive")


class RoomActor(RoomHost):
    """The host as Ray runs it: it also says which node it is on."""

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


# Calls that only read the session or change its names: they run beside the audio, not queued behind it (nor it
# behind a question). A forget stays in line with the audio and video (it finishes and replaces the session).
_ASIDE = ("ask", "snapshot", "signals", "transcript", "rename_speaker", "keep_names")


def _remote_actor_class():
    """RoomActor for Ray: audio, events and the rest run one at a time and in order (a chunk must never overtake
    the one before it); questions, snapshots, the transcript and names run in a group of their own, so a question
    being answered does not hold up the room's audio and captions, nor a join wait for a finish (the session is
    thread-safe, as in the bot's own process, where questions run in a thread pool)."""
    import ray

    def aside(name: str):
        def call(self, *args):
            return getattr(RoomActor, name)(self, *args)
        call.__name__ = name
        return ray.method(concurrency_group="aside")(call)

    actor = type("RoomActor", (RoomActor,), {name: aside(name) for name in _ASIDE})
    return ray.remote(concurrency_groups={"aside": 2})(actor)


class RoomFleet:
    """Opens rooms as actors on the Ray cluster at ``ray_address`` (or a local runtime)."""

    def __init__(self, settings: Settings, options: FleetOptions = FleetOptions(),
                 make_runtime: Callable[[Settings], object] | None = None) -> None:
        self.settings, self.options, self._make_runtime = settings, options, make_runtime
        self._started_ray = join_ray(options.ray_address)
        # The actor is restarted without end (each restart resumes from the store); a call in flight when it died
        # fails, and the room sends again what no checkpoint covers.
        self._actor_class = _remote_actor_class().options(
            num_cpus=options.cpus_per_room, max_restarts=-1, max_task_retries=0, scheduling_strategy="SPREAD")
        self.rooms: dict[str, RemoteRoom] = {}
        # One canary for every room of the fleet (each actor holds one session, so no actor could compare arms): the
        # fleet gives each room its arm's settings, takes the room's signals when it closes, and decides.
        self.canary = rollout_for(settings, self._audit_canary)
        self._host_settings = settings.model_copy(update={"canary": settings.canary.model_copy(update={"preset": None})})

    def open(self, room: str) -> RemoteRoom:
        """A new meeting in ``room``, in a session of its own (``<room>-<8 hex>``: a meeting held in the same room
        later is another session, never a continuation of a stale save)."""
        if room in self.rooms:
            raise InputError(f"room {room} is open already")
        stem = re.sub(r"[^A-Za-z0-9_-]", "-", room)[:48] or "room"
        session_id = f"{stem}-{uuid.uuid4().hex[:8]}"
        try:
            actor = self._actor_class.remote(self.settings_for(session_id), session_id, f"room:{room}",
                                             self._make_runtime)
        except BaseException:
            if self.canary is not None:
                self.canary.forget(session_id)
            raise
        self.rooms[room] = RemoteRoom(room, session_id, actor, self.options,
                                      on_close=self._room_ended if self.canary is not None else None)
        return self.rooms[room]

    def settings_for(self, session_id: str) -> Settings:
        """A room's settings: its canary arm's KV, and no canary of the host's own (a restarted host keeps the arm:
        Ray makes it again with the same settings)."""
        if self.canary is None:
            return self._host_settings
        kv = self.canary.kv_for(self.settings.kv, session_id)
        return self._host_settings if kv is self.settings.kv else self._host_settings.model_copy(update={"kv": kv})

    def _room_ended(self, session_id: str, signals: dict | None) -> None:
        """A room closed with these signals (None: its host was gone): they count for its arm, then the arms are
        compared. A failure is logged: it must not keep the room from closing."""
        try:
            if signals is None:
                self.canary.forget(session_id)
                return
            self.canary.ended(session_id, signals)
            self.canary.evaluate()
        except Exception:
            log.exception("canary: room session %s's signals were not taken", session_id)

    def _audit_canary(self, decision) -> None:
        from app.platform.store import open_session_store

        store = open_session_store(self.settings)
        try:
            store.log.record("*", "rollout", [], decision.name, state=decision.state, reason=decision.reason,
                             evidence=decision.evidence)
        finally:
            store.close()

    def close(self) -> None:
        for room in list(self.rooms.values()):
            room.close()
        self.rooms.clear()
        if self._started_ray:
            leave_ray()


class RemoteRoom:
    """A room whose meeting runs in a Ray actor; its calls survive the actor's restart on another node.

    Sending audio never waits: while a takeover is under way (in a thread of its own), audio is only kept, and the
    takeover sends everything from the restarted host's clock on."""

    def __init__(self, name: str, session_id: str, actor, options: FleetOptions,
                 on_close: Callable[[str, dict | None], None] | None = None) -> None:
        self.name, self.session_id, self._actor, self._options = name, session_id, actor, options
        self._on_close = on_close  # (session id, the meeting's last KV signals or None): the fleet's canary
        self._lock = threading.RLock()
        # (first sample, audio, its frames' speakers) no checkpoint covers yet
        self._chunks: deque[tuple[int, np.ndarray, list | None]] = deque()
        self._buffered = 0  # samples in _chunks
        self._sent = 0  # samples received from the room: its stream clock
        self._in_flight: list = []  # feed calls not yet answered
        self._progress_ref = None
        self._progress_asked = 0.0
        self._recovered = threading.Event()  # set while no takeover is under way
        self._recovered.set()
        self._takeover_error: str | None = None
        self.saved_seconds: float | None = None  # the host's last checkpoint, as last seen
        self.takeovers = 0  # times a restarted host took the meeting over
        self.dropped_samples = 0  # audio older than replay_seconds that no checkpoint covered when dropped

    # ------------------------------------------------------------------ audio
    def feed_audio(self, samples: np.ndarray, frames: list | None = None) -> None:
        """Send 16 kHz mono float audio; it never waits for the host. ``frames``: who spoke in each 20 ms frame of
        it (named participants, app/rooms/participants.py), or None."""
        samples = np.ascontiguousarray(samples, np.float32).reshape(-1)
        if samples.size == 0:
            return
        self._raise_if_lost()
        with self._lock:
            start = self._sent
            self._sent += len(samples)
            self._keep(start, samples, frames)
            if self._recovered.is_set():
                self._in_flight.append(self._actor.feed.remote(samples, start / RATE, False, frames))
                self._reap()

    def feed_video(self, frame: np.ndarray) -> bool:
        """Send a video frame without waiting; while a takeover is under way it is dropped (returns False)."""
        self._raise_if_lost()
        if not self._recovered.is_set():
            return False
        self._actor.feed_video.remote(np.ascontiguousarray(frame))
        return True

    def _keep(self, start: int, samples: np.ndarray, frames: list | None) -> None:
        self._chunks.append((start, samples, frames))
        self._buffered += len(samples)
        limit = int(self._options.replay_seconds * RATE)
        while self._buffered > limit and len(self._chunks) > 1:
            _, old, _ = self._chunks.popleft()
            self._buffered -= len(old)
            self.dropped_samples += len(old)

    def _trim(self, saved_seconds: float | None) -> None:
        """Forget the audio a checkpoint covers."""
        if saved_seconds is None:
            return
        self.saved_seconds = saved_seconds
        covered = int(saved_seconds * RATE)
        while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) <= covered:
            _, old, _ = self._chunks.popleft()
            self._buffered -= len(old)

    def _reap(self) -> None:
        """Collect answered calls without waiting (call with the lock held); a dead host or a refused chunk starts
        a takeover."""
        import ray
        from ray.exceptions import RayActorError

        try:
            if self._in_flight:
                done, self._in_flight = ray.wait(self._in_flight, num_returns=len(self._in_flight), timeout=0)
                if any(fed.gap for fed in ray.get(done)):
                    raise _Refused
            if self._progress_ref is not None and ray.wait([self._progress_ref], timeout=0)[0]:
                ref, self._progress_ref = self._progress_ref, None
                self._trim(ray.get(ref).saved_seconds)
        except (RayActorError, _Refused):
            self._start_takeover()
            return
        if self._progress_ref is None and time.monotonic() - self._progress_asked >= _PROGRESS_EVERY:
            self._progress_asked = time.monotonic()
            self._progress_ref = self._actor.progress.remote()

    # ------------------------------------------------------------------ takeover
    def _start_takeover(self) -> None:
        with self._lock:
            if not self._recovered.is_set():
                return
            self._recovered.clear()
            self._in_flight, self._progress_ref = [], None
        threading.Thread(target=self._take_over, name=f"takeover-{self.session_id}", daemon=True).start()

    def _take_over(self) -> None:
        """Wait for Ray to restart the host (it resumes from the last checkpoint), then send it the audio from
        where that checkpoint ends."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        deadline = time.monotonic() + self._options.takeover_timeout
        try:
            while True:
                try:
                    progress: RoomProgress = ray.get(self._actor.progress.remote(), timeout=30)
                    break
                except (RayActorError, GetTimeoutError) as exc:
                    if time.monotonic() > deadline:
                        self._takeover_error = (f"room {self.name}: its host died and was not restarted within "
                                                f"{self._options.takeover_timeout:.0f} s ({type(exc).__name__})")
                        log.error(self._takeover_error)
                        return
                    time.sleep(0.5)
            with self._lock:
                self.takeovers += 1
                self._trim(progress.saved_seconds)
                since = int(round(progress.stream_seconds * RATE))
                log.warning("room %s: host restarted (%s), resuming at %.1f s; sending %.1f s of audio again",
                            self.name, progress.host, progress.stream_seconds, (self._sent - since) / RATE)
                first = True
                for start, samples, frames in list(self._chunks):
                    if start + len(samples) <= since:
                        continue
                    # The first chunk may begin after the host's clock when older audio was dropped: silence fills.
                    self._in_flight.append(self._actor.feed.remote(samples, start / RATE, first and start > since,
                                                                   frames))
                    first = False
        finally:
            self._recovered.set()

    def _raise_if_lost(self) -> None:
        if self._takeover_error is not None:
            raise InputError(self._takeover_error)

    # ------------------------------------------------------------------ calls
    def call(self, method: str, *args, timeout: float | None = None):
        """``method(*args)`` on the host; once more after a takeover if the host died under it."""
        import ray
        from ray.exceptions import RayActorError

        for attempt in range(2):
            self._recovered.wait(self._options.takeover_timeout)
            self._raise_if_lost()
            try:
                return ray.get(getattr(self._actor, method).remote(*args), timeout=timeout)
            except RayActorError:
                if attempt:
                    raise InputError(f"room {self.name}: its host died twice during one {method}") from None
                self._start_takeover()

    def progress(self) -> RoomProgress:
        return self.call("progress")

    def node(self) -> str:
        return self.call("node")

    def transcript(self):
        return self.call("transcript")

    def ask(self, question: str):
        return self.call("ask", question)

    def finish(self) -> RoomProgress:
        """End of the room's audio: everything sent is committed, prefilled and saved."""
        import ray

        while True:  # every chunk heard (after any takeover) before the end is marked
            self._recovered.wait(self._options.takeover_timeout)
            self._raise_if_lost()
            with self._lock:
                waiting = list(self._in_flight)
            if not waiting:
                break
            ray.wait(waiting, num_returns=len(waiting), timeout=1.0)
            with self._lock:
                self._reap()
        progress = self.call("finish")
        with self._lock:
            self._trim(progress.saved_seconds)
        return progress

    def close(self) -> None:
        import ray

        if self._on_close is not None:
            try:
                signals = ray.get(self._actor.signals.remote(), timeout=90)
            except Exception as exc:  # a host already gone has no signals to give
                log.debug("room %s: signals: %s", self.name, exc)
                signals = None
            self._on_close(self.session_id, signals)
            self._on_close = None
        try:
            ray.get(self._actor.close.remote(), timeout=30)
        except Exception as exc:  # a host already gone has nothing left to close
            log.debug("room %s: close: %s", self.name, exc)
        ray.kill(self._actor, no_restart=True)


class _Refused(Exception):
    """The host refused a chunk for a gap: it is not the host the chunks before it went to."""
