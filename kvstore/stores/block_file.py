"""One block file of the per-block disk store (:mod:`kvstore.stores.disk`): its name, layout, write and reads.

Layout (little endian)::

    magic "MKVF" | version u8 | len(session) u16 | len(block id) u16 | payload length u64 | crc32 u32 |
    session | block id | payload

``crc32`` is zlib's CRC32 of the payload. A file is written to a temporary beside its final name in
one ``writev`` and renamed over it, so a reader sees the old file or the new one, never half of one.
The functions here know nothing of the store's index or threads; each raises :class:`CorruptBlock`
(or :class:`BlockNotFound` for a file gone) with the file's name, and never returns wrong bytes.
"""

from __future__ import annotations

import errno
import hashlib
import os
import struct
import threading
import zlib
from pathlib import Path
from typing import Callable, TypeVar
from urllib.parse import quote

from kvstore.stores.base import BlockNotFound, Buffer, CorruptBlock, lend_scratch
from kvstore.stores.filesync import start_writeback

FILE_MAGIC = b"MKVF"
FILE_VERSION = 1
HEADER = struct.Struct("<4sBHHQI")  # magic, version, len(session), len(block id), payload length, crc32
SUFFIX = ".blk"
TMP = ".tmp"  # in the name of a temporary, which a store opening the folder deletes

T = TypeVar("T")


def file_name(name: str) -> str:
    """A session or block id as a file name (escaped; hashed when long)."""
    escaped = quote(name, safe="").replace(".", "%2E")
    return escaped if len(escaped) <= 180 else "h-" + hashlib.blake2b(name.encode(), digest_size=20).hexdigest()


def block_path(root: Path, session: str, block_id: str) -> Path:
    return root / file_name(session) / (file_name(block_id) + SUFFIX)


def _parse_head(data: Buffer, size: int, path: Path) -> tuple[int, int, int, int]:
    """``(len(session), payload length, crc32, payload offset)`` from a header (``data`` starts with it)
    of a file of ``size`` bytes; the names end at the payload offset."""
    if len(data) < HEADER.size:
        raise CorruptBlock(f"{path.name}: truncated header ({size} bytes)")
    magic, version, ls, lb, length, crc = HEADER.unpack_from(data)
    if magic != FILE_MAGIC or version != FILE_VERSION:
        raise CorruptBlock(f"{path.name}: not a minutia block file")
    start = HEADER.size + ls + lb
    if size != start + length:
        raise CorruptBlock(f"{path.name}: torn file ({size} bytes, header says {start + length})")
    return ls, length, crc, start


def read_header(path: Path) -> tuple[str, str, int]:
    """``(session, block id, payload length)`` of a block file, from its header alone (the store's open)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        ls, length, _, start = _parse_head(os.pread(fd, HEADER.size, 0), size, path)
        names = os.pread(fd, start - HEADER.size, HEADER.size)
    finally:
        os.close(fd)
    if len(names) != start - HEADER.size:
        raise CorruptBlock(f"{path.name}: torn file ({size} bytes, header says {start + length})")
    try:
        return names[:ls].decode(), names[ls:].decode(), length
    except UnicodeDecodeError:
        raise CorruptBlock(f"{path.name}: unreadable names") from None


def check_head(data: Buffer, size: int, path: Path, session: str, block_id: str) -> tuple[int, int, int]:
    """``(payload length, crc32, payload offset)`` from the start of a block file of ``size`` bytes
    (``data``: at least its header and names), once they match the block asked for."""
    ls, length, crc, start = _parse_head(data, size, path)
    if len(data) < start:
        raise CorruptBlock(f"{path.name}: torn file ({size} bytes, header says {start + length})")
    s = session.encode()
    if ls != len(s) or data[HEADER.size:start] != s + block_id.encode():
        raise CorruptBlock(f"{path.name} does not hold block {block_id!r} of session {session!r}")
    return length, crc, start


def _open(path: Path, session: str, block_id: str) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise BlockNotFound(f"block file of {block_id!r} (session {session!r}) vanished") from None
    except OSError as exc:
        raise CorruptBlock(f"block {block_id!r} of session {session!r}: unreadable ({exc})") from None


def read(path: Path, session: str, block_id: str, verify: bool = True) -> bytes:
    """The payload as new bytes: header and names in one ``pread`` (their lengths are known), the payload
    in another; ``verify`` checks its CRC32."""
    fd = _open(path, session, block_id)
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, HEADER.size + len(session.encode()) + len(block_id.encode()), 0)
        length, crc, start = check_head(head, size, path, session, block_id)
        payload = os.pread(fd, length, start)
    except OSError as exc:
        raise CorruptBlock(f"block {block_id!r} of session {session!r}: unreadable ({exc})") from None
    finally:
        os.close(fd)
    if len(payload) != length or (verify and zlib.crc32(payload) != crc):
        raise CorruptBlock(f"block {block_id!r} of session {session!r}: checksum mismatch ({path})")
    return payload


def lend(path: Path, session: str, block_id: str, use: Callable[[memoryview], T], verify: bool) -> T:
    """``use(view)`` of the payload, the whole file read (one ``preadv``) into this thread's reused buffer."""
    fd = _open(path, session, block_id)
    try:
        size = os.fstat(fd).st_size

        def read_into(buf: memoryview) -> T:
            try:
                got = os.preadv(fd, [buf], 0)
            except OSError as exc:
                raise CorruptBlock(f"block {block_id!r} of session {session!r}: unreadable ({exc})") from None
            if got != size:
                raise CorruptBlock(f"{path.name}: torn file (read {got} of {size} bytes)")
            _, crc, start = check_head(buf, size, path, session, block_id)
            if verify and zlib.crc32(buf[start:]) != crc:
                raise CorruptBlock(f"block {block_id!r} of session {session!r}: checksum mismatch ({path})")
            return use(buf[start:])
        return lend_scratch(size, read_into)
    finally:
        os.close(fd)


def write(path: Path, session: str, block_id: str, data: Buffer) -> bool:
    """Write ``data`` to a temporary (one writev), start its write-back, rename; returns whether the
    session folder was created."""
    s, b = session.encode(), block_id.encode()
    parts = [memoryview(HEADER.pack(FILE_MAGIC, FILE_VERSION, len(s), len(b), len(data), zlib.crc32(data))
                        + s + b), memoryview(data).cast("B")]
    tmp = path.with_name(f"{path.name}{TMP}-{os.getpid()}-{threading.get_ident()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    new_folder = False
    try:
        try:
            fd = os.open(tmp, flags, 0o644)
        except FileNotFoundError:  # the session's first block: make its folder (no stat per write)
            path.parent.mkdir(parents=True, exist_ok=True)
            new_folder = True
            fd = os.open(tmp, flags, 0o644)
        try:
            while parts:  # a regular file takes it all at once; loop for short writes anyway
                written = os.writev(fd, parts)
                if not written:
                    raise OSError(errno.EIO, f"no progress writing {tmp.name}")
                while parts and written >= len(parts[0]):
                    written -= len(parts[0])
                    parts.pop(0)
                if parts:
                    parts[0] = parts[0][written:]
            start_writeback(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return new_folder
