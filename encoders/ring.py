"""Fixed-size ring buffers between one producer thread and one consumer thread (seed 11.3).

Capture threads write audio samples (``RingBuffer``) or video frames (``ItemRing``); an encoder or
the LLM thread reads them in batches. Storage is allocated once, so memory never grows with the
length of a meeting; when the consumer falls behind, a declared overflow policy decides what is
lost, and counters say how much. Every item has an absolute index (samples or frames since the
stream began) that keeps counting across drops, so the consumer always knows the stream time of
what it reads.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import numpy as np

from encoders.errors import InputError

OverflowPolicy = Literal["drop_oldest", "drop_newest", "block"]
_POLICIES = ("drop_oldest", "drop_newest", "block")


class RingFullError(RuntimeError):
    """A ``block`` ring stayed full for the whole write timeout (the consumer is stuck)."""


class RingClosedError(RuntimeError):
    """A write after ``close()``."""


@dataclass
class RingStats:
    """Counters since the ring was created (items are samples for audio, frames for video)."""

    written: int = 0  # items the producer offered
    read: int = 0  # items handed to the consumer
    dropped: int = 0  # items lost to the overflow policy
    overflows: int = 0  # writes that found the ring too full
    high_water: int = 0  # most items ever waiting at once


@dataclass(frozen=True)
class Chunk:
    """Items ``start_index .. start_index + len(data)`` of the stream (absolute indices)."""

    start_index: int
    data: np.ndarray

    @property
    def end_index(self) -> int:
        return self.start_index + len(self.data)


class _Ring:
    """Shared bookkeeping: positions, policy, counters, close, waiting.

    ``_head``/``_tail`` count items in storage order; items the policy dropped before they were
    stored leave a gap, recorded as (storage position, skipped count), so absolute indices stay
    exact: the absolute index of the next item written is always ``stats.written``.
    """

    def __init__(self, capacity: int, policy: OverflowPolicy, timeout: float | None):
        if capacity < 1:
            raise InputError(f"ring capacity must be at least 1, got {capacity}")
        if policy not in _POLICIES:
            raise InputError(f"unknown overflow policy {policy!r}; use one of {', '.join(_POLICIES)}")
        self.capacity = capacity
        self.policy = policy
        self.timeout = timeout
        self.stats = RingStats()
        self._head = 0  # storage position of the next item to read
        self._tail = 0  # storage position of the next item to write
        self._skip = 0  # absolute index minus storage position, at the head
        self._gaps: deque[tuple[int, int]] = deque()  # (storage position, items skipped before it)
        self._closed = False
        self._cond = threading.Condition()

    @property
    def available(self) -> int:
        with self._cond:
            return self._tail - self._head

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def exhausted(self) -> bool:
        """Closed and fully read: the consumer has seen the end of the stream."""
        with self._cond:
            return self._closed and self._tail == self._head

    @property
    def read_index(self) -> int:
        """Absolute index of the next item the consumer will get (if nothing is dropped first)."""
        with self._cond:
            return self._head + self._skip

    @property
    def write_index(self) -> int:
        """Absolute index of the next item the producer writes: items offered so far."""
        return self.stats.written

    def close(self) -> None:
        """End of stream: readers drain what is left, then see ``exhausted``; blocked writers fail."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _advance_head(self, n: int) -> None:
        self._head += n
        while self._gaps and self._gaps[0][0] <= self._head:
            self._skip += self._gaps.popleft()[1]

    def _gap(self, k: int) -> None:
        """``k`` offered items were dropped just before the next stored one."""
        if k:
            self._gaps.append((self._tail, k))
            self._advance_head(0)  # an empty ring applies the gap at once

    def _readable(self, max_items: int | None) -> int:
        n = self._tail - self._head
        if self._gaps:
            n = min(n, self._gaps[0][0] - self._head)  # a chunk never spans a gap
        return n if max_items is None else min(n, max(0, max_items))

    def _accept(self, n: int) -> tuple[int, int]:
        """Apply the policy to ``n`` offered items (lock held): (items to skip, items to store).

        Under ``drop_oldest`` the oldest stored items are dropped to make room and, when ``n``
        exceeds the capacity, the first of the offered ones too; under ``drop_newest`` the offered
        items that do not fit are dropped; under ``block`` this waits for room.
        """
        free = self.capacity - (self._tail - self._head)
        if n <= free:
            return 0, n
        self.stats.overflows += 1
        if self.policy == "drop_oldest":
            store = min(n, self.capacity)
            lost = store - free
            self._advance_head(lost)
            self.stats.dropped += lost + (n - store)
            return n - store, store
        if self.policy == "drop_newest":
            self.stats.dropped += n - free
            return 0, free
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while self._tail - self._head == self.capacity and not self._closed:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise RingFullError(f"ring full ({self.capacity} items) for {self.timeout} s: the consumer is not reading")
            self._cond.wait(left)
        if self._closed:
            raise RingClosedError("write to a closed ring")
        return 0, min(n, self.capacity - (self._tail - self._head))

    def _stored(self, n: int) -> None:
        self._tail += n
        self.stats.high_water = max(self.stats.high_water, self._tail - self._head)
        self._cond.notify_all()

    def _wait_for_items(self, timeout: float | None, at_least: int = 1) -> None:
        """Block (lock held) until ``at_least`` items are stored, the ring closes, or ``timeout`` passes."""
        if timeout == 0:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._tail - self._head < at_least and not self._closed:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            self._cond.wait(left)


