"""A lock that serves its waiters in the order they came: the one shared models sit behind.

Whisper and the LLM are shared by every meeting of a process (several bot rooms, several page tabs),
one call at a time. ``threading.Lock`` wakes no one in particular, and a thread that releases it and
asks again at once usually gets it back before a woken waiter runs: a busy meeting could hold the
recogniser round after round while another room got none (measured: a room with 1 caption beside
rooms with 6). Here a thread that asks while others wait joins the back of the queue.
"""

from __future__ import annotations

import threading
from collections import deque


class FairLock:
    """A first-come-first-served lock; ``reentrant=True`` lets its holder take it again (like RLock)."""

    def __init__(self, reentrant: bool = False) -> None:
        self.reentrant = reentrant
        self._state = threading.Condition(threading.Lock())
        self._queue: deque[object] = deque()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me = threading.get_ident()
        with self._state:
            if self._owner == me:
                if not self.reentrant:
                    raise RuntimeError("FairLock is not reentrant and this thread already holds it")
                self._depth += 1
                return True
            if self._owner is None and not self._queue:
                self._owner, self._depth = me, 1
                return True
            if not blocking:
                return False
            ticket = object()
            self._queue.append(ticket)
            turn = self._state.wait_for(lambda: self._owner is None and self._queue[0] is ticket,
                                        None if timeout < 0 else timeout)
            if not turn:
                self._queue.remove(ticket)
                self._state.notify_all()  # the next in line may be free to go now
                return False
            self._queue.popleft()
            self._owner, self._depth = me, 1
            return True

    def release(self) -> None:
        """Like ``threading.Lock``, a plain FairLock may be released by another thread (a generator that holds
        it across yields is closed by whichever thread collects it); a reentrant one only by its holder."""
        with self._state:
            if self._owner is None or (self.reentrant and self._owner != threading.get_ident()):
                raise RuntimeError("release of a FairLock that is not held (by this thread)")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._state.notify_all()

    def locked(self) -> bool:
        with self._state:
            return self._owner is not None

    def waiting(self) -> int:
        """How many threads wait for the lock now (for load figures)."""
        with self._state:
            return len(self._queue)

    def __enter__(self) -> "FairLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
