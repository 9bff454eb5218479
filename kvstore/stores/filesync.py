"""Durability primitives both disk layouts use (one block file per block, and the segment log).

Why one module: the per-block store and the segment writer both hand dirty pages to the disk early
(``sync_file_range``, so a later ``fdatasync`` has less to wait for) and fsync folders after creating,
renaming or removing files in them (a rename is durable only once its folder is). :class:`SyncBatch`
is the per-block store's flush: the many files written since the last one, fdatasynced together.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

_SYNC_FILE_RANGE_WRITE = 2


def _range_writeback() -> Callable[[int, int, int], None]:
    """``start(fd, offset, nbytes)``: queue those dirty pages for writing without waiting (no-op off Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        sfr = libc.sync_file_range
    except (OSError, AttributeError, TypeError):
        return lambda fd, offset, nbytes: None
    sfr.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return lambda fd, offset, nbytes: sfr(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE) and None


_range_start = _range_writeback()


def start_writeback(fd: int, offset: int = 0, nbytes: int = 0) -> None:
    """Start writing ``nbytes`` of the file from ``offset`` back to the disk (0 bytes: to its end); returns at once."""
    _range_start(fd, offset, nbytes)


def fsync_path(path: Path, data_only: bool = False) -> None:
    """fsync (or fdatasync, ``data_only``) a file or folder by path; FileNotFoundError if it is gone."""
    fd = os.open(path, os.O_RDONLY)
    try:
        (os.fdatasync if data_only and hasattr(os, "fdatasync") else os.fsync)(fd)
    finally:
        os.close(fd)


class SyncBatch:
    """Files written and folders changed since the last :meth:`sync`, made durable together.

    Why a batch: each new file's fdatasync waits for a journal commit; issued together from ``threads``
    threads, concurrent fdatasyncs share commits, which is what makes durable writes of many small files
    fast (one at a time they ran 3-4x slower). Folders are fsynced after the files, deepest first.
    """

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self.files: set[Path] = set()  # written, not yet fdatasynced
        self._folders: set[Path] = set()  # with creates, renames or unlinks not yet fsynced
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def wrote(self, path: Path, *folders: Path) -> None:
        """``path`` was written (renamed into place) in these ``folders``."""
        with self._lock:
            self.files.add(path)
            self._folders.update(folders)

    def removed(self, path: Path) -> None:
        with self._lock:
            self.files.discard(path)
            self._folders.add(path.parent)

    def sync(self) -> list[tuple[Path, OSError]]:
        """fdatasync the files (in parallel), then fsync the folders (an error there raises); returns the
        files that could not be made durable. A file or folder deleted since is skipped."""
        with self._lock:
            paths, self.files = sorted(self.files), set()
            folders, self._folders = self._folders, set()
        errors = self._fdatasync_all(paths)
        for folder in sorted(folders, key=lambda p: -len(p.parts)):  # session folders, then the root
            _fsync_if_there(folder)
        return errors

    def _fdatasync_all(self, paths: list[Path]) -> list[tuple[Path, OSError]]:
        def sync(path: Path) -> tuple[Path, OSError] | None:
            try:
                _fsync_if_there(path, data_only=True)
            except OSError as exc:
                return path, exc
            return None

        if len(paths) > 1 and self.threads > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="disk-store-sync")
            results = list(self._pool.map(sync, paths))
        else:
            results = [sync(p) for p in paths]
        return [r for r in results if r is not None]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


def _fsync_if_there(path: Path, data_only: bool = False) -> None:
    try:
        fsync_path(path, data_only)
    except FileNotFoundError:
        pass  # deleted since: nothing to make durable
