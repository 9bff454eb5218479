"""The shared models' lock serves meetings in turn (a plain Lock let one bot room starve the others)."""

from __future__ import annotations

import threading
import time

import pytest

from encoders.fair_lock import FairLock


def _wait_until(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_waiters_are_served_in_arrival_order():
    lock = FairLock()
    order: list[int] = []
    lock.acquire()
    threads = []
    for i in range(6):
        t = threading.Thread(target=lambda i=i: (lock.acquire(), order.append(i), lock.release()))
        t.start()
        threads.append(t)
        _wait_until(lambda: lock.waiting() == i + 1)
    lock.release()
    for t in threads:
        t.join(5)
    assert order == list(range(6))


def test_a_holder_that_asks_again_goes_behind_the_waiter():
    """The starvation case: one worker in a loop of release-then-acquire, another waiting."""
    lock = FairLock()
    served: list[str] = []
    lock.acquire()
    other = threading.Thread(target=lambda: (lock.acquire(), served.append("other"), lock.release()))
    other.start()
    _wait_until(lambda: lock.waiting() == 1)
    for _ in range(3):  # release and take it again at once, as a busy meeting's worker does
        lock.release()
        lock.acquire()
        served.append("busy")
    lock.release()
    other.join(5)
    assert served[0] == "other", served


def test_reentrant_and_misuse():
    lock = FairLock(reentrant=True)
    with lock:
        with lock:
            assert lock.locked()
        assert lock.locked()
    assert not lock.locked()
    plain = FairLock()
    with plain:
        with pytest.raises(RuntimeError):
            plain.acquire()
    with pytest.raises(RuntimeError):
        plain.release()


def test_a_waiter_that_times_out_leaves_the_queue():
    lock = FairLock()
    lock.acquire()
    results: dict[str, bool] = {}
    impatient = threading.Thread(target=lambda: results.__setitem__("impatient", lock.acquire(timeout=0.2)))
    impatient.start()
    _wait_until(lambda: lock.waiting() == 1)
    patient = threading.Thread(target=lambda: (results.__setitem__("patient", lock.acquire(timeout=5)), lock.release()))
    patient.start()
    impatient.join(5)
    assert results["impatient"] is False
    assert lock.waiting() == 1  # only the patient one is left in line
    lock.release()
    patient.join(5)
    assert results["patient"] is True
    assert lock.acquire(blocking=False)  # free again, nobody left waiting
    lock.release()


def test_a_plain_lock_is_released_by_the_thread_that_closes_its_holder():
    """Transcriber.transcribe holds the lock across yields; an abandoned generator is closed by whichever
    thread collects it, and a lock that refused that release left the recogniser locked for good."""
    lock = FairLock()

    def holder():
        with lock:
            yield 1
            yield 2

    gen = holder()
    next(gen)
    threading.Thread(target=gen.close).start()
    assert lock.acquire(timeout=5)
    lock.release()
