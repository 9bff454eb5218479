"""Read-ahead hints for block files: blocks about to be read start coming into the page cache.

Why: the per-block disk store reads one file at a time, and a cold read (after a restart) waits for the
disk each time: the kernel's own read-ahead never crosses into the next file. Told the list first
(:meth:`~kvstore.stores.base.BlockStore.will_read`), the store hands it here: one worker thread per
process issues ``posix_fadvise(WILLNEED)`` file by file, which queues the reads and returns, so the disk
works through the list while the caller reads (and decrypts) the blocks before it: twice the cold read
rate here (bench/tiers.py). The segment log needs none: its records sit in order in large files, which
the kernel's read-ahead streams (hints measured no faster, in order or not). Hints never fail a read: a
file gone is skipped.
"""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path
from typing import Callable, Iterable

WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", None)  # None where posix_fadvise does not exist

_jobs: "queue.Queue[Callable[[], None]]" = queue.Queue()
_worker: threading.Thread | None = None
_start_lock = threading.Lock()


def available() -> bool:
    return WILLNEED is not None


def submit(job: Callable[[], None]) -> None:
    """Run ``job`` (hints; it must not raise) on the read-ahead thread, after the jobs before it."""
    global _worker
    if _worker is None:
        with _start_lock:
            if _worker is None:
                _worker = threading.Thread(target=_run, name="kv-read-ahead", daemon=True)
                _worker.start()
    _jobs.put(job)


def wait_idle() -> None:
    """Block until every job submitted so far has run (tests, benchmarks)."""
    if _worker is not None:
        _jobs.join()


def _run() -> None:
    while True:
        job = _jobs.get()
        try:
            job()
        except Exception:  # a hint is best effort; the read itself reports what is wrong
            pass
        finally:
            _jobs.task_done()


def advise_files(paths: Iterable[os.PathLike | str]) -> None:
    """``posix_fadvise(WILLNEED)`` of whole files (a block file per block)."""
    if WILLNEED is None:
        return
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


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
