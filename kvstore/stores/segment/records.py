"""The segment log's record format: encode, parse, resync, check; and the handle of one segment file.

Record (little endian)::

    magic "MKVS" | version u8 | kind u8 (1 put, 2 delete) | len(session) u16 | len(block id) u16 |
    payload length u64 | crc u32 | header crc u32 | session | block id | payload

``crc`` is CRC32C of the header fields before it + names + payload (checked on ``get``, skipped on
``get_unverified``); ``header crc`` is CRC32C of the 22 header bytes before it + names, so the index
can be rebuilt on open from headers alone (one small ``pread`` per record) without reading payloads.
CRC32C rather than zlib's CRC32: the SSE4.2 instruction runs it at ~28 GB/s here against ~7, and
zlib's alone would cost a third of a page-cache write (see ``crc``).
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from pathlib import Path
from typing import TypeVar

import google_crc32c
import numpy as np

from kvstore.stores.base import Buffer, CorruptBlock, Key, check_key

SEG_MAGIC = b"MKVS"
SEG_VERSION = 1
PUT, DELETE = 1, 2
HEAD = struct.Struct("<4sBBHHQII")  # magic, version, kind, len(session), len(block id), payload length, crc, header crc
_PRE = struct.Struct("<4sBBHHQ")  # the fields the crc covers
_MAX_NAME = 800  # 200 characters of UTF-8
SEGMENT_NAME = re.compile(r"seg-(\d{6,})\.log")

B = TypeVar("B", bytes, memoryview)  # a payload as read (new bytes) or lent (a view)
Loc = tuple[int, int, int, int]  # segment number, record offset, header + names length, payload length


def segment_path(root: Path, number: int) -> Path:
    return root / f"seg-{number:06d}.log"


def crc(data: Buffer, start: int = 0) -> int:
    """CRC32C (Castagnoli; the SSE4.2 instruction): 28 GB/s here against 7 for zlib's CRC32, which
    alone would cost a third of a page-cache write. google-crc32c is a dependency of aiortc (pinned in
    requirements.lock); its C extension holds the GIL below 1 MB, so this runs in the writer thread."""
    if not isinstance(data, bytes):  # its C extension takes only buffers without a release hook: view as ndarray
        data = np.frombuffer(data, dtype=np.uint8)
    return google_crc32c.extend(start, data)


def encode_record(kind: int, session: str, block_id: str, data: Buffer = b"") -> bytes:
    """Header + names of a record (the payload follows them on disk)."""
    names = session.encode() + block_id.encode()
    pre = _PRE.pack(SEG_MAGIC, SEG_VERSION, kind, len(session.encode()), len(block_id.encode()), len(data))
    crcs = struct.pack("<I", crc(data, crc(names, crc(pre))))
    return pre + crcs + struct.pack("<I", crc(names, crc(pre + crcs))) + names


def record_size(session: str, block_id: str, payload: int) -> int:
    """Bytes of a put record on disk."""
    return HEAD.size + len(session.encode()) + len(block_id.encode()) + payload


class BadRecord(Exception):
    """A record that does not parse; ``key`` when its names are still readable."""

    def __init__(self, why: str, key: Key | None = None) -> None:
        super().__init__(why)
        self.key = key


def parse_record(fd: int, offset: int, size: int, verify: bool) -> tuple[int, Key, int, int]:
    """``(kind, key, header + names length, payload length)`` of the record at ``offset`` of a file of
    ``size`` bytes; ``verify`` checks the payload CRC too. :class:`BadRecord` if it does not parse."""
    head = os.pread(fd, HEAD.size + 2 * _MAX_NAME, offset)
    if len(head) < HEAD.size:
        raise BadRecord(f"truncated header ({len(head)} bytes)")
    magic, version, kind, ls, lb, length, payload_crc, hcrc = HEAD.unpack_from(head)
    if magic != SEG_MAGIC or version != SEG_VERSION:
        raise BadRecord("no record header")
    key = None
    if 0 < ls <= _MAX_NAME and 0 < lb <= _MAX_NAME and len(head) >= HEAD.size + ls + lb:
        try:
            names = head[HEAD.size:HEAD.size + ls + lb]
            key = check_key(names[:ls].decode(), names[ls:].decode())
        except (UnicodeDecodeError, ValueError):
            key = None
    if key is None:
        raise BadRecord("unreadable names")
    if crc(names, crc(head[:_PRE.size + 4])) != hcrc:
        raise BadRecord("header checksum mismatch", key)
    if kind not in (PUT, DELETE) or (kind == DELETE and length):
        raise BadRecord(f"unknown record kind {kind}", key)
    hlen = HEAD.size + ls + lb
    if offset + hlen + length > size:
        raise BadRecord(f"record of {hlen + length} bytes ends past the end of the file ({size} bytes)", key)
    if verify:
        payload = os.pread(fd, length, offset + hlen)
        if len(payload) != length or crc(payload, crc(names, crc(head[:_PRE.size]))) != payload_crc:
            raise BadRecord("checksum mismatch", key)
    return kind, key, hlen, length


def resync(fd: int, start: int, size: int, verify: bool) -> int | None:
    """Offset of the next valid record at or after ``start``, or None. A payload containing the magic by
    chance fails the header CRC, so the scan does not stop there."""
    chunk = 1 << 20
    pos = start
    while pos < size:
        data = os.pread(fd, chunk + len(SEG_MAGIC) - 1, pos)
        found = data.find(SEG_MAGIC)
        while found != -1:
            try:
                parse_record(fd, pos + found, size, verify)
                return pos + found
            except BadRecord:
                found = data.find(SEG_MAGIC, found + 1)
        pos += chunk
    return None


class Segment:
    """One open segment file and what the index knows of it (counts change under the store's lock)."""

    __slots__ = ("number", "path", "fd", "size", "dead", "live", "tombs", "readers", "retired", "written_back",
                 "map")

    def __init__(self, number: int, path: Path, fd: int, size: int = 0) -> None:
        self.number, self.path, self.fd, self.size = number, path, fd, size
        self.dead = 0  # bytes of superseded records, tombstones and skipped damage
        self.live: set[Key] = set()  # keys whose current record is here
        self.tombs: set[Key] = set()  # keys with a tombstone here
        self.readers = 0  # reads in flight (the fd is closed only when none is)
        self.retired = False
        self.written_back = 0  # write-back started up to here
        self.map: mmap.mmap | None = None  # read-only mapping once sealed and read (see reads.py)

    def where(self, loc: Loc, key: Key) -> str:
        """The record at ``loc`` of block ``key``, for error messages."""
        return f"block {key[1]!r} of session {key[0]!r} ({self.path.name} at byte {loc[1]})"

    def checked(self, loc: Loc, key: Key, head: Buffer, payload: B, verify: bool) -> B:
        """``payload`` of the record at ``loc``, once its ``head`` (header + names) matches the index (a put of
        this key, this length) and, with ``verify``, its CRC checks; else :class:`CorruptBlock`."""
        magic, version, kind, ls, lb, n, payload_crc, _ = HEAD.unpack_from(head)
        names = key[0].encode() + key[1].encode()
        if (magic, version, kind, ls + lb, n) != (SEG_MAGIC, SEG_VERSION, PUT, len(names), loc[3]) \
                or head[HEAD.size:] != names:
            raise CorruptBlock(f"{self.where(loc, key)}: the record header does not match the index")
        if verify and crc(payload, crc(head[HEAD.size:], crc(head[:_PRE.size]))) != payload_crc:
            raise CorruptBlock(f"{self.where(loc, key)}: checksum mismatch")
        return payload
