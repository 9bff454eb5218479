"""Disk tier: one memory-mapped file per block, written behind by a writer thread.

Crash safety comes from the write path, not from a journal: a block is written to a temporary file
in its session folder and renamed over its final name (atomic on POSIX), so a process killed at any
instant leaves either the old block, the new block, or a stray temporary that the next open deletes.
``flush`` waits for the writer and fsyncs the written files and folders, so what was flushed also
survives a power loss. Each file carries its session, block id, length and CRC32; a file that does
not match (torn by the file system, edited, truncated) is reported and skipped at open and raises
:class:`CorruptBlock` at read -- it never yields wrong bytes and never stops the store from opening.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import mmap
import os
import queue
import struct
import threading
import zlib
from pathlib import Path
from urllib.parse import quote

from kvstore.stores.base import BlockNotFound, BlockStore, CorruptBlock, StoreError, StoreFull, check_name

log = logging.getLogger(__name__)

FILE_MAGIC = b"MKVF"
FILE_VERSION = 1
_FILE_HEADER = struct.Struct("<4sBHHQI")  # magic, version, len(session), len(block id), payload length, crc32
_SUFFIX = ".blk"
_TMP = ".tmp"


def _file_name(name: str) -> str:
    escaped = quote(name, safe="").replace(".", "%2E")
    return escaped if len(escaped) <= 180 else "h-" + hashlib.blake2b(name.encode(), digest_size=20).hexdigest()


class DiskStore(BlockStore):
    """Blocks under ``root/<session>/<block>.blk``; see the module docstring for the guarantees.

    ``quota_bytes`` caps the block bytes held (a put over it raises :class:`StoreFull` at once); a
    file-system error in the writer (ENOSPC, EFBIG) keeps the block in memory, readable, and is
    raised by the next :meth:`flush` as :class:`StoreFull` / :class:`StoreError` for that session.
    """

    tier = "disk"

    def __init__(self, root: str | Path, quota_bytes: int | None = None, write_behind: bool = True,
                 max_pending_bytes: int = 64 << 20) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.quota_bytes = quota_bytes
        self.write_behind = write_behind
        self.max_pending_bytes = max_pending_bytes
        self.skipped: list[tuple[Path, str]] = []  # damaged files found at open (path, why)
        self.removed_temporaries: list[Path] = []
        self._index: dict[str, dict[str, int]] = {}  # session -> block id -> payload bytes
        self._paths: dict[tuple[str, str], Path] = {}
        self._pending: dict[tuple[str, str], bytes] = {}
        self._pending_bytes = 0
        self._failed: dict[tuple[str, str], OSError] = {}
        self._unsynced: set[Path] = set()
        self._lock = threading.Condition()
        self._queue: queue.Queue[tuple[str, tuple[str, str]] | None] = queue.Queue()
        self._closed = False
        self._scan()
        self._writer = threading.Thread(target=self._write_loop, name="disk-store-writer", daemon=True)
        if write_behind:
            self._writer.start()

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
                    session, block_id, length, _ = self._read_header(path)
                except CorruptBlock as exc:
                    self.skipped.append((path, str(exc)))
                    log.warning("disk store %s: skipping damaged block file %s: %s", self.root, path.name, exc)
                    continue
                self._index.setdefault(session, {})[block_id] = length
                self._paths[(session, block_id)] = path

    @staticmethod
    def _read_header(path: Path) -> tuple[str, str, int, int]:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(_FILE_HEADER.size)
            if len(head) < _FILE_HEADER.size:
                raise CorruptBlock(f"{path.name}: truncated header ({size} bytes)")
            magic, version, ls, lb, length, crc = _FILE_HEADER.unpack(head)
            if magic != FILE_MAGIC or version != FILE_VERSION:
                raise CorruptBlock(f"{path.name}: not a minutia block file")
            names = f.read(ls + lb)
        if len(names) != ls + lb or size != _FILE_HEADER.size + ls + lb + length:
            raise CorruptBlock(f"{path.name}: torn file ({size} bytes, header says "
                               f"{_FILE_HEADER.size + ls + lb + length})")
        try:
            return names[:ls].decode(), names[ls:].decode(), length, crc
        except UnicodeDecodeError:
            raise CorruptBlock(f"{path.name}: unreadable names") from None

    def _path(self, session: str, block_id: str) -> Path:
        return self.root / _file_name(session) / (_file_name(block_id) + _SUFFIX)

    # -------------------------------------------------------------------------------------------
    # BlockStore
    # -------------------------------------------------------------------------------------------

    def put(self, session: str, block_id: str, data: bytes) -> None:
        check_name("session", session)
        check_name("block id", block_id)
        data = bytes(data)
        key = (session, block_id)
        with self._lock:
            if self._closed:
                raise StoreError("disk store is closed")
            old = self._index.get(session, {}).get(block_id, 0)
            if self.quota_bytes is not None and self.nbytes() - old + len(data) > self.quota_bytes:
                raise StoreFull(f"disk store quota of {self.quota_bytes} bytes reached: block {block_id!r} of "
                                f"session {session!r} ({len(data)} bytes) not stored")
            self._index.setdefault(session, {})[block_id] = len(data)
            if not self.write_behind:
                self._pending[key] = data
            else:
                while self._pending_bytes > self.max_pending_bytes:  # back-pressure on a slow disk
                    self._lock.wait(0.1)
                previous = self._pending.get(key)
                self._pending_bytes += len(data) - (len(previous) if previous is not None else 0)
                self._pending[key] = data
                self._failed.pop(key, None)
        if self.write_behind:
            self._queue.put(("put", key))
        else:
            self._apply(("put", key))

    def get(self, session: str, block_id: str) -> bytes:
        key = (session, block_id)
        with self._lock:
            if key in self._pending:
                return self._pending[key]
            if block_id not in self._index.get(session, {}):
                raise BlockNotFound(f"no block {block_id!r} in session {session!r} (disk store {self.root})")
            path = self._paths.get(key, self._path(session, block_id))
        return self._read(path, session, block_id)

    def _read(self, path: Path, session: str, block_id: str) -> bytes:
        try:
            real_session, real_id, length, crc = self._read_header(path)
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                start = _FILE_HEADER.size + len(real_session.encode()) + len(real_id.encode())
                payload = mm[start:start + length]
        except FileNotFoundError:
            raise BlockNotFound(f"block file of {block_id!r} (session {session!r}) vanished") from None
        except (OSError, ValueError) as exc:
            raise CorruptBlock(f"block {block_id!r} of session {session!r}: unreadable ({exc})") from None
        if (real_session, real_id) != (session, block_id):
            raise CorruptBlock(f"{path.name} holds {real_id!r} of {real_session!r}, not {block_id!r} of {session!r}")
        if zlib.crc32(payload) != crc:
            raise CorruptBlock(f"block {block_id!r} of session {session!r}: checksum mismatch ({path})")
        return payload

    def delete(self, session: str, block_id: str) -> bool:
        key = (session, block_id)
        with self._lock:
            existed = self._index.get(session, {}).pop(block_id, None) is not None
            if not self._index.get(session, True):
                self._index.pop(session, None)
            data = self._pending.pop(key, None) if not self.write_behind else None
            if self.write_behind and key in self._pending:
                self._pending_bytes -= len(self._pending.pop(key))
            self._failed.pop(key, None)
        del data
        if existed:
            if self.write_behind:
                self._queue.put(("del", key))
            else:
                self._apply(("del", key))
        return existed

    def contains(self, session: str, block_id: str) -> bool:
        with self._lock:
            return block_id in self._index.get(session, {})

    def list(self, session: str) -> list[str]:
        with self._lock:
            return sorted(self._index.get(session, {}))

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted(s for s, blocks in self._index.items() if blocks)

    def nbytes(self) -> int:
        return sum(sum(blocks.values()) for blocks in self._index.values())

    def flush(self) -> None:
        """Wait for the writer, fsync what it wrote; raise if some block could not be written."""
        if self.write_behind and self._writer.is_alive():
            self._queue.join()
        with self._lock:
            unsynced, self._unsynced = self._unsynced, set()
            failed = dict(self._failed)
        folders = set()
        for path in unsynced:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            folders.add(path.parent)
        for folder in folders | ({self.root} if folders else set()):
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if failed:
            (session, block_id), exc = next(iter(failed.items()))
            kind = StoreFull if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) else StoreError
            raise kind(f"disk store {self.root}: {len(failed)} block(s) not written, e.g. {block_id!r} of session "
                       f"{session!r}: {exc} (they stay readable in memory; free space and flush again)")

    def retry_failed(self) -> None:
        """Queue the blocks whose write failed again (after space was freed)."""
        with self._lock:
            keys = list(self._failed)
            self._failed.clear()
        for key in keys:
            self._queue.put(("put", key))

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            if self.write_behind and self._writer.is_alive():
                self._queue.put(None)
                self._writer.join(timeout=10)

    # -------------------------------------------------------------------------------------------
    # writer
    # -------------------------------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            op = self._queue.get()
            try:
                if op is None:
                    return
                self._apply(op)
            finally:
                self._queue.task_done()

    def _apply(self, op: tuple[str, tuple[str, str]]) -> None:
        kind, (session, block_id) = op
        path = self._path(session, block_id)
        if kind == "del":
            with self._lock:
                if block_id in self._index.get(session, {}):
                    return  # re-put after the delete: the later put owns the file
                self._paths.pop((session, block_id), None)
            path.unlink(missing_ok=True)
            return
        with self._lock:
            data = self._pending.get((session, block_id))
        if data is None:
            return  # deleted or superseded meanwhile
        try:
            self._write_file(path, session, block_id, data)
        except OSError as exc:
            log.error("disk store %s: cannot write block %r of session %r: %s", self.root, block_id, session, exc)
            with self._lock:
                self._failed[(session, block_id)] = exc
            if not self.write_behind:
                self.flush()
            return
        with self._lock:
            self._paths[(session, block_id)] = path
            self._unsynced.add(path)
            if self._pending.get((session, block_id)) is data:
                del self._pending[(session, block_id)]
                if self.write_behind:
                    self._pending_bytes -= len(data)
            self._lock.notify_all()

    @staticmethod
    def _write_file(path: Path, session: str, block_id: str, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        s, b = session.encode(), block_id.encode()
        tmp = path.with_name(f"{path.name}{_TMP}-{os.getpid()}-{threading.get_ident()}")
        try:
            with open(tmp, "wb") as f:
                f.write(_FILE_HEADER.pack(FILE_MAGIC, FILE_VERSION, len(s), len(b), len(data), zlib.crc32(data)))
                f.write(s + b)
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
