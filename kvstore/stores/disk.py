"""Disk tier: one block file per block, written behind by writer threads.

Crash safety comes from the write path, not from a journal: a block is written to a temporary file
in its session folder (header, names and payload in one ``writev``) and renamed over its final name
(atomic on POSIX), so a process killed at any instant leaves either the old block, the new block, or
a stray temporary that the next open deletes. Right after the write the writer asks the kernel to
start writing the file back (``sync_file_range``, Linux), so the disk works while the caller goes on.
``flush`` waits for the writers, runs ``fdatasync`` on the written files from ``sync_threads``
threads at once and fsyncs the folders, so what was flushed also survives a power loss. Each file
carries its session, block id, length and CRC32; a file that does not match (torn by the file
system, edited, truncated) is reported and skipped at open and raises :class:`CorruptBlock` at read
-- it never yields wrong bytes and never stops the store from opening.

Writes are sharded by block over ``writers`` threads (one block always goes to the same thread, so
its puts and deletes stay in order). Each new file's fdatasync waits for a journal commit; issued
together, concurrent fdatasyncs share commits, which is what makes durable writes of many small
files fast (one at a time they ran 3-4x slower here). Reads are one ``pread`` of header + names and
one of the payload: a whole-block read copies the bytes once either way, and copying out of an
``mmap`` measured about half as fast (a page fault per 4 KiB). ``read_unverified`` (encrypted reads)
reads the whole file into a per-thread buffer it reuses, so a decrypted read makes one new buffer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import logging
import os
import queue
import struct
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence, TypeVar
from urllib.parse import quote

from kvstore.stores import readahead
from kvstore.stores.base import (BlockNotFound, CorruptBlock, IndexedStore, StoreError, StoreFull, check_name,
                                 lend_scratch)

log = logging.getLogger(__name__)

FILE_MAGIC = b"MKVF"
FILE_VERSION = 1
_FILE_HEADER = struct.Struct("<4sBHHQI")  # magic, version, len(session), len(block id), payload length, crc32
_SUFFIX = ".blk"
_TMP = ".tmp"
_SYNC_FILE_RANGE_WRITE = 2

Buffer = bytes | bytearray | memoryview
Key = tuple[str, str]
T = TypeVar("T")


def _file_name(name: str) -> str:
    escaped = quote(name, safe="").replace(".", "%2E")
    return escaped if len(escaped) <= 180 else "h-" + hashlib.blake2b(name.encode(), digest_size=20).hexdigest()


def _writeback_starter() -> Callable[[int], None]:
    """``start(fd)``: queue the file's dirty pages for writing without waiting (no-op off Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        sfr = libc.sync_file_range
    except (OSError, AttributeError, TypeError):
        return lambda fd: None
    sfr.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return lambda fd: sfr(fd, 0, 0, _SYNC_FILE_RANGE_WRITE) and None


_start_writeback = _writeback_starter()


def _fsync_path(path: Path, data_only: bool = False) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # deleted since: nothing to make durable
    try:
        (os.fdatasync if data_only and hasattr(os, "fdatasync") else os.fsync)(fd)
    finally:
        os.close(fd)


