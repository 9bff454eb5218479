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

The parts: the file's name, layout, write and reads (:mod:`.block_file`), the batched fdatasyncs
(:class:`~.filesync.SyncBatch`); this module is the index, the writer threads and the store API.
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from kvstore.stores import block_file, readahead
from kvstore.stores.base import BlockNotFound, Buffer, CorruptBlock, IndexedStore, Key, StoreError
from kvstore.stores.filesync import SyncBatch

log = logging.getLogger(__name__)

T = TypeVar("T")


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
        self._syncs = SyncBatch(sync_threads)  # what flush makes durable
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
                if block_file.TMP in path.name:
                    path.unlink(missing_ok=True)  # a write cut short before its rename
                    self.removed_temporaries.append(path)
                    continue
                if not path.name.endswith(block_file.SUFFIX):
                    continue
                try:
                    session, block_id, length = block_file.read_header(path)
                except CorruptBlock as exc:
                    self.skipped.append((path, str(exc)))
                    log.warning("disk store %s: skipping damaged block file %s: %s", self.root, path.name, exc)
                    continue
                self._index.setdefault(session, {})[block_id] = length
                self._nbytes += length
                self._paths[(session, block_id)] = path

    def _path(self, session: str, block_id: str) -> Path:
        return block_file.block_path(self.root, session, block_id)

    # -------------------------------------------------------------------------------------------
    # BlockStore
    # -------------------------------------------------------------------------------------------

    def _put(self, session: str, block_id: str, data: Buffer) -> None:
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
        self._submit("put", key)

    def _submit(self, kind: str, key: Key) -> None:
        """Queue a put or delete on the block's writer (one block, one thread: its operations stay in
        order), or apply it now without write-behind."""
        if self.write_behind:
            self._queues[hash(key) % len(self._queues)].put((kind, key))
        else:
            self._apply((kind, key))

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

    def _locate(self, session: str, block_id: str) -> tuple[Buffer | None, Path | None]:
        """``(bytes not yet written, None)`` or ``(None, the block's file)``; BlockNotFound if not held."""
        key = (session, block_id)
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None:
                return pending, None
            if block_id not in self._index.get(session, {}):
                raise BlockNotFound(f"no block {block_id!r} in session {session!r} (disk store {self.root})")
            return None, self._paths.get(key, self._path(session, block_id))

    def _lend(self, session: str, block_id: str, use: Callable[[memoryview], T], verify: bool) -> T:
        pending, path = self._locate(session, block_id)
        if pending is not None:
            return use(memoryview(pending).cast("B"))
        return block_file.lend(path, session, block_id, use, verify)

    def _get(self, session: str, block_id: str, verify: bool) -> bytes:
        pending, path = self._locate(session, block_id)
        if pending is not None:
            return pending if isinstance(pending, bytes) else bytes(pending)
        return block_file.read(path, session, block_id, verify)

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
            self._submit("del", key)
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
            failed = dict(self._failed)
        sync_errors = self._syncs.sync()
        if sync_errors:
            path, exc = sync_errors[0]
            raise StoreError(f"disk store {self.root}: cannot make {len(sync_errors)} block file(s) durable, e.g. "
                             f"{path.name}: {exc}")
        self._raise_unwritten(f"disk store {self.root}", failed)

    def _release(self) -> None:
        for q in self._queues if self._writers else ():
            q.put(None)
        for thread in self._writers:
            thread.join(timeout=10)
        self._syncs.close()

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
                self._syncs.removed(path)
            path.unlink(missing_ok=True)
            return
        with self._lock:
            data = self._pending.get((session, block_id))
        if data is None:
            return  # deleted or superseded meanwhile
        try:
            new_folder = block_file.write(path, session, block_id, data)
        except OSError as exc:
            log.error("disk store %s: cannot write block %r of session %r: %s", self.root, block_id, session, exc)
            with self._lock:
                self._failed[(session, block_id)] = exc
            if not self.write_behind:
                self.flush()  # raise it to the caller of put now
            return
        with self._lock:
            self._paths[(session, block_id)] = path
            self._syncs.wrote(path, *((path.parent, self.root) if new_folder else (path.parent,)))
            if self._pending.get((session, block_id)) is data:
                del self._pending[(session, block_id)]
                if self.write_behind:
                    self._pending_bytes -= len(data)
            self._lock.notify_all()
