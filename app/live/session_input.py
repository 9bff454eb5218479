"""What comes into a live meeting as it runs: audio and video frames, queued for its workers, and its clock."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

import numpy as np

from encoders.audio import SAMPLE_RATE, to_mono_16k
from encoders.errors import InputError
from encoders.ring import ItemRing, RingBuffer

if TYPE_CHECKING:
    from threading import Event, RLock

    from encoders.vision import Keyframe

AUDIO_RING_SECONDS = 120  # audio waiting for the recogniser; older audio is dropped (counted) beyond this
VIDEO_RING_FRAMES = 8  # keyframes waiting for the vision worker's OCR; the oldest are dropped beyond this


class MeetingInput:
    """Audio and keyframes waiting for the speech and vision workers, and the meeting's clock.

    Live input never blocks on a model: beyond what a ring holds the oldest is dropped and counted, unless the
    caller waits for room (a file replayed faster than real time). The clock counts the stream seconds heard from
    ``time_offset``, where this process's input starts: a resumed meeting goes on from its save, and text added
    before any audio moves it on (``catch_up``).
    """

    def __init__(self, session_id: str, lock: RLock, closed: Event, error: Callable[[], str | None],
                 live: Callable[[], None], position: float = 0.0) -> None:
        """``closed``/``error``: the session's (a caller waiting for room stops waiting then); ``live``: called as
        input arrives (the session's state); ``position``: stream seconds a resumed meeting's save covers."""
        self._session_id = session_id
        self._lock = lock
        self._closed = closed
        self._error = error
        self._live = live
        self.audio = RingBuffer(AUDIO_RING_SECONDS * SAMPLE_RATE, np.float32, policy="drop_oldest")
        self.frames: ItemRing[Keyframe] = ItemRing(VIDEO_RING_FRAMES, policy="drop_oldest")
        self.time_offset = position  # stream time at which this process's input starts
        self._received = int(round(position * SAMPLE_RATE))  # samples, counted from the meeting's start

    @property
    def stream_seconds(self) -> float:
        with self._lock:
            return self._received / SAMPLE_RATE

    def clock(self) -> tuple[float, float]:
        """(``time_offset``, ``stream_seconds``), read together."""
        with self._lock:
            return self.time_offset, self._received / SAMPLE_RATE

    @property
    def backlog_seconds(self) -> float:
        """Audio received but not yet handed to the recogniser."""
        return self.audio.available / SAMPLE_RATE

    def hear(self, samples: np.ndarray, sample_rate: int, wait: bool = False) -> None:
        """Queue audio (any layout and rate: encoders.audio.to_mono_16k); ``wait``: for room, instead of dropping."""
        audio = to_mono_16k(samples, sample_rate)
        if audio.size == 0:
            return
        self.ensure_open()
        self._live()
        if wait:
            self._wait_for_room(self.audio, len(audio))
        self.audio.write(audio)
        with self._lock:
            self._received += len(audio)

    def see(self, frame: np.ndarray, t: float | None, keyframe: Callable[[np.ndarray, float], Keyframe | None],
            wait: bool = False) -> None:
        """Queue ``frame`` (HxWx3 uint8 RGB, at ``t`` s after this input started; default: the audio so far) if
        ``keyframe`` finds it starts a new picture; ``wait``: for room, instead of dropping the oldest."""
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] not in (3, 4) or frame.dtype != np.uint8:
            raise InputError(f"a video frame must be HxWx3 uint8 RGB, got shape {frame.shape} and dtype {frame.dtype}")
        self.ensure_open()
        self._live()
        found = keyframe(frame[:, :, :3], self.stream_seconds if t is None else self.time_offset + float(t))
        if found is None:
            return
        if wait:
            self._wait_for_room(self.frames, 1)
        self.frames.put(found)

    def _wait_for_room(self, ring, items: int) -> None:
        while ring.available + items > ring.capacity and not self._closed.is_set() and self._error() is None:
            time.sleep(0.02)

    def catch_up(self, clock: float) -> None:
        """The meeting has been heard up to ``clock`` (text added for it); with no audio yet, the recogniser's
        times start there."""
        with self._lock:
            if self._received == int(round(self.time_offset * SAMPLE_RATE)):
                self.time_offset = max(self.time_offset, clock)
            self._received = max(self._received, int(clock * SAMPLE_RATE))

    def ensure_open(self) -> None:
        """InputError once the session is closed, or its input has ended."""
        if self._closed.is_set():
            raise InputError(f"session {self._session_id} is closed")
        if self.audio.closed:
            raise InputError(f"session {self._session_id} has finished; start a new one")

    def end(self) -> None:
        """No more input: the workers drain what the rings hold and stop."""
        self.audio.close()
        self.frames.close()