class DiskStore(IndexedStore):
    """Blocks under ``root/<session>/<block>.blk``; see the module docstring for the guarantees.

    ``quota_bytes`` caps the block bytes held (a put over it raises :class:`StoreFull` at once); a
    file-system error in a writer (ENOSPC, EFBIG) keeps the block in memory, readable, and is
    raised by the next :meth:`flush` as :class:`StoreFull` / :class:`StoreError` for that session.
    """

    tier = "disk"

    def __init__(self, root: str | Path, quota_bytes: int | None = None, write_behind: bool = True,
                 max_pending_bytes: int = 64 << 20, writers: int = 2, sync_threads: int = 8) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.quota_bytes = quota_bytes
        self.write_behind = write_behind
        self.max_pending_bytes = max_pending_bytes
        self.skipped: list[tuple[Path, str]] = []  # damaged files found at open (path, why)
        self.removed_temporaries: list[Path] = []
        self._index: dict[str, dict[str, int]] = {}  # session -> block id -> payload bytes
        self._nbytes = 0
        self._paths: dict[Key, Path] = {}
        self._pending: dict[Key, Buffer] = {}
        self._pending_bytes = 0
        self._failed: dict[Key, OSError] = {}
        nshards = max(1, writers) if write_behind else 1
        self.sync_threads = max(1, sync_threads)
        self._sync_pool: ThreadPoolExecutor | None = None
        self._unsynced: set[Path] = set()  # written, not yet fdatasynced
        self._dirty_dirs: set[Path] = set()  # folders with renames or unlinks not yet fsynced
        self._lock = threading.Condition()
        self._queues: list[queue.Queue[tuple[str, Key] | None]] = [queue.Queue() for _ in range(nshards)]
        self._closed = False
        self._scan()
        self._writers = [threading.Thread(target=self._write_loop, args=(q,), name=f"disk-store-writer-{i}",
                                          daemon=True) for i, q in enumerate(self._queues)] if write_behind else []
        for thread in self._writers:
            thread.start()

    # -------------------------------------------------------------------------------------------
    # open
    # -------------------------------------------------------------------------------------------

    def _scan(self) -> None:
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for path in sorted(folder.iterdir()):
                if _TMP in path.name:
                    path.unlink(missing_ok=True)  # a write cut short before its rename
                    self.removed_temporaries.append(path)
                    continue
                if not path.name.endswith(_SUFFIX):
                    continue
                try:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        session, block_id, length, _, _ = self._read_header(fd, path)
                    finally:
                        os.close(fd)
                except CorruptBlock as exc:
                    self.skipped.append((path, str(exc)))
                    log.warning("disk store %s: skipping damaged block file %s: %s", self.root, path.name, exc)
                    continue
                self._index.setdefault(session, {})[block_id] = length
                self._nbytes += length
                self._paths[(session, block_id)] = path

    @staticmethod
    def _read_header(fd: int, path: Path) -> tuple[str, str, int, int, int]:
        """``(session, block id, payload length, crc32, payload offset)`` of an open block file."""
        size = os.fstat(fd).st_size
        head = os.pread(fd, _FILE_HEADER.size, 0)
        if len(head) < _FILE_HEADER.size:
            raise CorruptBlock(f"{path.name}: truncated header ({size} bytes)")
        magic, version, ls, lb, length, crc = _FILE_HEADER.unpack(head)
        if magic != FILE_MAGIC or version != FILE_VERSION:
            raise CorruptBlock(f"{path.name}: not a minutia block file")
        names = os.pread(fd, ls + lb, _FILE_HEADER.size)
        start = _FILE_HEADER.size + ls + lb
        if len(names) != ls + lb or size != start + length:
            raise CorruptBlock(f"{path.name}: torn file ({size} bytes, header says {start + length})")
        try:
            return names[:ls].decode(), names[ls:].decode(), length, crc, start
        except UnicodeDecodeError:
            raise CorruptBlock(f"{path.name}: unreadable names") from None

    def _path(self, session: str, block_id: str) -> Path:
        return self.root / _file_name(session) / (_file_name(block_id) + _SUFFIX)

    # -------------------------------------------------------------------------------------------
    # BlockStore
    # -------------------------------------------------------------------------------------------

    def put(self, session: str, block_id: str, data: bytes) -> None:
        self._put(session, block_id, data if isinstance(data, bytes) else bytes(data))

    def put_owned(self, session: str, block_id: str, data: Buffer) -> None:
        """Like :meth:`put` without the defensive copy: the store keeps ``data`` until it is written."""
        self._put(session, block_id, data)

    def _shard(self, key: Key) -> int:
        return hash(key) % len(self._queues)

    def _put(self, session: str, block_id: str, data: Buffer) -> None:
        check_name("session", session)
        check_name("block id", block_id)
        key = (session, block_id)
        size = len(data)
        with self._lock:
            if self._closed:
                raise StoreError("disk store is closed")
            self._admit("disk store", session, block_id, size)
            if self.write_behind:
                while self._pending_bytes > self.max_pending_bytes:  # back-pressure on a slow disk
                    self._lock.wait(0.1)
                previous = self._pending.get(key)
                self._pending_bytes += size - (len(previous) if previous is not None else 0)
                self._failed.pop(key, None)
            self._pending[key] = data
        if self.write_behind:
            self._queues[self._shard(key)].put(("put", key))
        else:
            self._apply(("put", key))

    def get(self, session: str, block_id: str) -> bytes:
        return self._get(session, block_id, verify=True)

    def get_unverified(self, session: str, block_id: str) -> bytes:
        """:meth:`get` without the CRC32 pass (the caller authenticates the bytes; a damaged file then
        fails there, e.g. as :class:`kvstore.crypto.TamperedBlock`)."""
        return self._get(session, block_id, verify=False)

    def read_with(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        """``use(view)`` of the checked payload, read as :meth:`read_unverified` reads it (no new buffer)."""
        return self._lend(session, block_id, use, verify=True)

    def read_unverified(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        """``use(view)`` of the payload without the CRC pass, the whole file read (one ``preadv``) into this
        thread's reused buffer: a decrypting caller makes one new buffer per block, not two."""
        return self._lend(session, block_id, use, verify=False)

    def will_read(self, session: str, block_ids: Sequence[str]) -> None:
        """Read-ahead of the block files on the read-ahead thread (a file per block: the kernel's own
        read-ahead never crosses to the next one, so cold reads would wait for the disk one by one)."""
        with self._lock:
            held = self._index.get(session, {})
            paths = [self._paths.get((session, b), self._path(session, b)) for b in block_ids
                     if b in held and (session, b) not in self._pending]
        readahead.hint_files(paths)

    def _lend(self, session: str, block_id: str, use: Callable[[memoryview], T], verify: bool) -> T:
        key = (session, block_id)
        with self._lock:
            pending = self._pending.get(key)
            if pending is None:
                if block_id not in self._index.get(session, {}):
                    raise BlockNotFound(f"no block {block_id!r} in session {session!r} (disk store {self.root})")
                path = self._paths.get(key, self._path(session, block_id))
        if pending is not None:
            return use(memoryview(pending).cast("B"))
        fd = self._open_block(path, session, block_id)
        try:
            size = os.fstat(fd).st_size

            def read(buf: memoryview) -> T:
                try:
                    got = os.preadv(fd, [buf], 0)
                except OSError as exc:
                    raise CorruptBlock(f"block {block_id!r} of session {session!r}: unreadable ({exc})") from None
                if got != size:
                    raise CorruptBlock(f"{path.name}: torn file (read {got} of {size} bytes)")
                _, crc, start = self._check_head(buf, size, path, session, block_id)
                if verify and zlib.crc32(buf[start:]) != crc:
                    raise CorruptBlock(f"block {block_id!r} of session {session!r}: checksum mismatch ({path})")
                return use(buf[start:])
            return lend_scratch(size, read)
        finally:
            os.close(fd)

    @staticmethod
    def _check_head(data: Buffer, size: int, path: Path, session: str, block_id: str) -> tuple[int, int, int]:
        """``(payload length, crc32, payload offset)`` from the start of a block file of ``size`` bytes
        (``data``: at least its header and names), once they match the block asked for."""
        if len(data) < _FILE_HEADER.size:
            raise CorruptBlock(f"{path.name}: truncated header ({size} bytes)")
        magic, version, ls, lb, length, crc = _FILE_HEADER.unpack_from(data)
        if magic != FILE_MAGIC or version != FILE_VERSION:
            raise CorruptBlock(f"{path.name}: not a minutia block file")
        start = _FILE_HEADER.size + ls + lb
        if size != start + length or len(data) < start:
            raise CorruptBlock(f"{path.name}: torn file ({size} bytes, header says {start + length})")
        s = session.encode()
        if ls != len(s) or data[_FILE_HEADER.size:start] != s + block_id.encode():
            raise CorruptBlock(f"{path.name} does not hold block {block_id!r} of session {session!r}")
        return length, crc, start

    @staticmethod
    def _open_block(path: Path, session: str, block_id: str) -> int:
        try:
            return os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise BlockNotFound(f"block file of {block_id!r} (session {session!r}) vanished") from None
        except OSError as exc:
            raise CorruptBlock(f"block {block_id!r} of session {session!r}: unreadable ({exc})") from None

    def _get(self, session: str, block_id: str, verify: bool) -> bytes:
        key = (session, block_id)
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None:
                return pending if isinstance(pending, bytes) else bytes(pending)
            if block_id not in self._index.get(session, {}):
                raise BlockNotFound(f"no block {block_id!r} in session {session!r} (disk store {self.root})")
            path = self._paths.get(key, self._path(session, block_id))
        return self._read(path, session, block_id, verify)

    def _read(self, path: Path, session: str, block_id: str, verify: bool = True) -> bytes:
        fd = self._open_block(path, session, block_id)
        try:  # header and names in one pread (their lengths are known), the payload in another
            size = os.fstat(fd).st_size
            head = os.pread(fd, _FILE_HEADER.size + len(session.encode()) + len(block_id.encode()), 0)
            length, crc, start = self._check_head(head, size, path, session, block_id)
            payload = os.pread(fd, length, start)
        except OSError as exc:
            raise CorruptBlock(f"block {block_id!r} of session {session!r}: unreadable ({exc})") from None
        finally:
            os.close(fd)
        if len(payload) != length or (verify and zlib.crc32(payload) != crc):
            raise CorruptBlock(f"block {block_id!r} of session {session!r}: checksum mismatch ({path})")
        return payload

    def delete(self, session: str, block_id: str) -> bool:
        key = (session, block_id)
        with self._lock:
            size = self._index.get(session, {}).pop(block_id, None)
            existed = size is not None
            if existed:
                self._nbytes -= size
            if not self._index.get(session, True):
                self._index.pop(session, None)
            data = self._pending.pop(key, None)
            if self.write_behind and data is not None:
                self._pending_bytes -= len(data)
                self._lock.notify_all()
            self._failed.pop(key, None)
        del data
        if existed:
            if self.write_behind:
                self._queues[self._shard(key)].put(("del", key))
            else:
                self._apply(("del", key))
        return existed

    def nbytes(self) -> int:
        return self._nbytes

    def drain(self) -> None:
        """Wait until the writers have written every put queued so far (page cache; no fsync)."""
        if self._writers and all(t.is_alive() for t in self._writers):
            for q in self._queues:
                q.join()

    def flush(self) -> None:
        """Wait for the writers, fdatasync what they wrote (in parallel), fsync the folders; raise if
        some block could not be written or made durable."""
        self.drain()
        with self._lock:
            paths, self._unsynced = self._unsynced, set()
            folders, self._dirty_dirs = self._dirty_dirs, set()
            failed = dict(self._failed)
        sync_errors = self._fdatasync_all(sorted(paths))
        for folder in sorted(folders, key=lambda p: -len(p.parts)):  # session folders, then the root
            _fsync_path(folder)
        if sync_errors:
            path, exc = sync_errors[0]
            raise StoreError(f"disk store {self.root}: cannot make {len(sync_errors)} block file(s) durable, e.g. "
                             f"{path.name}: {exc}")
        if failed:
            (session, block_id), exc = next(iter(failed.items()))
            kind = StoreFull if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) else StoreError
            raise kind(f"disk store {self.root}: {len(failed)} block(s) not written, e.g. {block_id!r} of session "
                       f"{session!r}: {exc} (they stay readable in memory; free space and flush again)")

    def _fdatasync_all(self, paths: list[Path]) -> list[tuple[Path, OSError]]:
        def sync(path: Path) -> tuple[Path, OSError] | None:
            try:
                _fsync_path(path, data_only=True)
            except OSError as exc:
                return path, exc
            return None

        if len(paths) > 1 and self.sync_threads > 1:
            if self._sync_pool is None:
                self._sync_pool = ThreadPoolExecutor(self.sync_threads, thread_name_prefix="disk-store-sync")
            results = list(self._sync_pool.map(sync, paths))
        else:
            results = [sync(p) for p in paths]
        return [r for r in results if r is not None]

    def retry_failed(self) -> None:
        """Queue the blocks whose write failed again (after space was freed)."""
        with self._lock:
            keys = list(self._failed)
            self._failed.clear()
        for key in keys:
            if self.write_behind:
                self._queues[self._shard(key)].put(("put", key))
            else:
                self._apply(("put", key))

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            for q in self._queues if self._writers else ():
                q.put(None)
            for thread in self._writers:
                thread.join(timeout=10)
            if self._sync_pool is not None:
                self._sync_pool.shutdown()

    # -------------------------------------------------------------------------------------------
    # writers
    # -------------------------------------------------------------------------------------------

    def _write_loop(self, q: queue.Queue) -> None:
        while True:
            op = q.get()
            try:
                if op is None:
                    return
                self._apply(op)
            except Exception:  # never let a writer die: its blocks would never be written
                log.exception("disk store %s: writer failed on %r", self.root, op)
            finally:
                q.task_done()

    def _apply(self, op: tuple[str, Key]) -> None:
        kind, (session, block_id) = op
        path = self._path(session, block_id)
        if kind == "del":
            with self._lock:
                if block_id in self._index.get(session, {}):
                    return  # re-put after the delete: the later put owns the file
                self._paths.pop((session, block_id), None)
                self._unsynced.discard(path)
                self._dirty_dirs.add(path.parent)
            path.unlink(missing_ok=True)
            return
        with self._lock:
            data = self._pending.get((session, block_id))
        if data is None:
            return  # deleted or superseded meanwhile
        try:
            new_folder = self._write_file(path, session, block_id, data)
        except OSError as exc:
            log.error("disk store %s: cannot write block %r of session %r: %s", self.root, block_id, session, exc)
            with self._lock:
                self._failed[(session, block_id)] = exc
            if not self.write_behind:
                self.flush()  # raise it to the caller of put now
            return
        with self._lock:
            self._paths[(session, block_id)] = path
            self._unsynced.add(path)
            self._dirty_dirs.add(path.parent)
            if new_folder:
                self._dirty_dirs.add(self.root)
            if self._pending.get((session, block_id)) is data:
                del self._pending[(session, block_id)]
                if self.write_behind:
                    self._pending_bytes -= len(data)
            self._lock.notify_all()

    @staticmethod
    def _write_file(path: Path, session: str, block_id: str, data: Buffer) -> bool:
        """Write ``data`` to a temporary (one writev), start its write-back, rename; returns whether the
        session folder was created."""
        s, b = session.encode(), block_id.encode()
        parts = [memoryview(_FILE_HEADER.pack(FILE_MAGIC, FILE_VERSION, len(s), len(b), len(data), zlib.crc32(data))
                            + s + b), memoryview(data).cast("B")]
        tmp = path.with_name(f"{path.name}{_TMP}-{os.getpid()}-{threading.get_ident()}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        new_folder = False
        try:
            try:
                fd = os.open(tmp, flags, 0o644)
            except FileNotFoundError:  # the session's first block: make its folder (no stat per write)
                path.parent.mkdir(parents=True, exist_ok=True)
                new_folder = True
                fd = os.open(tmp, flags, 0o644)
            try:
                while parts:  # a regular file takes it all at once; loop for short writes anyway
                    written = os.writev(fd, parts)
                    if not written:
                        raise OSError(errno.EIO, f"no progress writing {tmp.name}")
                    while parts and written >= len(parts[0]):
                        written -= len(parts[0])
                        parts.pop(0)
                    if parts:
                        parts[0] = parts[0][written:]
                _start_writeback(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return new_folder
