"""Compaction of a segment log: live records of mostly-dead segments are copied forward, then the old files go.

Deletes append a tombstone. ``compact`` copies the live records of segments whose dead share exceeds
a threshold to the end of the log, fdatasyncs the copies, then removes the old files; a crash in
between leaves duplicates, which open resolves to the newest. A tombstone is dropped by compaction
only when no older segment survives it (else it is copied forward), so a deleted block never returns.
"""

from __future__ import annotations

import os

from kvstore.stores.base import StoreError
from kvstore.stores.filesync import fsync_path
from kvstore.stores.segment.records import DELETE, encode_record
from kvstore.stores.segment.state import LogState
from kvstore.stores.segment.writer import Run, Writer


class Compactor:
    """Runs in the writer thread (``Writer.call``): it appends its copies through ``writer`` like any write."""

    def __init__(self, state: LogState, writer: Writer) -> None:
        self.state = state
        self.writer = writer

    def compact(self, threshold: float) -> dict[str, int]:
        """Copy the live records of segments more than ``threshold`` dead forward, sync, remove those segments."""
        state, writer = self.state, self.writer
        cur = state.current
        if cur.size and cur.dead / cur.size > threshold:
            writer.roll()  # the current segment is a candidate too: seal it first
        writer.wait_sealed()
        with state.lock:
            victims = [s for n, s in sorted(state.segments.items())
                       if s is not state.current and s.size and s.dead / s.size > threshold and n not in state.unsynced]
        report = {"segments_removed": 0, "records_copied": 0, "tombstones_copied": 0, "bytes_freed": 0}
        if not victims:
            return report
        doomed = {s.number for s in victims}
        for seg in victims:
            with state.lock:
                live = [(key, state.locs[key]) for key in sorted(seg.live)]
                older_survivor = any(n < seg.number and n not in doomed for n in state.segments)
                tombs = [key for key in sorted(seg.tombs) if older_survivor and not state.listed(key)]
            run: Run = []
            run_size = 0
            for key, loc in live:
                n = loc[2] + loc[3]
                raw = os.pread(seg.fd, n, loc[1])
                if len(raw) != n:
                    raise StoreError(f"segment store {state.root}: {seg.path.name} is shorter than its index")
                if run and (run_size + n > writer.batch_bytes
                            or state.current.size + run_size + n > writer.segment_bytes):
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
        errors = writer.sync()  # the copies are durable before any original goes
        if errors:
            raise StoreError(f"segment store {state.root}: compaction copies not durable: {errors[0]}")
        for seg in victims:  # oldest first, folder fsynced after each: a dropped tombstone never outlives its put
            with state.lock:
                if seg.live:
                    continue  # a copy failed: keep the segment
                del state.segments[seg.number]
                seg.retired = True
                seg.map = None  # dropped, not closed: a reader's view keeps it alive until released
                if not seg.readers:
                    os.close(seg.fd)
            seg.path.unlink()
            fsync_path(state.root)
            report["segments_removed"] += 1
            report["bytes_freed"] += seg.size
        return report

    def _write_copies(self, run: Run) -> None:
        """Write compaction copies; a failed write aborts the compaction (nothing is removed)."""
        try:
            seg, start = self.writer.write(run)
        except OSError as exc:
            raise StoreError(f"segment store {self.state.root}: compaction could not write its copies: {exc}") from None
        self.writer.index_run(seg, start, run)
