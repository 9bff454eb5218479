"""encoders.ring: ordering, overflow policies with counters, absolute indices across drops, no growth."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from encoders.errors import InputError
from encoders.ring import ItemRing, RingBuffer, RingClosedError, RingFullError


def stream(start: int, n: int) -> np.ndarray:
    """Items whose value is their absolute index, so every read can be checked against its index."""
    return np.arange(start, start + n, dtype=np.float64)


def check(chunk) -> None:
    assert np.array_equal(chunk.data, stream(chunk.start_index, len(chunk.data)))


def test_fifo_order_and_wraparound():
    ring = RingBuffer(8, dtype=np.float64)
    got = []
    for i in range(0, 100, 5):
        assert ring.write(stream(i, 5)) == 5
        chunk = ring.read(3)
        check(chunk)
        got.extend(chunk.data)
        chunk = ring.read_available()
        check(chunk)
        got.extend(chunk.data)
    assert got == list(range(100))
    assert ring.stats.dropped == ring.stats.overflows == 0 and ring.stats.high_water == 5


def test_drop_oldest_keeps_the_newest_and_counts():
    ring = RingBuffer(10, dtype=np.float64, policy="drop_oldest")
    ring.write(stream(0, 6))
    ring.write(stream(6, 7))  # 3 oldest lost
    chunk = ring.read_available()
    assert chunk.start_index == 3 and chunk.end_index == 13
    check(chunk)
    assert ring.write(stream(13, 25)) == 10  # larger than the ring: the last 10 survive
    chunk = ring.read_available()
    assert chunk.start_index == 28
    check(chunk)
    s = ring.stats
    assert (s.written, s.read, s.dropped, s.overflows, s.high_water) == (38, 20, 18, 2, 10)
    assert ring.read_index == ring.write_index == 38


def test_drop_newest_refuses_what_does_not_fit_and_the_index_jumps():
    ring = RingBuffer(10, dtype=np.float64, policy="drop_newest")
    assert ring.write(stream(0, 8)) == 8
    assert ring.write(stream(8, 5)) == 2  # 10, 11, 12 lost
    assert ring.write(stream(13, 1)) == 0
    first = ring.read(100)
    assert first.start_index == 0 and len(first.data) == 10
    check(first)
    ring.write(stream(14, 3))
    second = ring.read(100)
    assert second.start_index == 14  # the consumer sees the gap in stream time
    check(second)
    assert ring.stats.dropped == 4 and ring.stats.overflows == 2


def test_block_waits_for_the_consumer_then_times_out():
    ring = RingBuffer(16, dtype=np.float64, policy="block", timeout=5.0)
    got: list[float] = []

    def consume():
        while not ring.exhausted:
            chunk = ring.read(7, timeout=0.05)
            check(chunk)
            got.extend(chunk.data)

    reader = threading.Thread(target=consume)
    reader.start()
    for i in range(0, 2000, 50):
        assert ring.write(stream(i, 50)) == 50  # 3x the capacity per write: pieces as room frees
    ring.close()
    reader.join(10)
    assert got == list(range(2000)) and ring.stats.dropped == 0
    assert ring.stats.high_water <= 16

    stuck = RingBuffer(4, policy="block", timeout=0.05)
    stuck.write(np.zeros(4))
    with pytest.raises(RingFullError):
        stuck.write(np.zeros(1))


def test_close_drains_then_signals_end_of_stream():
    ring = RingBuffer(8)
    ring.write(np.ones(3))
    ring.close()
    assert not ring.exhausted
    assert len(ring.read(10, timeout=1.0).data) == 3
    assert ring.exhausted and len(ring.read(10, timeout=1.0).data) == 0  # returns at once, no wait
    with pytest.raises(RingClosedError):
        ring.write(np.ones(1))


def test_at_least_reads_nothing_until_that_many_arrive_or_the_stream_ends():
    ring = RingBuffer(16, dtype=np.float64)
    ring.write(stream(0, 5))
    assert len(ring.read(6, timeout=0.05, at_least=6).data) == 0  # 5 stored: nothing read, nothing lost
    assert ring.wait_for(5, timeout=0) and not ring.wait_for(6, timeout=0.05)
    threading.Timer(0.1, lambda: ring.write(stream(5, 4))).start()
    chunk = ring.read(6, timeout=5.0, at_least=6)  # waits for the writer, then reads exactly 6
    check(chunk)
    assert chunk.start_index == 0 and len(chunk.data) == 6
    ring.close()
    chunk = ring.read(6, timeout=5.0, at_least=6)  # the end of the stream: the last 3 are read
    check(chunk)
    assert chunk.start_index == 6 and len(chunk.data) == 3 and ring.exhausted


def test_bad_arguments_are_clear_errors():
    with pytest.raises(InputError):
        RingBuffer(0)
    with pytest.raises(InputError):
        RingBuffer(4, policy="grow")
    with pytest.raises(InputError, match="shape"):
        RingBuffer(4, item_shape=(2,)).write(np.zeros((3, 3)))


def test_memory_does_not_grow_with_stream_length():
    ring = RingBuffer(16000 * 5, policy="drop_oldest")  # 5 s of 16 kHz audio
    nbytes = ring.nbytes
    block = np.random.default_rng(0).standard_normal(16000).astype(np.float32)
    for _ in range(5):  # warm up: allocator caches, first-call paths
        ring.write(block)
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    for i in range(50):  # 10x the capacity, read in batches half the time
        ring.write(block)
        if i % 2:
            ring.read(24000)
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert ring.nbytes == nbytes
    assert current - base < 64 * 1024  # no per-item growth (the stream was 3.2 MB)
    assert ring.stats.written == 55 * 16000 and ring.stats.dropped > 0


def test_item_ring_of_frames():
    frames = ItemRing[np.ndarray](3, policy="drop_oldest")
    for i in range(5):
        frames.put(np.full((4, 4, 3), i, dtype=np.uint8))
    got = frames.get()
    assert [i for i, _ in got] == [2, 3, 4] and all(f[0, 0, 0] == i for i, f in got)
    newest = ItemRing[int](2, policy="drop_newest")
    assert [newest.put(i) for i in range(4)] == [True, True, False, False]
    assert newest.get(1) == [(0, 0)]
    newest.put(4)
    assert newest.get() == [(1, 1), (4, 4)]
    assert newest.stats.dropped == 2 and newest.stats.written == 5


@settings(max_examples=60, deadline=None)
@given(
    policy=st.sampled_from(["drop_oldest", "drop_newest"]),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 25)), max_size=40),
)
def test_any_sequence_reads_each_item_at_most_once_in_order(policy, ops):
    ring = RingBuffer(10, dtype=np.float64, policy=policy)
    seen: list[float] = []
    for is_write, n in ops:
        if is_write:
            ring.write(stream(ring.write_index, n))
        else:
            chunk = ring.read(n)
            check(chunk)
            seen.extend(chunk.data)
        assert ring.available <= 10
    while ring.available:  # a chunk stops at a gap; drain them all
        chunk = ring.read_available()
        check(chunk)
        seen.extend(chunk.data)
    assert seen == sorted(set(seen))
    s = ring.stats
    assert s.read == len(seen) and s.written == s.read + s.dropped
