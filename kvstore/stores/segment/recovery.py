"""Opening a segment log: scan the segments in order and rebuild the index; the newest record of a key wins.

Older segments are walked by header (header CRC); the two newest are also checked by payload CRC, since
only they can hold writes that were not durable (a roll waits for the previous seal). A bad record at
the end of the newest segment is a torn tail (a write cut short by a crash): one warning, the file is
truncated to the last good record. A bad record followed by valid ones (in any segment) is skipped by
resyncing: the scan searches for the next magic whose header CRC checks (a payload containing the
magic by chance fails that check). In a sealed segment the skipped record's block, when its names
are still readable, stays listed and raises :class:`CorruptBlock` on ``get`` rather than letting an
older version of it reappear; a record whose header is intact but whose payload rotted is found by
``get`` (CRC). So damage costs the damaged block, never the rest of the segment.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kvstore.stores.filesync import fsync_path
from kvstore.stores.segment.records import (PUT, SEGMENT_NAME, BadRecord, Key, Segment, parse_record,
                                            resync, segment_path)
from kvstore.stores.segment.state import LogState

log = logging.getLogger(__name__)

Skipped = tuple[Path, int, int, str]  # damage found at open: (segment, start, end, why)


def recover(state: LogState) -> list[Skipped]:
    """Open every segment under ``state.root`` and index its records into ``state`` (the newest is the
    current one; an empty store gets its first segment now, not on the first put); returns the damage
    skipped."""
    skipped: list[Skipped] = []
    numbers = sorted(int(m.group(1)) for p in state.root.iterdir() if (m := SEGMENT_NAME.fullmatch(p.name)))
    for i, number in enumerate(numbers):
        last = i == len(numbers) - 1
        path = segment_path(state.root, number)
        fd = os.open(path, (os.O_RDWR if last else os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0))
        seg = Segment(number, path, fd)
        state.segments[number] = seg
        _scan(state, seg, recent=i >= len(numbers) - 2, last=last, skipped=skipped)
        if last:
            state.current = seg
    if state.current is None:
        state.create(1)
        fsync_path(state.root)
    return skipped


def _scan(state: LogState, seg: Segment, recent: bool, last: bool, skipped: list[Skipped]) -> None:
    """Index a segment's records; skip damage (resync), truncate a torn tail of the newest one.
    ``recent``: one of the two newest segments, the only ones that may hold writes not yet durable
    (see ``Writer.roll``): payloads are checked too, and damage there is taken for an unflushed write."""
    size = os.fstat(seg.fd).st_size
    offset = 0
    while offset < size:
        try:
            kind, key, hlen, length = parse_record(seg.fd, offset, size, verify=recent)
        except BadRecord as bad:
            resume = resync(seg.fd, offset + 1, size, verify=recent)
            if resume is None and last:
                log.warning("segment store %s: %s: torn tail at byte %d (%s); %d bytes dropped (a write cut "
                            "short by a crash)", state.root, seg.path.name, offset, bad, size - offset)
                skipped.append((seg.path, offset, size, f"torn tail: {bad}"))
                os.ftruncate(seg.fd, offset)
                size = offset
                break
            end = size if resume is None else resume
            log.warning("segment store %s: %s: damaged record at byte %d (%s); bytes %d-%d skipped", state.root,
                        seg.path.name, offset, bad, offset, end)
            skipped.append((seg.path, offset, end, str(bad)))
            seg.dead += end - offset
            if bad.key is not None and not recent:  # do not let an older version of that block reappear
                state.forget(bad.key)
                state.index.setdefault(bad.key[0], {})[bad.key[1]] = 0
                state.damaged[bad.key] = f"record at byte {offset} of {seg.path.name} is damaged ({bad})"
            offset = end
            continue
        _apply(state, seg, kind, key, offset, hlen, length)
        offset += hlen + length
    seg.size = size


def _apply(state: LogState, seg: Segment, kind: int, key: Key, offset: int, hlen: int, length: int) -> None:
    """Make a record found at open the newest state of its key."""
    state.forget(key)
    if kind == PUT:
        state.locs[key] = (seg.number, offset, hlen, length)
        seg.live.add(key)
        state.index.setdefault(key[0], {})[key[1]] = length
        state.nbytes += length
    else:
        seg.tombs.add(key)
        seg.dead += hlen
        state.index.get(key[0], {}).pop(key[1], None)
        if not state.index.get(key[0], True):
            del state.index[key[0]]
