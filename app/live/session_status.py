"""Where a live meeting stands: its state, the failure that ended it, and the version every change moves on."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from app.live.events import Failed, StateChanged
from encoders.errors import InputError

if TYPE_CHECKING:
    from threading import Event, RLock

    from app.live.events import SessionEvent

log = logging.getLogger("minutia.session")


class SessionStatus:
    """A meeting's state ("idle" until input comes, "live", "finished", or "error", which nothing later undoes), the
    message of the failure that put it there, and its ``version``, which every change a reader can see moves on
    (the named transcript and the page's views are rebuilt only when it moved). Changes of state go to the
    listeners (``emit``); all of it under the session's lock.

    A worker that fails ends its own session only (``guard``): other meetings of the same runtime go on.
    """

    def __init__(self, session_id: str, lock: RLock, emit: Callable[[SessionEvent], None], finished: Event) -> None:
        """``finished``: the session's; set when it fails, so that whoever waits for the end stops waiting."""
        self._session_id = session_id
        self._lock = lock
        self._emit = emit
        self._finished = finished
        self.state = "idle"
        self.error: str | None = None
        self.version = 0

    def bump(self) -> None:
        with self._lock:
            self.version += 1

    def set(self, state: str) -> None:
        with self._lock:
            if self.state == state or self.state == "error":
                return
            self.state = state
            self.version += 1
        self._emit(StateChanged(state))

    def fail(self, message: str) -> None:
        with self._lock:
            self.state, self.error = "error", message
            self.version += 1
        self._finished.set()
        self._emit(Failed(message))

    def guard(self, worker: Callable[[], None]) -> Callable[[], None]:
        """``worker`` for its thread: its failure puts the session into "error" and is logged."""
        def run() -> None:
            try:
                worker()
            except Exception as exc:  # a worker's failure ends this session only
                log.exception("session %s: %s failed", self._session_id, worker.__name__)
                if isinstance(exc, InputError):
                    self.fail(str(exc))
                else:  # its text can hold paths and errnos: the page and the bot say something plain
                    part = worker.__name__.strip("_").removesuffix("_worker")
                    self.fail(f"the meeting's {part} stopped on an unexpected error (the details are in the server log)")

        return run
