"""Disk tier, log-structured: blocks appended to a few large segment files.

Why: the per-block layout (:mod:`kvstore.stores.disk`) pays a file create, a rename and a journal
commit per block and reached a third of one sequential file write. Here a put is one record appended
to the current segment (``seg-000001.log``, rolled at ``segment_bytes``), so the disk sees sequential
writes and ``flush`` is one ``fdatasync``.

The parts, each with the details in its docstring: the record format (:mod:`.records`), opening and
damage (:mod:`.recovery`), the writer thread, rolls and syncs (:mod:`.writer`), reads (:mod:`.reads`),
compaction (:mod:`.compaction`); they share a :class:`~.state.LogState`. This module is the store API.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, TypeVar

from kvstore.stores.base import IndexedStore, StoreError, StoreFull
from kvstore.stores.segment.compaction import Compactor
from kvstore.stores.segment.reads import Reader
from kvstore.stores.segment.records import DELETE, PUT, Buffer, Key, Loc, Segment
from kvstore.stores.segment.recovery import recover
from kvstore.stores.segment.state import LogState
from kvstore.stores.segment.writer import Writer

T = TypeVar("T")


class SegmentStore(IndexedStore):
    """Blocks appended to ``root/seg-NNNNNN.log``; see the package's modules for the format and guarantees.

    ``quota_bytes`` caps the live block bytes (a put over it raises :class:`StoreFull` at once). A
    file-system error in the writer (ENOSPC, EFBIG) cuts the segment back to before the failed batch,
    keeps the blocks in memory, readable, and is raised by :meth:`flush` as :class:`StoreFull` /
    :class:`StoreError` (each ``flush`` retries them first); what was flushed before stays intact.
    """

    tier = "disk"

    def __init__(self, root: str | Path, quota_bytes: int | None = None, segment_bytes: int = 64 << 20,
                 max_pending_bytes: int = 64 << 20, batch_bytes: int = 8 << 20,
                 writeback_lag_bytes: int = 32 << 20) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.quota_bytes = quota_bytes
        self.max_pending_bytes = max_pending_bytes
        self._state = LogState(self.root)
        self._closed = False
        self.skipped = recover(self._state)  # damage found at open: (segment, start, end, why)
        self._writer = Writer(self._state, segment_bytes, batch_bytes, writeback_lag_bytes)
        self._reader = Reader(self._state)
        self._compactor = Compactor(self._state, self._writer)

    # the shared state under IndexedStore's names (its listing methods), and for inspection

    @property
    def _lock(self):
        return self._state.lock

    @property
    def _index(self) -> dict[str, dict[str, int]]:
        return self._state.index

    @property
    def _nbytes(self) -> int:
        return self._state.nbytes

    @_nbytes.setter
    def _nbytes(self, value: int) -> None:
        self._state.nbytes = value

    @property
    def _segments(self) -> dict[int, Segment]:
        return self._state.segments

    @property
    def _current(self) -> Segment:
        return self._state.current

    @property
    def _locs(self) -> dict[Key, Loc]:
        return self._state.locs

    # writes

    def _put(self, session: str, block_id: str, data: Buffer) -> None:
        if isinstance(data, memoryview):
            data = data.cast("B")  # so that len() and slices count bytes
        key = (session, block_id)
        size = len(data)
        entry = (data,)  # a fresh object per put: the writer writes it only while it is the pending one
        state = self._state
        with state.lock:
            while state.pending_bytes > self.max_pending_bytes and self._writer.alive() and not self._closed:
                if state.failed:
                    raise StoreFull(f"segment store {self.root}: {len(state.failed)} block(s) could not be written "
                                    f"({next(iter(state.failed.values()))}) and {state.pending_bytes} bytes wait in "
                                    f"memory: block {block_id!r} of session {session!r} not stored")
                state.lock.wait(0.1)  # back-pressure on a slow disk
            if self._closed:
                raise StoreError("segment store is closed")
            self._admit("segment store", session, block_id, size)
            previous = state.pending.get(key)
            state.pending_bytes += size - (len(previous[0]) if previous is not None else 0)
            state.pending[key] = entry
            state.failed.pop(key, None)
            self._writer.submit(PUT, key, entry)

    def delete(self, session: str, block_id: str) -> bool:
        key = (session, block_id)
        state = self._state
        with state.lock:
            if not state.listed(key):
                return False
            state.forget(key)
            del state.index[session][block_id]
            if not state.index[session]:
                del state.index[session]
            entry = state.pending.pop(key, None)
            if entry is not None:
                state.pending_bytes -= len(entry[0])
                state.lock.notify_all()
            state.failed.pop(key, None)
            self._writer.submit(DELETE, key, None)
        return True

    # reads

    def get(self, session: str, block_id: str) -> bytes:
        return self._reader.get((session, block_id), verify=True)

    def get_unverified(self, session: str, block_id: str) -> bytes:
        """:meth:`get` without the CRC32 pass over the payload (the caller authenticates the bytes, e.g.
        AES-GCM); the header is still checked against the index."""
        return self._reader.get((session, block_id), verify=False)

    def read_with(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        """``use(view)`` of the CRC-checked payload, lent as :meth:`read_unverified` lends it (no copy)."""
        return self._reader.lend((session, block_id), use, verify=True)

    def read_unverified(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        """``use(view)`` of the payload without the CRC pass: a view of the segment's mapping when the
        segment is sealed (no copy at all: the caller's decrypt reads the page cache), else read (header and
        payload in one ``preadv``) into this thread's reused buffer. Either way a decrypting caller makes
        one new buffer per block, the plaintext, where ``get_unverified`` + decrypt made two."""
        return self._reader.lend((session, block_id), use, verify=False)

    # sizes

    def nbytes(self) -> int:
        return self._state.nbytes

    def dead_bytes(self) -> int:
        """Bytes in the segments that no live block needs (what :meth:`compact` can free)."""
        with self._state.lock:
            return sum(seg.dead for seg in self._state.segments.values())

    def disk_bytes(self) -> int:
        with self._state.lock:
            return sum(seg.size for seg in self._state.segments.values())

    # durability and upkeep

    def drain(self) -> None:
        """Wait until the writer has written every put queued so far (page cache; no fsync)."""
        self._writer.drain()

    def flush(self) -> None:
        """Write what is queued, fdatasync the segment(s) written since the last flush, fsync the folder
        if a segment was created; raise if some block could not be written or made durable."""
        self._retry_failed()
        errors = self._writer.call(self._writer.sync)
        with self._state.lock:
            failed = dict(self._state.failed) | dict(self._state.failed_deletes)
        if errors:
            raise StoreError(f"segment store {self.root}: cannot make the log durable: {errors[0]}")
        self._raise_unwritten(f"segment store {self.root}", failed)

    def _retry_failed(self) -> None:
        state = self._state
        with state.lock:
            for key in list(state.failed):
                entry = state.pending.get(key)
                if entry is not None:
                    self._writer.submit(PUT, key, entry)
            for key in list(state.failed_deletes):
                if not state.listed(key):
                    self._writer.submit(DELETE, key, None)
            state.failed.clear()
            state.failed_deletes.clear()

    def compact(self, threshold: float = 0.5) -> dict[str, int]:
        """Copy the live records of segments more than ``threshold`` dead to the end of the log, make
        the copies durable, then remove those segments. Returns counts and the bytes freed."""
        return self._writer.call(self._compactor.compact, threshold)

    def _release(self) -> None:
        self._writer.stop()
        for seg in self._state.segments.values():
            seg.map = None
            os.close(seg.fd)
        self._state.segments.clear()
