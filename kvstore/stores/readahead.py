"""Read-ahead hints for block files: blocks about to be read start coming into the page cache.

Why: the per-block disk store reads one file at a time, and a cold read (after a restart) waits for the
disk each time: the kernel's own read-ahead never crosses into the next file. Told the list first
(:meth:`~kvstore.stores.base.BlockStore.will_read`), the store hands it here: one worker thread per
process issues ``posix_fadvise(WILLNEED)`` file by file, which queues the reads and returns, so the disk
works through the list while the caller reads (and decrypts) the blocks before it: 1.5-2x the cold read
rate here (bench/tiers.py). The segment log needs none: its records sit in order in large files, which
the kernel's read-ahead streams (hints measured no faster, in order or not). Hints never fail a read: a
file gone is skipped.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from pathlib import Path
from typing import Iterable, Sequence

log = logging.getLogger(__name__)

WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", None)  # None where posix_fadvise does not exist

_files: "queue.Queue[Sequence[Path]]" = queue.Queue()
_worker: threading.Thread | None = None
_start_lock = threading.Lock()


def available() -> bool:
    return WILLNEED is not None


def hint_files(paths: Sequence[Path]) -> None:
    """Queue ``posix_fadvise(WILLNEED)`` of these whole files on the read-ahead thread (after earlier hints)."""
    global _worker
    if WILLNEED is None or not paths:
        return
    if _worker is None:
        with _start_lock:
            if _worker is None:
                _worker = threading.Thread(target=_run, name="kv-read-ahead", daemon=True)
                _worker.start()
    _files.put(paths)


def wait_idle() -> None:
    """Block until every hint queued so far has been issued (tests, benchmarks)."""
    if _worker is not None:
        _files.join()


def _run() -> None:
    while True:
        paths = _files.get()
        try:
            for path in paths:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError:  # gone since: the read itself will say so
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, WILLNEED)
                finally:
                    os.close(fd)
        except Exception:  # best effort; the thread stays for the next hints
            log.exception("read-ahead hint failed")
        finally:
            _files.task_done()


def drop_cached(paths: Iterable[Path]) -> None:
    """Evict these files (folders: every file below) from the page cache, so their next read comes from the
    disk: written back first (``fdatasync``), then ``posix_fadvise(DONTNEED)`` (no root needed; pages a
    process still maps stay). For benchmarks and tests of cold reads."""
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            fd = os.open(file, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
