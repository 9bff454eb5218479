"""The segment log's writer thread: appends queued puts and deletes, rolls, seals and syncs segments.

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
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from kvstore.stores.base import StoreError
from kvstore.stores.filesync import fsync_path, start_writeback
from kvstore.stores.segment.records import (DELETE, PUT, Buffer, Key, Segment, encode_record,
                                            record_size)
from kvstore.stores.segment.state import LogState

log = logging.getLogger(__name__)

_GROUP = 1 << 20  # bytes CRC'd then written per pwritev (stays in the CPU cache between the two)

# A run to append: (kind, key, entry, parts, nbytes). kind PUT (entry: the pending (payload,)), DELETE, or
# "copy" (compaction: entry is the Loc copied, parts its raw bytes); parts None: encoded right before the write.
Run = list[tuple]


class Writer:
    """The one thread that writes the segment files, fed by a queue of ``(kind, key, entry)`` records and
    control calls (:meth:`call`), run in order; a sealer thread fdatasyncs rolled segments behind it."""

    def __init__(self, state: LogState, segment_bytes: int, batch_bytes: int, writeback_lag_bytes: int) -> None:
        self.state = state
        self.segment_bytes = segment_bytes
        self.batch_bytes = batch_bytes
        self.writeback_lag_bytes = writeback_lag_bytes
        self._queue: queue.Queue = queue.Queue()
        self._dir_dirty = False  # a segment was created since the folder was last fsynced
        self._sealer = ThreadPoolExecutor(1, thread_name_prefix="segment-store-sealer")
        self._sealing: Future | None = None  # the background seal of the previous segment
        self._seal_errors: list[str] = []
        self._thread = threading.Thread(target=self._loop, name="segment-store-writer", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, kind: int, key: Key, entry: tuple | None) -> None:
        """Queue a put (``entry``: the pending one) or a delete (None) for writing."""
        self._queue.put((kind, key, entry))

    def drain(self) -> None:
        """Wait until everything queued so far is written (page cache; no fsync)."""
        if self.alive():
            self._queue.join()

    def call(self, fn: Callable, *args: object):
        """Run ``fn(*args)`` in the writer thread after everything queued before it; its result or its error."""
        if not self.alive():
            raise StoreError(f"segment store {self.state.root}: the writer thread is not running")
        done = threading.Event()
        box: list = []
        self._queue.put((fn, args, (done, box)))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def stop(self) -> None:
        """End the thread once the queue is written, then the sealer."""
        self._queue.put(None)
        self._thread.join(timeout=30)
        self._sealer.shutdown()

    def _loop(self) -> None:
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
                log.exception("segment store %s: writer failed", self.state.root)
            control = ops[-1]
            if control is not None and callable(control[0]):
                done, box = control[2]
                try:
                    box.append(control[0](*control[1]))
                except BaseException as exc:  # handed to the caller
                    box.append(exc)
                done.set()
            for _ in ops:
                self._queue.task_done()
            if ops[-1] is None:
                return

    def _append(self, records: list[tuple]) -> None:
        """Append queued puts and deletes in order (superseded puts are skipped), one pwritev per run."""
        state = self.state
        with state.lock:
            live = [(kind, key, entry) for kind, key, entry in records
                    if kind == DELETE or state.pending.get(key) is entry]
        run: Run = []
        run_size = 0
        for kind, key, entry in live:
            if kind == PUT:  # header (and its CRC pass) made right before the write: see write
                parts = None
                n = record_size(*key, len(entry[0]))
            else:
                parts = [encode_record(DELETE, *key)]
                n = len(parts[0])
            if run and state.current.size + run_size + n > self.segment_bytes:
                self._write_run(run)
                run, run_size = [], 0
            run.append((kind, key, entry, parts, n))
            run_size += n
        if run:
            self._write_run(run)

    def _write_run(self, run: Run) -> None:
        """Write and index user records; a failed write leaves them pending and reported by flush."""
        state = self.state
        try:
            seg, start = self.write(run)
        except OSError as exc:
            log.error("segment store %s: cannot append %d record(s): %s", state.root, len(run), exc)
            with state.lock:
                for kind, key, entry, _, _ in run:
                    if kind == PUT and state.pending.get(key) is entry:
                        state.failed[key] = exc
                    elif kind == DELETE and not state.listed(key):
                        state.failed_deletes[key] = exc
            return
        self.index_run(seg, start, run)

    def write(self, run: Run) -> tuple[Segment, int]:
        """Append a run of ``(kind, key, entry, parts, nbytes)`` records to the current segment (rolled
        first when they do not fit) and start their write-back; returns ``(segment, offset)``.

        A put's CRC is computed here, a group of about 1 MiB at a time right before the ``pwritev`` of
        that group, so the write copies the payload from the CPU cache the CRC pass just filled: one
        pass over the data from memory instead of two (computed in ``put`` it cost 30% of the bandwidth).
        On an error the segment is cut back to where the run started."""
        total = sum(r[4] for r in run)
        seg = self.state.current
        if seg.size and seg.size + total > self.segment_bytes:
            seg = self.roll()
        start = pos = seg.size
        group: list[Buffer] = []
        group_bytes = 0
        try:
            for kind, key, entry, parts, n in run:
                group += parts if parts is not None else (encode_record(PUT, *key, entry[0]), entry[0])
                group_bytes += n
                if group_bytes >= _GROUP:
                    pos = _pwritev(seg, group, pos)
                    group, group_bytes = [], 0
            if group:
                _pwritev(seg, group, pos)
        except OSError:
            try:
                os.ftruncate(seg.fd, start)
            except OSError as exc:  # a torn record stays: seal this segment, open resyncs past it
                log.error("segment store %s: cannot cut %s back: %s", self.state.root, seg.path.name, exc)
                seg.size = self.segment_bytes
            raise
        behind = start + total - self.writeback_lag_bytes
        if behind > seg.written_back:  # see the module docstring: bounds what a flush waits for
            # from the sealer's thread: submitting the I/O blocked this one for up to 14 ms per call here. It
            # runs before any later seal of this segment (one thread, in order), so its fd is still open
            self._sealer.submit(start_writeback, seg.fd, seg.written_back, behind - seg.written_back)
            seg.written_back = behind
        return seg, start

    def index_run(self, seg: Segment, start: int, run: Run) -> None:
        """Point the index at records just written (``copy``: a compaction copy of record ``entry``)."""
        state = self.state
        with state.lock:
            seg.size = start + sum(r[4] for r in run)
            state.unsynced.add(seg.number)
            offset = start
            for kind, key, entry, parts, n in run:
                if kind == DELETE:
                    seg.dead += n
                    seg.tombs.add(key)
                    state.failed_deletes.pop(key, None)
                elif kind == "copy":
                    if state.locs.get(key) == entry:  # still the block's current record: the copy takes over
                        old = state.segments[entry[0]]
                        old.live.discard(key)
                        old.dead += n
                        state.locs[key] = (seg.number, offset, entry[2], entry[3])
                        seg.live.add(key)
                    else:
                        seg.dead += n
                elif state.pending.get(key) is entry:
                    loc = state.locs.get(key)
                    if loc is not None:
                        state.segments[loc[0]].dead += loc[2] + loc[3]
                        state.segments[loc[0]].live.discard(key)
                    state.locs[key] = (seg.number, offset, n - len(entry[0]), len(entry[0]))
                    state.damaged.pop(key, None)
                    seg.live.add(key)
                    del state.pending[key]
                    state.pending_bytes -= len(entry[0])
                else:  # superseded or deleted while being written
                    seg.dead += n
                offset += n
            state.lock.notify_all()

    def roll(self) -> Segment:
        """Start the next segment and seal the current one in the background (fdatasync, then fsync the
        folder, which also records the new file). A roll first waits for the previous seal, so at most
        the two newest segments ever hold writes that are not durable: open checks those two in full."""
        self.wait_sealed()
        old = self.state.current
        seg = self.state.create(max(self.state.segments, default=0) + 1)
        self._dir_dirty = True
        if old is not None:
            self._sealing = self._sealer.submit(self._seal, old)
        return seg

    def _seal(self, seg: Segment) -> None:
        state = self.state
        try:
            with state.lock:
                unsynced = seg.number in state.unsynced
            if unsynced:
                os.fdatasync(seg.fd)
                with state.lock:
                    state.unsynced.discard(seg.number)
            fsync_path(state.root)
            self._dir_dirty = False  # no roll can happen meanwhile: it waits for this seal
        except OSError as exc:
            log.error("segment store %s: cannot seal %s: %s", state.root, seg.path.name, exc)
            self._seal_errors.append(f"{seg.path.name}: {exc}")

    def wait_sealed(self) -> None:
        if self._sealing is not None:
            self._sealing.result()
            self._sealing = None

    def sync(self) -> list[str]:
        """fdatasync every segment written since the last sync, fsync the folder if a segment was created;
        returns the errors (with those of background seals since the last sync)."""
        state = self.state
        self.wait_sealed()
        errors, self._seal_errors = self._seal_errors, []
        with state.lock:
            numbers, state.unsynced = sorted(state.unsynced), set()
        for number in numbers:
            seg = state.segments.get(number)
            try:
                if seg is not None:
                    os.fdatasync(seg.fd)
            except OSError as exc:
                errors.append(f"{seg.path.name}: {exc}")
                with state.lock:
                    state.unsynced.add(number)
        if self._dir_dirty:
            try:
                fsync_path(state.root)
                self._dir_dirty = False
            except OSError as exc:
                errors.append(f"{state.root}: {exc}")
        return errors


def _pwritev(seg: Segment, parts: list[Buffer], pos: int) -> int:
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
