"""Disk tier, log-structured: blocks appended to a few large segment files.

Why: the per-block layout (:mod:`kvstore.stores.disk`) pays a file create, a rename and a journal
commit per block and reached a third of one sequential file write. Here a put is one record appended
to the current segment (``seg-000001.log``, rolled at ``segment_bytes``), so the disk sees sequential
writes and ``flush`` is one ``fdatasync``.

Record (little endian)::

    magic "MKVS" | version u8 | kind u8 (1 put, 2 delete) | len(session) u16 | len(block id) u16 |
    payload length u64 | crc u32 | header crc u32 | session | block id | payload

``crc`` is CRC32C of the header fields before it + names + payload (checked on ``get``, skipped on
``get_unverified``); ``header crc`` is CRC32C of the 22 header bytes before it + names, so the index
can be rebuilt on open from headers alone (one small ``pread`` per record) without reading payloads.
CRC32C rather than zlib's CRC32: the SSE4.2 instruction runs it at ~28 GB/s here against ~7, and
zlib's alone would cost a third of a page-cache write (see ``_crc``).

Write path: ``put`` queues the block and returns; reads of a queued block are served from the queue.
One writer thread owns the segment files: it appends whatever is queued (``pwritev``, about 1 MiB
per call), computing each put's CRC right before its write. Data more than ``writeback_lag_bytes``
behind the end of the log is handed to the disk at once (``sync_file_range``, issued from the sealer
thread so the writer never blocks on the submission), so a flush never waits for more than that;
newer data stays in the page cache until ``flush`` -- starting write-back of every batch at once
measured 30% slower page-cache writes here (2 vCPUs: the kernel's write-back work competes with the
writer). A rolled segment is sealed in the background (fdatasync, folder fsync).
``flush`` fdatasyncs what was written since the last one and fsyncs the folder if a segment was
created.

Open: segments are scanned in order, the newest record of a key wins. Older segments are walked by
header (header CRC); the two newest are also checked by payload CRC, since only they can hold writes
that were not durable (a roll waits for the previous seal). A bad record at the end of the newest
segment is a torn tail (a write cut short by a crash): one warning, the file is truncated to the last
good record. A bad record followed by valid ones (in any segment) is skipped by
resyncing: the scan searches for the next magic whose header CRC checks (a payload containing the
magic by chance fails that check). In a sealed segment the skipped record's block, when its names
are still readable, stays listed and raises :class:`CorruptBlock` on ``get`` rather than letting an
older version of it reappear; a record whose header is intact but whose payload rotted is found by
``get`` (CRC). So damage costs the damaged block, never the rest of the segment.

Reads: ``get`` is one ``pread`` of header + names (checked against the index) and one of the payload
into a new ``bytes``, the copy a caller-owned block needs; copying out of an ``mmap`` instead measured
the same. ``read_unverified`` (encrypted reads: the GCM tag covers every byte, so no CRC) lends a view
instead: of a read-only mapping of the segment when it is sealed (sealed segments never change, and a
mapping is dropped, never closed, so a view in use outlives compaction), else of a per-thread buffer
the record is ``preadv``'d into. The decrypt then reads the page cache directly and the plaintext is
the one new buffer of the read.

Deletes append a tombstone. ``compact`` copies the live records of segments whose dead share exceeds
a threshold to the end of the log, fdatasyncs the copies, then removes the old files; a crash in
between leaves duplicates, which open resolves to the newest. A tombstone is dropped by compaction
only when no older segment survives it (else it is copied forward), so a deleted block never returns.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import mmap
import os
import queue
import re
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, TypeVar

import google_crc32c
import numpy as np

from kvstore.stores.base import (BlockNotFound, CorruptBlock, IndexedStore, StoreError, StoreFull, check_name,
                                 lend_scratch)

log = logging.getLogger(__name__)

SEG_MAGIC = b"MKVS"
SEG_VERSION = 1
PUT, DELETE = 1, 2
_HEAD = struct.Struct("<4sBBHHQII")  # magic, version, kind, len(session), len(block id), payload length, crc, header crc
_PRE = struct.Struct("<4sBBHHQ")  # the fields the crc covers
_CRCS = struct.Struct("<II")
_MAX_NAME = 800  # 200 characters of UTF-8
_NAME = re.compile(r"seg-(\d{6,})\.log")
_SYNC_FILE_RANGE_WRITE = 2
_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
_GROUP = 1 << 20  # bytes CRC'd then written per pwritev (stays in the CPU cache between the two)

Buffer = bytes | bytearray | memoryview
Key = tuple[str, str]
T = TypeVar("T")
B = TypeVar("B", bytes, memoryview)  # a payload as read (new bytes) or lent (a view)
Loc = tuple[int, int, int, int]  # segment number, record offset, header + names length, payload length


def _range_writeback() -> Callable[[int, int, int], None]:
    """``start(fd, offset, n)``: queue those dirty pages for writing without waiting (no-op off Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        sfr = libc.sync_file_range
    except (OSError, AttributeError, TypeError):
        return lambda fd, offset, n: None
    sfr.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return lambda fd, offset, n: sfr(fd, offset, n, _SYNC_FILE_RANGE_WRITE) and None


_start_writeback = _range_writeback()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _crc(data: Buffer, crc: int = 0) -> int:
    """CRC32C (Castagnoli; the SSE4.2 instruction): 28 GB/s here against 7 for zlib's CRC32, which
    alone would cost a third of a page-cache write. google-crc32c is a dependency of aiortc (pinned in
    requirements.lock); its C extension holds the GIL below 1 MB, so this runs in the writer thread."""
    if not isinstance(data, bytes):  # its C extension takes only buffers without a release hook: view as ndarray
        data = np.frombuffer(data, dtype=np.uint8)
    return google_crc32c.extend(crc, data)


def encode_record(kind: int, session: str, block_id: str, data: Buffer = b"") -> bytes:
    """Header + names of a record (the payload follows them on disk)."""
    names = session.encode() + block_id.encode()
    pre = _PRE.pack(SEG_MAGIC, SEG_VERSION, kind, len(session.encode()), len(block_id.encode()), len(data))
    crc = _crc(data, _crc(names, _crc(pre)))
    crcs = struct.pack("<I", crc)
    return pre + crcs + struct.pack("<I", _crc(names, _crc(pre + crcs))) + names


class _Bad(Exception):
    """A record that does not parse; ``key`` when its names are still readable."""

    def __init__(self, why: str, key: Key | None = None) -> None:
        super().__init__(why)
        self.key = key


class _Segment:
    __slots__ = ("number", "path", "fd", "size", "dead", "live", "tombs", "readers", "retired", "written_back",
                 "map")

    def __init__(self, number: int, path: Path, fd: int, size: int = 0) -> None:
        self.number, self.path, self.fd, self.size = number, path, fd, size
        self.dead = 0  # bytes of superseded records, tombstones and skipped damage
        self.live: set[Key] = set()  # keys whose current record is here
        self.tombs: set[Key] = set()  # keys with a tombstone here
        self.readers = 0  # reads in flight (the fd is closed only when none is)
        self.retired = False
        self.written_back = 0  # write-back started up to here
        self.map: mmap.mmap | None = None  # read-only mapping once sealed and read (see read_unverified)


class SegmentStore(IndexedStore):
    """Blocks appended to ``root/seg-NNNNNN.log``; see the module docstring for the format and guarantees.

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
        self.segment_bytes = segment_bytes
        self.max_pending_bytes = max_pending_bytes
        self.batch_bytes = batch_bytes
        self.writeback_lag_bytes = writeback_lag_bytes
        self.skipped: list[tuple[Path, int, int, str]] = []  # damage found at open: (segment, start, end, why)
        self._index: dict[str, dict[str, int]] = {}  # session -> block id -> payload bytes (live blocks)
        self._nbytes = 0
        self._locs: dict[Key, Loc] = {}  # newest record of each live block that is on disk
        self._damaged: dict[Key, str] = {}  # live blocks whose newest record is unreadable
        self._pending: dict[Key, tuple[Buffer, bytes]] = {}  # queued puts: (payload, header + names)
        self._pending_bytes = 0
        self._failed: dict[Key, OSError] = {}  # puts the writer could not write
        self._failed_deletes: dict[Key, OSError] = {}
        self._segments: dict[int, _Segment] = {}
        self._current: _Segment = None  # type: ignore[assignment]  # set by _open_segments
        self._unsynced: set[int] = set()  # segments written since their last fdatasync
        self._dir_dirty = False  # a segment was created since the folder was last fsynced
        self._sealer = ThreadPoolExecutor(1, thread_name_prefix="segment-store-sealer")
        self._sealing: Future | None = None  # the background seal of the previous segment
        self._seal_errors: list[str] = []
        self._lock = threading.Condition()
        self._queue: queue.Queue = queue.Queue()
        self._closed = False
        self._open_segments()
        self._writer = threading.Thread(target=self._write_loop, name="segment-store-writer", daemon=True)
        self._writer.start()

    # -------------------------------------------------------------------------------------------
    # open
    # -------------------------------------------------------------------------------------------

    def _open_segments(self) -> None:
        numbers = sorted(int(m.group(1)) for p in self.root.iterdir() if (m := _NAME.fullmatch(p.name)))
        for i, number in enumerate(numbers):
            last = i == len(numbers) - 1
            path = self._seg_path(number)
            fd = os.open(path, (os.O_RDWR if last else os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0))
            seg = _Segment(number, path, fd)
            self._segments[number] = seg
            self._scan(seg, recent=i >= len(numbers) - 2, last=last)
            if last:
                self._current = seg
        if self._current is None:  # an empty store: its first segment now, not on the first put
            self._create(1)
            _fsync_dir(self.root)

    def _seg_path(self, number: int) -> Path:
        return self.root / f"seg-{number:06d}.log"

    def _scan(self, seg: _Segment, recent: bool, last: bool) -> None:
        """Index a segment's records; skip damage (resync), truncate a torn tail of the newest one.
        ``recent``: one of the two newest segments, the only ones that may hold writes not yet durable
        (see :meth:`_roll`): payloads are checked too, and damage there is taken for an unflushed write."""
        size = os.fstat(seg.fd).st_size
        offset = 0
        while offset < size:
            try:
                kind, key, hlen, length = self._parse(seg.fd, offset, size, verify=recent)
            except _Bad as bad:
                resume = self._resync(seg.fd, offset + 1, size, verify=recent)
                if resume is None and last:
                    log.warning("segment store %s: %s: torn tail at byte %d (%s); %d bytes dropped (a write cut "
                                "short by a crash)", self.root, seg.path.name, offset, bad, size - offset)
                    self.skipped.append((seg.path, offset, size, f"torn tail: {bad}"))
                    os.ftruncate(seg.fd, offset)
                    size = offset
                    break
                end = size if resume is None else resume
                log.warning("segment store %s: %s: damaged record at byte %d (%s); bytes %d-%d skipped", self.root,
                            seg.path.name, offset, bad, offset, end)
                self.skipped.append((seg.path, offset, end, str(bad)))
                seg.dead += end - offset
                if bad.key is not None and not recent:  # do not let an older version of that block reappear
                    self._forget(bad.key)
                    self._index.setdefault(bad.key[0], {})[bad.key[1]] = 0
                    self._damaged[bad.key] = f"record at byte {offset} of {seg.path.name} is damaged ({bad})"
                offset = end
                continue
            self._apply(seg, kind, key, offset, hlen, length)
            offset += hlen + length
        seg.size = size

    def _apply(self, seg: _Segment, kind: int, key: Key, offset: int, hlen: int, length: int) -> None:
        """Make a record found at open the newest state of its key."""
        self._forget(key)
        if kind == PUT:
            self._locs[key] = (seg.number, offset, hlen, length)
            seg.live.add(key)
            self._index.setdefault(key[0], {})[key[1]] = length
            self._nbytes += length
        else:
            seg.tombs.add(key)
            seg.dead += hlen
            self._index.get(key[0], {}).pop(key[1], None)
            if not self._index.get(key[0], True):
                del self._index[key[0]]

    def _forget(self, key: Key) -> None:
        """Mark the key's current record dead (lock held or not yet shared)."""
        loc = self._locs.pop(key, None)
        if loc is not None:
            seg = self._segments[loc[0]]
            seg.dead += loc[2] + loc[3]
            seg.live.discard(key)
        self._damaged.pop(key, None)
        size = self._index.get(key[0], {}).get(key[1])
        if size is not None:
            self._nbytes -= size

    @staticmethod
    def _parse(fd: int, offset: int, size: int, verify: bool) -> tuple[int, Key, int, int]:
        """``(kind, key, header + names length, payload length)`` of the record at ``offset``."""
        head = os.pread(fd, _HEAD.size + 2 * _MAX_NAME, offset)
        if len(head) < _HEAD.size:
            raise _Bad(f"truncated header ({len(head)} bytes)")
        magic, version, kind, ls, lb, length, crc, hcrc = _HEAD.unpack_from(head)
        if magic != SEG_MAGIC or version != SEG_VERSION:
            raise _Bad("no record header")
        key = None
        if 0 < ls <= _MAX_NAME and 0 < lb <= _MAX_NAME and len(head) >= _HEAD.size + ls + lb:
            try:
                names = head[_HEAD.size:_HEAD.size + ls + lb]
                key = (check_name("session", names[:ls].decode()), check_name("block id", names[ls:].decode()))
            except (UnicodeDecodeError, ValueError):
                key = None
        if key is None:
            raise _Bad("unreadable names")
        if _crc(names, _crc(head[:_PRE.size + 4])) != hcrc:
            raise _Bad("header checksum mismatch", key)
        if kind not in (PUT, DELETE) or (kind == DELETE and length):
            raise _Bad(f"unknown record kind {kind}", key)
        hlen = _HEAD.size + ls + lb
        if offset + hlen + length > size:
            raise _Bad(f"record of {hlen + length} bytes ends past the end of the file ({size} bytes)", key)
        if verify:
            payload = os.pread(fd, length, offset + hlen)
            if len(payload) != length or _crc(payload, _crc(names, _crc(head[:_PRE.size]))) != crc:
                raise _Bad("checksum mismatch", key)
        return kind, key, hlen, length

    @classmethod
    def _resync(cls, fd: int, start: int, size: int, verify: bool) -> int | None:
        """Offset of the next valid record at or after ``start``, or None."""
        chunk = 1 << 20
        pos = start
        while pos < size:
            data = os.pread(fd, chunk + len(SEG_MAGIC) - 1, pos)
            found = data.find(SEG_MAGIC)
            while found != -1:
                try:
                    cls._parse(fd, pos + found, size, verify)
                    return pos + found
                except _Bad:
                    found = data.find(SEG_MAGIC, found + 1)
            pos += chunk
        return None

    # -------------------------------------------------------------------------------------------
    # BlockStore
    # -------------------------------------------------------------------------------------------

    def put(self, session: str, block_id: str, data: bytes) -> None:
        self._put(session, block_id, data if isinstance(data, bytes) else bytes(data))

    def put_owned(self, session: str, block_id: str, data: Buffer) -> None:
        """Like :meth:`put` without the defensive copy: the store keeps ``data`` until it is written."""
        self._put(session, block_id, memoryview(data).cast("B") if isinstance(data, memoryview) else data)

    def _put(self, session: str, block_id: str, data: Buffer) -> None:
        check_name("session", session)
        check_name("block id", block_id)
        key = (session, block_id)
        size = len(data)
        entry = (data,)  # a fresh object per put: the writer writes it only while it is the pending one
        with self._lock:
            while self._pending_bytes > self.max_pending_bytes and self._writer.is_alive() and not self._closed:
                if self._failed:
                    raise StoreFull(f"segment store {self.root}: {len(self._failed)} block(s) could not be written "
                                    f"({next(iter(self._failed.values()))}) and {self._pending_bytes} bytes wait in "
                                    f"memory: block {block_id!r} of session {session!r} not stored")
                self._lock.wait(0.1)  # back-pressure on a slow disk
            if self._closed:
                raise StoreError("segment store is closed")
            self._admit("segment store", session, block_id, size)
            previous = self._pending.get(key)
            self._pending_bytes += size - (len(previous[0]) if previous is not None else 0)
            self._pending[key] = entry
            self._failed.pop(key, None)
            self._queue.put((PUT, key, entry))

    def get(self, session: str, block_id: str) -> bytes:
        return self._get(session, block_id, verify=True)

    def get_unverified(self, session: str, block_id: str) -> bytes:
        """:meth:`get` without the CRC32 pass over the payload (the caller authenticates the bytes, e.g.
        AES-GCM); the header is still checked against the index."""
        return self._get(session, block_id, verify=False)

    def read_with(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        """``use(view)`` of the CRC-checked payload, lent as :meth:`read_unverified` lends it (no copy)."""
        return self._lend(session, block_id, use, verify=True)

    def read_unverified(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        """``use(view)`` of the payload without the CRC pass: a view of the segment's mapping when the
        segment is sealed (no copy at all: the caller's decrypt reads the page cache), else read (header and
        payload in one ``preadv``) into this thread's reused buffer. Either way a decrypting caller makes
        one new buffer per block, the plaintext, where ``get_unverified`` + decrypt made two."""
        return self._lend(session, block_id, use, verify=False)

    def _lend(self, session: str, block_id: str, use: Callable[[memoryview], T], verify: bool) -> T:
        key = (session, block_id)
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
                return use(self._checked(seg, loc, key, buf[:hlen], buf[hlen:], verify))
            return lend_scratch(hlen + length, read)
        try:
            with memoryview(mapped) as whole:
                record = whole[loc[1]:loc[1] + hlen + length]
                return use(self._checked(seg, loc, key, record[:hlen], record[hlen:], verify))
        finally:
            self._release_reader(seg)

    def _mapping(self, seg: _Segment, loc: Loc) -> mmap.mmap | None:
        """A read-only mapping of a sealed segment (made on its first read) that holds the record at
        ``loc``; None for the current segment, which still grows. A sealed segment never changes: appends
        go to the current one, compaction copies records forward, so a mapping only ever goes away with
        its last reader (it is dropped, never closed: a view still in use keeps it alive)."""
        if seg is self._current:
            return None
        end = loc[1] + loc[2] + loc[3]
        if os.fstat(seg.fd).st_size < end:
            return None  # cut short behind our back: no SIGBUS, the pread path reports it
        mapped = seg.map
        if mapped is None:
            with self._lock:
                if seg.map is None and not seg.retired:
                    size = os.fstat(seg.fd).st_size  # not seg.size: after a failed cut-back that can pass the end
                    seg.map = mmap.mmap(seg.fd, size, prot=mmap.PROT_READ) if size else None
                mapped = seg.map
        return mapped if mapped is not None and end <= len(mapped) else None

    def _release_reader(self, seg: _Segment) -> None:
        with self._lock:
            seg.readers -= 1
            if seg.retired and not seg.readers:
                os.close(seg.fd)

    def _locate(self, key: Key) -> tuple[_Segment, Loc, tuple | None]:
        """``(None, None, entry)`` for a queued block, else ``(segment, record, None)`` with a reader counted
        on the segment (the caller releases it: :meth:`_release_reader`, or :meth:`_read_at`)."""
        with self._lock:
            entry = self._pending.get(key)
            if entry is not None:
                return None, None, entry  # type: ignore[return-value]
            loc = self._locs.get(key)
            if loc is None:
                if key in self._damaged:
                    raise CorruptBlock(f"block {key[1]!r} of session {key[0]!r}: {self._damaged[key]}")
                raise BlockNotFound(f"no block {key[1]!r} in session {key[0]!r} (segment store {self.root})")
            seg = self._segments[loc[0]]
            seg.readers += 1
        return seg, loc, None

    def _read_at(self, seg: _Segment, loc: Loc, key: Key, bufs: list[memoryview]) -> None:
        """Fill ``bufs`` from the record at ``loc`` (one ``preadv``) and release the reader."""
        try:
            got = os.preadv(seg.fd, bufs, loc[1])
        except OSError as exc:
            raise CorruptBlock(f"{self._where(seg, loc, key)}: unreadable ({exc})") from None
        finally:
            self._release_reader(seg)
        if got != loc[2] + loc[3]:
            raise CorruptBlock(f"{self._where(seg, loc, key)}: truncated segment")

    def _check_head(self, seg: _Segment, loc: Loc, key: Key, head: Buffer) -> int:
        """The record's CRC, once its header matches the index (a put of this key, this length)."""
        magic, version, kind, ls, lb, n, crc, _ = _HEAD.unpack_from(head)
        names = key[0].encode() + key[1].encode()
        if (magic, version, kind, ls + lb, n) != (SEG_MAGIC, SEG_VERSION, PUT, len(names), loc[3]) \
                or head[_HEAD.size:] != names:
            raise CorruptBlock(f"{self._where(seg, loc, key)}: the record header does not match the index")
        return crc

    def _checked(self, seg: _Segment, loc: Loc, key: Key, head: Buffer, payload: B, verify: bool) -> B:
        """``payload`` of the record at ``loc``, once its ``head`` (header + names) and, with ``verify``,
        its CRC check."""
        crc = self._check_head(seg, loc, key, head)
        if verify and _crc(payload, _crc(head[_HEAD.size:], _crc(head[:_PRE.size]))) != crc:
            raise CorruptBlock(f"{self._where(seg, loc, key)}: checksum mismatch")
        return payload

    @staticmethod
    def _where(seg: _Segment, loc: Loc, key: Key) -> str:
        return f"block {key[1]!r} of session {key[0]!r} ({seg.path.name} at byte {loc[1]})"

    def _get(self, session: str, block_id: str, verify: bool) -> bytes:
        key = (session, block_id)
        seg, loc, entry = self._locate(key)
        if entry is not None:
            return entry[0] if isinstance(entry[0], bytes) else bytes(entry[0])
        hlen, length = loc[2], loc[3]
        try:  # the payload is read into its own new bytes: the one copy a caller-owned block needs
            head = os.pread(seg.fd, hlen, loc[1])
            payload = os.pread(seg.fd, length, loc[1] + hlen)
        except OSError as exc:
            raise CorruptBlock(f"{self._where(seg, loc, key)}: unreadable ({exc})") from None
        finally:
            self._release_reader(seg)
        if len(head) != hlen or len(payload) != length:
            raise CorruptBlock(f"{self._where(seg, loc, key)}: truncated segment")
        return self._checked(seg, loc, key, head, payload, verify)

    def delete(self, session: str, block_id: str) -> bool:
        key = (session, block_id)
        with self._lock:
            existed = block_id in self._index.get(session, {})
            if not existed:
                return False
            self._forget(key)
            del self._index[session][block_id]
            if not self._index[session]:
                del self._index[session]
            entry = self._pending.pop(key, None)
            if entry is not None:
                self._pending_bytes -= len(entry[0])
                self._lock.notify_all()
            self._failed.pop(key, None)
            self._queue.put((DELETE, key, None))
        return True

    def nbytes(self) -> int:
        return self._nbytes

    def dead_bytes(self) -> int:
        """Bytes in the segments that no live block needs (what :meth:`compact` can free)."""
        with self._lock:
            return sum(seg.dead for seg in self._segments.values())

    def disk_bytes(self) -> int:
        with self._lock:
            return sum(seg.size for seg in self._segments.values())

    def drain(self) -> None:
        """Wait until the writer has written every put queued so far (page cache; no fsync)."""
        if self._writer.is_alive():
            self._queue.join()

    def flush(self) -> None:
        """Write what is queued, fdatasync the segment(s) written since the last flush, fsync the folder
        if a segment was created; raise if some block could not be written or made durable."""
        self._retry_failed()
        errors = self._call("sync")
        with self._lock:
            failed = dict(self._failed) | dict(self._failed_deletes)
        if errors:
            raise StoreError(f"segment store {self.root}: cannot make the log durable: {errors[0]}")
        if failed:
            (session, block_id), exc = next(iter(failed.items()))
            kind = StoreFull if getattr(exc, "errno", None) in _FULL_ERRNOS else StoreError
            raise kind(f"segment store {self.root}: {len(failed)} block(s) not written, e.g. {block_id!r} of "
                       f"session {session!r}: {exc} (they stay readable in memory; free space and flush again)")

    def _retry_failed(self) -> None:
        with self._lock:
            for key in list(self._failed):
                entry = self._pending.get(key)
                if entry is not None:
                    self._queue.put((PUT, key, entry))
            for key in list(self._failed_deletes):
                if key[1] not in self._index.get(key[0], {}):
                    self._queue.put((DELETE, key, None))
            self._failed.clear()
            self._failed_deletes.clear()

    def compact(self, threshold: float = 0.5) -> dict[str, int]:
        """Copy the live records of segments more than ``threshold`` dead to the end of the log, make
        the copies durable, then remove those segments. Returns counts and the bytes freed."""
        return self._call("compact", threshold)

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            with self._lock:
                self._closed = True
            self._queue.put(None)
            self._writer.join(timeout=30)
            self._sealer.shutdown()
            for seg in self._segments.values():
                seg.map = None
                os.close(seg.fd)
            self._segments.clear()

    def _call(self, op: str, *args: object):
        """Run ``op`` in the writer thread after everything queued before it; its result or its error."""
        if not self._writer.is_alive():
            raise StoreError(f"segment store {self.root}: the writer thread is not running")
        done = threading.Event()
        box: list = []
        self._queue.put((op, args, (done, box)))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    # -------------------------------------------------------------------------------------------
    # writer thread
    # -------------------------------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            ops = [self._queue.get()]
            size = 0
            while ops[-1] is not None and isinstance(ops[-1][0], int) and size < self.batch_bytes and len(ops) < 256:
                size += len(ops[-1][2][0]) if ops[-1][0] == PUT else 0
                try:
                    ops.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            records = [op for op in ops if op is not None and isinstance(op[0], int)]
            try:
                if records:
                    self._append(records)
            except Exception:  # never let the writer die: its blocks would never be written
                log.exception("segment store %s: writer failed", self.root)
            control = ops[-1]
            if control is not None and isinstance(control[0], str):
                done, box = control[2]
                try:
                    box.append(self._sync() if control[0] == "sync" else self._compact(*control[1]))
                except BaseException as exc:  # handed to the caller
                    box.append(exc)
                done.set()
            for _ in ops:
                self._queue.task_done()
            if ops[-1] is None:
                return

    def _append(self, records: list[tuple]) -> None:
        """Append queued puts and deletes in order (superseded puts are skipped), one pwritev per run."""
        with self._lock:
            live = [(kind, key, entry) for kind, key, entry in records
                    if kind == DELETE or self._pending.get(key) is entry]
        run: list[tuple] = []
        run_size = 0
        for kind, key, entry in live:
            if kind == PUT:  # header (and its CRC pass) made right before the write: see _write
                parts = None
                n = _HEAD.size + len(key[0].encode()) + len(key[1].encode()) + len(entry[0])
            else:
                parts = [encode_record(DELETE, *key)]
                n = len(parts[0])
            if run and self._current.size + run_size + n > self.segment_bytes:
                self._write_run(run)
                run, run_size = [], 0
            run.append((kind, key, entry, parts, n))
            run_size += n
        if run:
            self._write_run(run)

    def _write_run(self, run: list[tuple]) -> None:
        """Write and index user records; a failed write leaves them pending and reported by flush."""
        try:
            seg, start = self._write(run)
        except OSError as exc:
            log.error("segment store %s: cannot append %d record(s): %s", self.root, len(run), exc)
            with self._lock:
                for kind, key, entry, _, _ in run:
                    if kind == PUT and self._pending.get(key) is entry:
                        self._failed[key] = exc
                    elif kind == DELETE and key[1] not in self._index.get(key[0], {}):
                        self._failed_deletes[key] = exc
            return
        self._index_run(seg, start, run)

    def _write(self, run: list[tuple]) -> tuple[_Segment, int]:
        """Append a run of ``(kind, key, entry, parts, nbytes)`` records to the current segment (rolled
        first when they do not fit) and start their write-back; returns ``(segment, offset)``.

        A put's CRC is computed here, a group of about 1 MiB at a time right before the ``pwritev`` of
        that group, so the write copies the payload from the CPU cache the CRC pass just filled: one
        pass over the data from memory instead of two (computed in ``put`` it cost 30% of the bandwidth).
        On an error the segment is cut back to where the run started."""
        total = sum(r[4] for r in run)
        seg = self._current
        if seg.size and seg.size + total > self.segment_bytes:
            seg = self._roll()
        start = pos = seg.size
        group: list[Buffer] = []
        group_bytes = 0
        try:
            for kind, key, entry, parts, n in run:
                group += parts if parts is not None else (encode_record(PUT, *key, entry[0]), entry[0])
                group_bytes += n
                if group_bytes >= _GROUP:
                    pos = self._pwritev(seg, group, pos)
                    group, group_bytes = [], 0
            if group:
                self._pwritev(seg, group, pos)
        except OSError:
            try:
                os.ftruncate(seg.fd, start)
            except OSError as exc:  # a torn record stays: seal this segment, open resyncs past it
                log.error("segment store %s: cannot cut %s back: %s", self.root, seg.path.name, exc)
                seg.size = self.segment_bytes
            raise
        behind = start + total - self.writeback_lag_bytes
        if behind > seg.written_back:  # see the module docstring: bounds what a flush waits for
            # from the sealer's thread: submitting the I/O blocked this one for up to 14 ms per call here. It
            # runs before any later seal of this segment (one thread, in order), so its fd is still open
            self._sealer.submit(_start_writeback, seg.fd, seg.written_back, behind - seg.written_back)
            seg.written_back = behind
        return seg, start

    def _index_run(self, seg: _Segment, start: int, run: list[tuple]) -> None:
        """Point the index at records just written (``copy``: a compaction copy of record ``entry``)."""
        with self._lock:
            seg.size = start + sum(r[4] for r in run)
            self._unsynced.add(seg.number)
            offset = start
            for kind, key, entry, parts, n in run:
                if kind == DELETE:
                    seg.dead += n
                    seg.tombs.add(key)
                    self._failed_deletes.pop(key, None)
                elif kind == "copy":
                    if self._locs.get(key) == entry:  # still the block's current record: the copy takes over
                        old = self._segments[entry[0]]
                        old.live.discard(key)
                        old.dead += n
                        self._locs[key] = (seg.number, offset, entry[2], entry[3])
                        seg.live.add(key)
                    else:
                        seg.dead += n
                elif self._pending.get(key) is entry:
                    loc = self._locs.get(key)
                    if loc is not None:
                        self._segments[loc[0]].dead += loc[2] + loc[3]
                        self._segments[loc[0]].live.discard(key)
                    self._locs[key] = (seg.number, offset, n - len(entry[0]), len(entry[0]))
                    self._damaged.pop(key, None)
                    seg.live.add(key)
                    del self._pending[key]
                    self._pending_bytes -= len(entry[0])
                else:  # superseded or deleted while being written
                    seg.dead += n
                offset += n
            self._lock.notify_all()

    @staticmethod
    def _pwritev(seg: _Segment, parts: list[Buffer], pos: int) -> int:
        """Write all of ``parts`` at ``pos`` (looping over short writes); returns the end offset."""
        views = [memoryview(p) for p in parts]
        while views:
            written = os.pwritev(seg.fd, views[:1024], pos)  # IOV_MAX
            if not written:
                raise OSError(errno.EIO, f"no progress writing {seg.path.name}")
            pos += written
            while views and written >= len(views[0]):
                written -= len(views[0])
                views.pop(0)
            if views and written:
                views[0] = views[0][written:]
        return pos

    def _create(self, number: int) -> _Segment:
        path = self._seg_path(number)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        seg = _Segment(number, path, fd)
        with self._lock:
            self._segments[number] = seg
            self._current = seg
        return seg

    def _roll(self) -> _Segment:
        """Start the next segment and seal the current one in the background (fdatasync, then fsync the
        folder, which also records the new file). A roll first waits for the previous seal, so at most
        the two newest segments ever hold writes that are not durable: open checks those two in full."""
        self._wait_sealed()
        old = self._current
        seg = self._create(max(self._segments, default=0) + 1)
        self._dir_dirty = True
        if old is not None:
            self._sealing = self._sealer.submit(self._seal, old)
        return seg

    def _seal(self, seg: _Segment) -> None:
        try:
            with self._lock:
                unsynced = seg.number in self._unsynced
            if unsynced:
                os.fdatasync(seg.fd)
                with self._lock:
                    self._unsynced.discard(seg.number)
            _fsync_dir(self.root)
            self._dir_dirty = False  # no roll can happen meanwhile: it waits for this seal
        except OSError as exc:
            log.error("segment store %s: cannot seal %s: %s", self.root, seg.path.name, exc)
            self._seal_errors.append(f"{seg.path.name}: {exc}")

    def _wait_sealed(self) -> None:
        if self._sealing is not None:
            self._sealing.result()
            self._sealing = None

    def _sync(self) -> list[str]:
        self._wait_sealed()
        errors, self._seal_errors = self._seal_errors, []
        with self._lock:
            numbers, self._unsynced = sorted(self._unsynced), set()
        for number in numbers:
            seg = self._segments.get(number)
            try:
                if seg is not None:
                    os.fdatasync(seg.fd)
            except OSError as exc:
                errors.append(f"{seg.path.name}: {exc}")
                with self._lock:
                    self._unsynced.add(number)
        if self._dir_dirty:
            try:
                _fsync_dir(self.root)
                self._dir_dirty = False
            except OSError as exc:
                errors.append(f"{self.root}: {exc}")
        return errors

    def _compact(self, threshold: float) -> dict[str, int]:
        cur = self._current
        if cur.size and cur.dead / cur.size > threshold:
            self._roll()  # the current segment is a candidate too: seal it first
        self._wait_sealed()
        with self._lock:
            victims = [s for n, s in sorted(self._segments.items())
                       if s is not self._current and s.size and s.dead / s.size > threshold and n not in self._unsynced]
        report = {"segments_removed": 0, "records_copied": 0, "tombstones_copied": 0, "bytes_freed": 0}
        if not victims:
            return report
        doomed = {s.number for s in victims}
        for seg in victims:
            with self._lock:
                live = [(key, self._locs[key]) for key in sorted(seg.live)]
                older_survivor = any(n < seg.number and n not in doomed for n in self._segments)
                tombs = [key for key in sorted(seg.tombs) if older_survivor and key[1] not in self._index.get(key[0], {})]
            run: list[tuple] = []
            run_size = 0
            for key, loc in live:
                n = loc[2] + loc[3]
                raw = os.pread(seg.fd, n, loc[1])
                if len(raw) != n:
                    raise StoreError(f"segment store {self.root}: {seg.path.name} is shorter than its index")
                if run and (run_size + n > self.batch_bytes or self._current.size + run_size + n > self.segment_bytes):
                    self._write_copies(run)
                    run, run_size = [], 0
                run.append(("copy", key, loc, [raw], n))
                run_size += n
                report["records_copied"] += 1
            for key in tombs:
                record = encode_record(DELETE, *key)
                run.append((DELETE, key, None, [record], len(record)))
                report["tombstones_copied"] += 1
            if run:
                self._write_copies(run)
        errors = self._sync()  # the copies are durable before any original goes
        if errors:
            raise StoreError(f"segment store {self.root}: compaction copies not durable: {errors[0]}")
        for seg in victims:  # oldest first, folder fsynced after each: a dropped tombstone never outlives its put
            with self._lock:
                if seg.live:
                    continue  # a copy failed: keep the segment
                del self._segments[seg.number]
                seg.retired = True
                seg.map = None  # dropped, not closed: a reader's view keeps it alive until released
                if not seg.readers:
                    os.close(seg.fd)
            seg.path.unlink()
            _fsync_dir(self.root)
            report["segments_removed"] += 1
            report["bytes_freed"] += seg.size
        return report

    def _write_copies(self, run: list[tuple]) -> None:
        """Write compaction copies; a failed write aborts the compaction (nothing is removed)."""
        try:
            seg, start = self._write(run)
        except OSError as exc:
            raise StoreError(f"segment store {self.root}: compaction could not write its copies: {exc}") from None
        self._index_run(seg, start, run)