def _storage(shape: tuple[int, ...], dtype: np.dtype, pinned: bool | None):
    """Preallocated storage: page-locked (pinned) torch memory on CUDA machines, numpy elsewhere.

    Returns (numpy view, torch tensor or None); the pinned tensor lets a consumer copy a batch to the
    GPU with ``non_blocking=True``.
    """
    if pinned is None or pinned:
        import torch

        if torch.cuda.is_available():
            tensor = torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype)).dtype, pin_memory=True)
            return tensor.numpy(), tensor
        if pinned:
            raise InputError("pinned ring buffers need a CUDA device")
    return np.zeros(shape, dtype=dtype), None


class RingBuffer(_Ring):
    """A ring of ``capacity`` numeric items (audio samples, or rows of ``item_shape``)."""

    def __init__(
        self,
        capacity: int,
        dtype: np.dtype | type = np.float32,
        item_shape: tuple[int, ...] = (),
        policy: OverflowPolicy = "drop_oldest",
        timeout: float | None = 1.0,
        pinned: bool | None = False,
    ):
        """``timeout`` is how long a ``block`` write waits for room; ``pinned=None`` pins when CUDA is present."""
        super().__init__(capacity, policy, timeout)
        self.dtype = np.dtype(dtype)
        self.item_shape = tuple(item_shape)
        self._data, self.tensor = _storage((capacity, *self.item_shape), self.dtype, pinned)

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    def write(self, items: np.ndarray) -> int:
        """Append ``items`` (shape ``(n, *item_shape)``); returns how many were stored.

        Never blocks under ``drop_*`` policies; under ``block`` waits for room (``RingFullError``
        after ``timeout`` s without any), writing in pieces when ``items`` is larger than the ring.
        """
        items = np.asarray(items, dtype=self.dtype)
        if items.shape[1:] != self.item_shape:
            raise InputError(f"ring items must have shape {self.item_shape}, got rows of {items.shape[1:]}")
        stored = 0
        with self._cond:
            if self._closed:
                raise RingClosedError("write to a closed ring")
            while stored < len(items):
                skip, store = self._accept(len(items) - stored)
                self.stats.written += skip
                self._gap(skip)
                self._copy_in(items[stored + skip : stored + skip + store])
                self.stats.written += store
                self._stored(store)
                if self.policy != "block":
                    lost = len(items) - stored - skip - store  # drop_newest's losses
                    self.stats.written += lost
                    self._gap(lost)
                    return store
                stored += store
        return stored

    def _copy_in(self, rows: np.ndarray) -> None:
        start = self._tail % self.capacity
        first = min(len(rows), self.capacity - start)
        self._data[start : start + first] = rows[:first]
        self._data[: len(rows) - first] = rows[first:]

    def wait_for(self, items: int = 1, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` s until ``items`` are stored or the ring closes; True when they are there."""
        with self._cond:
            self._wait_for_items(timeout, items)
            return self._tail - self._head >= items

    def read(self, max_items: int | None = None, timeout: float | None = 0.0, at_least: int = 1) -> Chunk:
        """Up to ``max_items`` of the oldest unread items (a copy), waiting up to ``timeout`` s for ``at_least``.

        With ``at_least`` > 1 fewer items are not read until the ring closes (a consumer that wants fixed
        steps). An empty chunk means nothing arrived in time, or, when ``exhausted``, the end of the stream.
        ``start_index`` jumps forward where the overflow policy dropped items, so a chunk is always
        contiguous in stream time.
        """
        with self._cond:
            self._wait_for_items(timeout, at_least)
            n = self._readable(max_items)
            if self._tail - self._head < at_least and not self._closed:  # a gap may still cut it short
                n = 0
            start = self._head % self.capacity
            idx = (start + np.arange(n)) % self.capacity if start + n > self.capacity else slice(start, start + n)
            chunk = Chunk(self._head + self._skip, self._data[idx].copy())
            self._advance_head(n)
            self.stats.read += n
            self._cond.notify_all()
            return chunk

    def read_available(self) -> Chunk:
        """Everything unread, without waiting."""
        return self.read(None, timeout=0.0)


T = TypeVar("T")


class ItemRing(Generic[T]):
    """A ring of Python objects (video frames with their times, events): same policies and counters.

    Memory stays flat as long as each item has a bounded size (frames of one resolution).
    """

    def __init__(self, capacity: int, policy: OverflowPolicy = "drop_oldest", timeout: float | None = 1.0):
        self._ring = _Ring(capacity, policy, timeout)
        self._items: deque[T] = deque()
        self.capacity, self.policy, self.stats = capacity, policy, self._ring.stats

    available = property(lambda self: self._ring.available)
    closed = property(lambda self: self._ring.closed)
    exhausted = property(lambda self: self._ring.exhausted)

    def close(self) -> None:
        self._ring.close()

    def put(self, item: T) -> bool:
        """Append one item; False when the policy dropped it (``drop_newest`` on a full ring)."""
        r = self._ring
        with r._cond:
            if r._closed:
                raise RingClosedError("write to a closed ring")
            head_before = r._head
            _, store = r._accept(1)
            for _ in range(r._head - head_before):  # drop_oldest dropped the oldest item
                self._items.popleft()
            r.stats.written += 1
            if not store:
                r._gap(1)
                return False
            self._items.append(item)
            r._stored(1)
            return True

    def get(self, max_items: int | None = None, timeout: float | None = 0.0) -> list[tuple[int, T]]:
        """Up to ``max_items`` (absolute index, item) pairs, oldest first; [] when none came in time."""
        r = self._ring
        with r._cond:
            r._wait_for_items(timeout)
            out = []
            while len(out) < (max_items if max_items is not None else r.capacity) and r._tail > r._head:
                out.append((r._head + r._skip, self._items.popleft()))
                r._advance_head(1)
            r.stats.read += len(out)
            r._cond.notify_all()
            return out
