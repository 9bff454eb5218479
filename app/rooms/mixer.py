"""A room's audio: every peer's 16 kHz mono samples summed on the room's clock before the session hears them."""

from __future__ import annotations

import collections
import dataclasses
import math
import time

import numpy as np

ASR_RATE = 16000
MIX_FRAME = ASR_RATE // 50  # the room's clock ticks in 20 ms frames, as WebRTC audio does
SPEAKING_RMS = 0.01  # a lane quieter than this (about -40 dBFS) in a frame is not speaking in it


class AudioMixer:
    """One room's speakers summed on one clock, a 20 ms frame at a time.

    Each peer has a lane of 16 kHz mono samples. A frame is mixed as soon as every live lane holds
    one, so peers that send faster than real time are mixed as fast as they arrive; otherwise once
    the oldest waiting audio is ``wait`` seconds old, and a lane that lags or has stopped sending
    gets silence: one quiet, stalled or vanished peer never holds up the room. A lane that ends is
    still mixed until it is empty. A laggard's late audio is mixed into later frames; a lane that has
    fallen more than ``backlog`` seconds behind the others is cut back, so its delay stays bounded.
    Each mixed frame also records its loudest speaking lane (``take_activity``): who spoke then.

    The wait is a jitter buffer's: it starts at ``deadline``; when a lane's audio comes late (after
    its share of a frame was mixed as silence, which cuts a gap into its words) the wait grows by
    twice that lateness and a frame, up to ``max_deadline``, so jitter like it cuts no second gap;
    it settles back towards ``deadline`` with a time constant of ``settle_seconds``. A lane back
    after a stall longer than ``max_deadline`` (a pause in sending, not jitter) leaves it as it is.
    """

    @dataclasses.dataclass
    class _Lane:
        chunks: collections.deque = dataclasses.field(default_factory=collections.deque)  # (arrival, samples)
        held: int = 0
        live: bool = True
        silenced_at: float | None = None  # when a frame was first mixed without it, while it is late

        def take(self, n: int) -> np.ndarray:
            parts, wanted = [], n
            while wanted and self.chunks:
                arrival, samples = self.chunks[0]
                parts.append(samples[:wanted])
                if len(samples) > wanted:
                    self.chunks[0] = (arrival, samples[wanted:])
                else:
                    self.chunks.popleft()
                wanted -= len(parts[-1])
            self.held -= n - wanted
            return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def __init__(self, frame: int = MIX_FRAME, deadline: float = 0.2, backlog: float = 1.0,
                 max_deadline: float = 0.6, settle_seconds: float = 30.0) -> None:
        self.frame, self.deadline = frame, deadline
        self.max_deadline, self.settle_seconds = max(max_deadline, deadline), settle_seconds
        self.wait = deadline  # how long a frame waits for a lagging lane now
        self._settled_at: float | None = None
        self.backlog = max(int(backlog * ASR_RATE), 2 * frame)
        self.lanes: dict[str, AudioMixer._Lane] = {}
        self.dropped = 0  # samples cut from lanes that fell too far behind
        self.gaps = 0  # a live lane's frames mixed as silence because its audio was not there yet
        self.activity: list[str | None] = []  # per mixed frame: the loudest lane above SPEAKING_RMS, else None

    def push(self, lane: str, samples: np.ndarray, now: float | None = None) -> None:
        """Add a peer's next samples (float32 in [-1, 1]); a new or ended lane becomes live."""
        if not len(samples):
            return
        now = time.monotonic() if now is None else now
        entry = self.lanes.setdefault(lane, self._Lane())
        entry.live = True
        if entry.silenced_at is not None:  # it came this late: wait longer from now on
            lateness = now - entry.silenced_at
            if self.wait + lateness <= self.max_deadline:
                self.wait = min(self.max_deadline, self.wait + 2 * lateness + self.frame / ASR_RATE)
            entry.silenced_at = None
        entry.chunks.append((now, np.asarray(samples, np.float32)))
        entry.held += len(samples)

    def end(self, lane: str) -> None:
        """The peer sends no more: nobody waits for it; what it sent is still mixed."""
        entry = self.lanes.get(lane)
        if entry is not None:
            entry.live = False
            if not entry.held:
                del self.lanes[lane]

    def take_activity(self) -> list[str | None]:
        """The loudest speaking lane of each frame mixed since the last call, in order (None: nobody spoke)."""
        taken, self.activity = self.activity, []
        return taken

    @property
    def live(self) -> int:
        return sum(1 for lane in self.lanes.values() if lane.live)

    @property
    def idle(self) -> bool:
        """No live lane and nothing left to mix: the room's audio has ended."""
        return not self.lanes

    def _ready(self) -> dict[str, "AudioMixer._Lane"]:
        return {name: lane for name, lane in self.lanes.items() if lane.held >= self.frame or (not lane.live and lane.held)}

    def wait_time(self, now: float | None = None) -> float | None:
        """Seconds until the next frame is due by its deadline (None: nothing is waiting)."""
        ready = self._ready()
        if not ready:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, min(lane.chunks[0][0] for lane in ready.values()) + self.wait - now)

    def pull(self, now: float | None = None) -> np.ndarray:
        """Every frame that is complete or due, mixed (float32 mono; empty when none is)."""
        now = time.monotonic() if now is None else now
        self._settle(now)
        frames = []
        while True:
            ready = self._ready()
            if not ready:
                break
            late = [lane for lane in self.lanes.values() if lane.live and lane.held < self.frame]
            if late and now - min(lane.chunks[0][0] for lane in ready.values()) < self.wait:
                break
            for lane in late:
                self.gaps += 1
                if lane.silenced_at is None:
                    lane.silenced_at = now
            mix = np.zeros(self.frame, np.float32)
            loudest, loudest_power = None, SPEAKING_RMS**2 * self.frame
            for name, lane in ready.items():
                part = lane.take(self.frame)
                mix[:len(part)] += part
                power = float(np.dot(part, part))
                if power > loudest_power:
                    loudest, loudest_power = name, power
            self.activity.append(loudest)
            peak = float(np.abs(mix).max())
            if peak > 1.0:  # two loud speakers at once: scale the frame down rather than clip it
                mix /= peak
            frames.append(mix)
            for name in [n for n, lane in self.lanes.items() if not lane.live and not lane.held]:
                del self.lanes[name]
        live = [lane for lane in self.lanes.values() if lane.live]
        floor = min((lane.held for lane in live), default=0)
        for lane in live:  # a lane that got silence for a late frame plays that much behind the others
            surplus = lane.held - floor - self.backlog
            if surplus > 0:
                lane.take(surplus)
                self.dropped += surplus
        return np.concatenate(frames) if frames else np.zeros(0, np.float32)

    def _settle(self, now: float) -> None:
        """Let the wait decay towards ``deadline`` (exponentially, ``settle_seconds``)."""
        if self._settled_at is not None and self.wait > self.deadline:
            decay = math.exp(-max(0.0, now - self._settled_at) / self.settle_seconds)
            self.wait = self.deadline + (self.wait - self.deadline) * decay
        self._settled_at = now
