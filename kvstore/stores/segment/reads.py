"""Reads from a segment log: from the queue, a mapping of a sealed segment, or ``pread``.

``get`` is one ``pread`` of header + names (checked against the index) and one of the payload into a
new ``bytes``, the copy a caller-owned block needs; copying out of an ``mmap`` instead measured the
same. ``read_unverified`` (encrypted reads: the GCM tag covers every byte, so no CRC) lends a view
instead: of a read-only mapping of the segment when it is sealed (sealed segments never change, and a
mapping is dropped, never closed, so a view in use outlives compaction), else of a per-thread buffer
the record is ``preadv``'d into. The decrypt then reads the page cache directly and the plaintext is
the one new buffer of the read.
"""

from __future__ import annotations

import mmap
import os
from typing import Callable, TypeVar

from kvstore.stores.base import BlockNotFound, CorruptBlock, lend_scratch
from kvstore.stores.segment.records import Key, Loc, Segment
from kvstore.stores.segment.state import LogState

T = TypeVar("T")


class Reader:
    """Serves a block's bytes from wherever it is; counts a reader on a segment while it reads it, so that
    compaction closes a retired segment's file only after its last read."""

    def __init__(self, state: LogState) -> None:
        self.state = state

    def get(self, key: Key, verify: bool) -> bytes:
        """The block's payload as new bytes; ``verify``: check its CRC too."""
        seg, loc, entry = self._locate(key)
        if entry is not None:
            return entry[0] if isinstance(entry[0], bytes) else bytes(entry[0])
        hlen, length = loc[2], loc[3]
        try:  # the payload is read into its own new bytes: the one copy a caller-owned block needs
            head = os.pread(seg.fd, hlen, loc[1])
            payload = os.pread(seg.fd, length, loc[1] + hlen)
        except OSError as exc:
            raise CorruptBlock(f"{seg.where(loc, key)}: unreadable ({exc})") from None
        finally:
            self._release(seg)
        if len(head) != hlen or len(payload) != length:
            raise CorruptBlock(f"{seg.where(loc, key)}: truncated segment")
        return seg.checked(loc, key, head, payload, verify)

    def lend(self, key: Key, use: Callable[[memoryview], T], verify: bool) -> T:
        """``use(view)`` of the block's payload: the queued buffer, a sealed segment's mapping, or this
        thread's reused buffer (see the module docstring)."""
        seg, loc, entry = self._locate(key)
        if entry is not None:
            return use(memoryview(entry[0]).cast("B"))
        hlen, length = loc[2], loc[3]
        try:
            mapped = self._mapping(seg, loc)
        except OSError:  # no mapping (address space, fd): the pread path reads it, or reports why not
            mapped = None
        if mapped is None:
            def read(buf: memoryview) -> T:
                self._read_at(seg, loc, key, [buf])
                return use(seg.checked(loc, key, buf[:hlen], buf[hlen:], verify))
            return lend_scratch(hlen + length, read)
        try:
            with memoryview(mapped) as whole:
                record = whole[loc[1]:loc[1] + hlen + length]
                return use(seg.checked(loc, key, record[:hlen], record[hlen:], verify))
        finally:
            self._release(seg)

    def _mapping(self, seg: Segment, loc: Loc) -> mmap.mmap | None:
        """A read-only mapping of a sealed segment (made on its first read) that holds the record at
        ``loc``; None for the current segment, which still grows. A sealed segment never changes: appends
        go to the current one, compaction copies records forward, so a mapping only ever goes away with
        its last reader (it is dropped, never closed: a view still in use keeps it alive)."""
        if seg is self.state.current:
            return None
        end = loc[1] + loc[2] + loc[3]
        if os.fstat(seg.fd).st_size < end:
            return None  # cut short behind our back: no SIGBUS, the pread path reports it
        mapped = seg.map
        if mapped is None:
            with self.state.lock:
                if seg.map is None and not seg.retired:
                    size = os.fstat(seg.fd).st_size  # not seg.size: after a failed cut-back that can pass the end
                    seg.map = mmap.mmap(seg.fd, size, prot=mmap.PROT_READ) if size else None
                mapped = seg.map
        return mapped if mapped is not None and end <= len(mapped) else None

    def _release(self, seg: Segment) -> None:
        with self.state.lock:
            seg.readers -= 1
            if seg.retired and not seg.readers:
                os.close(seg.fd)

    def _locate(self, key: Key) -> tuple[Segment, Loc, tuple | None]:
        """``(None, None, entry)`` for a queued block, else ``(segment, record, None)`` with a reader counted
        on the segment (the caller releases it: :meth:`_release`, or :meth:`_read_at`)."""
        state = self.state
        with state.lock:
            entry = state.pending.get(key)
            if entry is not None:
                return None, None, entry  # type: ignore[return-value]
            loc = state.locs.get(key)
            if loc is None:
                if key in state.damaged:
                    raise CorruptBlock(f"block {key[1]!r} of session {key[0]!r}: {state.damaged[key]}")
                raise BlockNotFound(f"no block {key[1]!r} in session {key[0]!r} (segment store {state.root})")
            seg = state.segments[loc[0]]
            seg.readers += 1
        return seg, loc, None

    def _read_at(self, seg: Segment, loc: Loc, key: Key, bufs: list[memoryview]) -> None:
        """Fill ``bufs`` from the record at ``loc`` (one ``preadv``) and release the reader."""
        try:
            got = os.preadv(seg.fd, bufs, loc[1])
        except OSError as exc:
            raise CorruptBlock(f"{seg.where(loc, key)}: unreadable ({exc})") from None
        finally:
            self._release(seg)
        if got != loc[2] + loc[3]:
            raise CorruptBlock(f"{seg.where(loc, key)}: truncated segment")
