"""What the parts of a segment store share: the segment files and the index over them.

Why one object: the writer, recovery, compaction, the reads and the store facade each change part of
it, always under ``lock``; handing them this object (and not the store) keeps each part readable on
its own and free of the others' methods.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from kvstore.stores.segment.records import Buffer, Key, Loc, Segment, segment_path


class LogState:
    """The log's segments and the index over them; every field below is guarded by ``lock``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = threading.Condition()
        self.index: dict[str, dict[str, int]] = {}  # session -> block id -> payload bytes (live blocks)
        self.nbytes = 0
        self.locs: dict[Key, Loc] = {}  # newest record of each live block that is on disk
        self.damaged: dict[Key, str] = {}  # live blocks whose newest record is unreadable
        self.pending: dict[Key, tuple[Buffer]] = {}  # queued puts: (payload,), a new tuple per put
        self.pending_bytes = 0
        self.failed: dict[Key, OSError] = {}  # puts the writer could not write
        self.failed_deletes: dict[Key, OSError] = {}
        self.segments: dict[int, Segment] = {}
        self.current: Segment = None  # type: ignore[assignment]  # set by recover()
        self.unsynced: set[int] = set()  # segments written since their last fdatasync

    def listed(self, key: Key) -> bool:
        """Whether the block is in the index (a live block; caller holds ``lock``)."""
        return key[1] in self.index.get(key[0], {})

    def create(self, number: int) -> Segment:
        """A new empty segment file, made the current one."""
        path = segment_path(self.root, number)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        seg = Segment(number, path, fd)
        with self.lock:
            self.segments[number] = seg
            self.current = seg
        return seg

    def forget(self, key: Key) -> None:
        """Mark the key's current record dead (lock held or not yet shared)."""
        loc = self.locs.pop(key, None)
        if loc is not None:
            seg = self.segments[loc[0]]
            seg.dead += loc[2] + loc[3]
            seg.live.discard(key)
        self.damaged.pop(key, None)
        size = self.index.get(key[0], {}).get(key[1])
        if size is not None:
            self.nbytes -= size
