"""The LLM side of a meeting session: closed lines into the meeting's KV cache, a chunk at a time."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable

from encoders.errors import InputError

if TYPE_CHECKING:
    from app.live.session_store import LineLedger, SavedMeeting
    from app.llm.context import MeetingContext
    from app.llm.engine import LLMEngine
    from app.platform.config import KVSettings
    from app.text.pii import PIIDetector
    from kvstore.cold import ColdTier

log = logging.getLogger("minutia.session")


class Prefiller:
    """Hands the lines a session closes (its ledger) to the meeting's KV cache and prefills them in chunks, so that
    a question only pays for its own tokens; gives the pools' free slots back once input is idle.

    ``run`` is the session's LLM worker; other threads wait for the context (``ready``) or for every closed line
    to be in it (``wait_until_prefilled``).
    """

    def __init__(self, ledger: LineLedger, idle_compact_seconds: float) -> None:
        self.ledger = ledger
        self.idle_compact_seconds = idle_compact_seconds
        self.context: MeetingContext | None = None
        self._ready = threading.Event()
        self._wakeup = threading.Event()
        self._flush_all = threading.Event()  # prefill even a short backlog now (someone is waiting for it)
        self._late = threading.Lock()  # lines prefilled after run ended (notes): one drain at a time

    def wake(self) -> None:
        """A line is waiting, or the session is closing."""
        self._wakeup.set()

    def ready(self, timeout: float = 300.0) -> MeetingContext:
        """The meeting's context, once the LLM is loaded."""
        if not self._ready.wait(timeout):
            raise InputError("the language model is still loading; try again in a moment")
        assert self.context is not None
        return self.context

    def wait_until_prefilled(self, timeout: float | None, error: Callable[[], str | None]) -> bool:
        """Block until every closed line is in the KV cache; False after ``timeout``; the session's ``error`` raises."""
        deadline = None if timeout is None else time.monotonic() + timeout
        context = self.ready(timeout or 300.0)
        while self.ledger.pending or context.pending_lines:
            if error():
                raise InputError(f"the session failed: {error()}")
            if deadline is not None and time.monotonic() > deadline:
                return False
            self._flush_all.set()
            self._wakeup.set()
            time.sleep(0.05)
        with context._lock:  # a flush in progress holds it
            return True

    def run(self, context: MeetingContext, done: Callable[[], bool],
            checkpoint: Callable[[MeetingContext], None]) -> None:
        """Prefill into ``context`` until ``done`` (input ended, or the session closed), then everything left;
        ``checkpoint`` is offered the context after each step (autosave)."""
        self.context = context
        self._ready.set()
        busy_at, compacted = time.monotonic(), True
        while True:
            self._wakeup.wait(timeout=0.5)
            self._wakeup.clear()
            if self.ledger.pending or context.pending_lines:
                busy_at, compacted = time.monotonic(), False
            elif not compacted and time.monotonic() - busy_at >= self.idle_compact_seconds:
                context.compact()  # input is idle: give the pools' free slots back (a page-table remap)
                compacted = True
            self.ledger.drain(context)
            if done():
                self.ledger.drain(context)
                context.flush()
                break
            flush_all = self._flush_all.is_set()
            self._flush_all.clear()
            context.flush(min_tokens=0 if flush_all else context.prefill_chunk_tokens)
            checkpoint(context)

    def after_run(self, finished: threading.Event, stopped: Callable[[], bool], then: Callable[[], None],
                  session_id: str) -> None:
        """Prefill a line queued after the end of input, which :meth:`run` may have drained for the last time:
        a thread waits for it to end (``finished``), prefills the line and calls ``then`` (a save); the caller
        does not wait (a bot's event loop)."""
        def late() -> None:
            finished.wait()
            try:
                self.drain_late(stopped)
                then()
            except Exception:  # closed meanwhile: the line is lost with the meeting's memory, nothing else
                log.exception("session %s: a note could not be prefilled", session_id)

        threading.Thread(target=late, name=f"note-{session_id}", daemon=True).start()

    def drain_late(self, stopped: Callable[[], bool]) -> None:
        """Prefill the lines queued after :meth:`run` ended (notes written after the end of input; call once it
        has); none go into a ``stopped`` meeting's KV (failed or closed)."""
        with self._late:
            if stopped() or self.context is None:
                return
            self.ledger.drain(self.context)
            self.context.flush()


def meeting_context(engine: LLMEngine, kv: KVSettings, header: str, erase_pii: PIIDetector | None,
                    restored: SavedMeeting | None, cold_tier: Callable[[], ColdTier | None]) -> MeetingContext:
    """A meeting's KV context: the cache of a save it continues (``restored``), else a new one with the runtime's
    cold tier, which a resumed meeting does not take."""
    from app.llm.context import MeetingContext

    if restored is not None:
        return MeetingContext(engine, kv, header=header, restored=restored.cache,
                              restored_lines=int(restored.metadata.get("lines", 0)), erase_pii=erase_pii)
    return MeetingContext(engine, kv, header=header, cold_tier=cold_tier(), erase_pii=erase_pii)
