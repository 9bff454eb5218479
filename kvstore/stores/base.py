"""The BlockStore interface, its errors, and the one block format every tier uses.

A store holds opaque byte blocks addressed by ``(session, block_id)``; what is inside is the
caller's business. KV payloads and session state are packed with :func:`pack_block` (a small header
naming the format version and each tensor's name, dtype and shape, then the raw payload), so a block
read back from any tier -- device, host, disk or Redis -- decodes the same way.
"""

from __future__ import annotations

import abc
import errno
import json
import re
import struct
import threading
from typing import Callable, Sequence, TypeVar

import torch


T = TypeVar("T")
Buffer = bytes | bytearray | memoryview  # what a put may hand over
Key = tuple[str, str]  # (session, block id)


class StoreError(Exception):
    """A store could not serve a request (the message names the session and block)."""


class BlockNotFound(StoreError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "block not found"


class CorruptBlock(StoreError):
    """A block's bytes are damaged, truncated or not a minutia block."""


class StoreUnavailable(StoreError):
    """The backend cannot be reached (e.g. Redis is down)."""


class StoreFull(StoreError):
    """The quota or the file system is full; the block was not stored."""


class BlockStore(abc.ABC):
    """Bytes in, bytes out, per session. ``flush`` makes everything put so far durable."""

    tier: str = "?"

    @abc.abstractmethod
    def put(self, session: str, block_id: str, data: bytes) -> None: ...

    def put_owned(self, session: str, block_id: str, data: bytearray) -> None:
        """:meth:`put` of a buffer the caller hands over and never touches again, so a store that
        keeps bytes around (write-behind, pipelines) may keep this one instead of copying it."""
        self.put(session, block_id, data)

    @abc.abstractmethod
    def get(self, session: str, block_id: str) -> bytes:
        """The block's bytes; :class:`BlockNotFound` if absent, :class:`CorruptBlock` if damaged."""

    def get_unverified(self, session: str, block_id: str) -> bytes:
        """:meth:`get` for a caller that authenticates every byte itself (AES-GCM in EncryptedStore):
        a store may skip its own checksum then; its structural checks (names, lengths) still apply."""
        return self.get(session, block_id)

    def read_with(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        """``use(view)`` of the block's bytes, checked as :meth:`get` checks them; the view is valid only
        during the call. Why: a reader that copies what it needs out of a block (:func:`unpack_block`) need
        not own a block-sized buffer, so a store may lend a reused one, or a mapping, and skip a copy."""
        return use(memoryview(self.get(session, block_id)))

    def read_unverified(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        """``use(view)`` of the block's bytes as :meth:`get_unverified` has them; the view is valid only
        during the call. Why: a store may lend a reused read buffer, so a read that the caller turns into
        new bytes anyway (AES-GCM decrypt) allocates one fresh block-sized buffer, not two -- two at once
        make glibc give the heap top back and fault it in again on every read."""
        return use(memoryview(self.get_unverified(session, block_id)))

    def will_read(self, session: str, block_ids: Sequence[str]) -> None:
        """A hint that these blocks are read soon, in this order: the per-block disk store starts bringing
        their files into the page cache in the background (:mod:`kvstore.stores.readahead`), so cold reads
        overlap instead of waiting for the disk one by one. Returns at once; ids a store does not hold are
        skipped; the others (memory, Redis, the segment log, which the kernel reads ahead) ignore it."""

    @abc.abstractmethod
    def delete(self, session: str, block_id: str) -> bool:
        """Remove a block; returns whether it existed."""

    @abc.abstractmethod
    def contains(self, session: str, block_id: str) -> bool: ...

    @abc.abstractmethod
    def list(self, session: str) -> list[str]:
        """Block ids of a session, sorted."""

    @abc.abstractmethod
    def sessions(self) -> list[str]: ...

    @abc.abstractmethod
    def nbytes(self) -> int:
        """Bytes of block data held (what the tier's budget counts)."""

    def session_nbytes(self, session: str) -> int | None:
        """Bytes of block data one session holds, as stored; None where the store keeps no such count."""
        return None

    def flush(self) -> None:
        """Make every put so far durable (no-op for volatile tiers)."""

    def close(self) -> None:
        self.flush()

    def delete_session(self, session: str) -> int:
        ids = self.list(session)
        for block_id in ids:
            self.delete(session, block_id)
        return len(ids)

    def __enter__(self) -> "BlockStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_CONTROL = re.compile(r"[\x00-\x1f]")
_SCRATCH = threading.local()
SCRATCH_KEEP = 16 << 20  # a thread keeps read buffers up to this size
SCRATCH_DEPTH = 4  # and this many of them (a decrypting read nests in the inner store's read)


def lend_scratch(nbytes: int, use: Callable[[memoryview], T]) -> T:
    """``use(view)`` of a reused per-thread buffer of ``nbytes`` (for :meth:`BlockStore.read_with` and
    :meth:`BlockStore.read_unverified`). A buffer is taken out while lent, so a nested read (the plaintext
    of a decrypting read inside its store's lent ciphertext) gets another one, also reused."""
    free: list[bytearray] | None = getattr(_SCRATCH, "free", None)
    if free is None:
        free = _SCRATCH.free = []
    buf = free.pop() if free else None
    if buf is None or len(buf) < nbytes:
        buf = bytearray(nbytes)
    try:
        return use(memoryview(buf)[:nbytes])
    finally:
        if len(buf) <= SCRATCH_KEEP and len(free) < SCRATCH_DEPTH:
            free.append(buf)


def check_name(kind: str, name: str) -> str:
    if not name or len(name) > 200 or _CONTROL.search(name):
        raise ValueError(f"invalid {kind} {name!r} (1-200 printable characters)")
    return name


def check_key(session: str, block_id: str) -> Key:
    """``(session, block id)`` once both names are valid (ValueError naming the bad one otherwise)."""
    return check_name("session", session), check_name("block id", block_id)


# ------------------------------------------------------------------------------------------------
# Block format
# ------------------------------------------------------------------------------------------------

BLOCK_MAGIC = b"MKVB"
BLOCK_VERSION = 1
_HEADER = struct.Struct("<4sBI")  # magic, version, header-json length

_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2,
)}


def pack_block(tensors: dict[str, torch.Tensor], **attrs: object) -> bytes:
    """Header (version, then per tensor name/dtype/shape, plus small JSON ``attrs``) + raw payloads."""
    entries = []
    payloads = []
    for name, tensor in tensors.items():
        t = tensor.detach().contiguous().cpu()
        raw = t.view(torch.uint8) if t.element_size() == 1 and t.dtype != torch.uint8 else t
        data = raw.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        entries.append({"name": name, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                        "nbytes": len(data)})
        payloads.append(data)
    header = json.dumps({"tensors": entries, "attrs": attrs}, separators=(",", ":")).encode()
    return _HEADER.pack(BLOCK_MAGIC, BLOCK_VERSION, len(header)) + header + b"".join(payloads)


def unpack_block(data: bytes | memoryview | torch.Tensor,
                 device: torch.device | str = "cpu") -> tuple[dict[str, torch.Tensor], dict]:
    """Inverse of :func:`pack_block`: ``(tensors, attrs)``; :class:`CorruptBlock` on any mismatch.

    ``data`` may be a uint8 tensor (a memory tier's slot, on its device): then only the header crosses
    to the host and each payload is one copy on the tensor's device (no device -> host -> device trip).
    """
    if isinstance(data, torch.Tensor):
        flat = data.reshape(-1)
        if flat.dtype != torch.uint8:
            raise TypeError("blocks are byte tensors")
        size = flat.numel()

        def head(a: int, b: int) -> bytes:
            return flat[a:b].cpu().numpy().tobytes()

        def payload(a: int, b: int) -> torch.Tensor:  # a copy: the slot may be reused once the caller lets go
            return flat[a:b].clone()
    else:
        view = memoryview(data)
        size = len(view)

        def head(a: int, b: int) -> bytes:
            return bytes(view[a:b])

        def payload(a: int, b: int) -> torch.Tensor:
            return torch.frombuffer(bytearray(view[a:b]), dtype=torch.uint8)

    if size < _HEADER.size:
        raise CorruptBlock(f"block of {size} bytes is shorter than its header")
    magic, version, header_len = _HEADER.unpack(head(0, _HEADER.size))
    if magic != BLOCK_MAGIC or version != BLOCK_VERSION:
        raise CorruptBlock(f"not a minutia block (magic {bytes(magic)!r}, version {version})")
    try:
        header = json.loads(head(_HEADER.size, _HEADER.size + header_len))
    except ValueError as exc:
        raise CorruptBlock(f"unreadable block header: {exc}") from None
    offset = _HEADER.size + header_len
    tensors: dict[str, torch.Tensor] = {}
    for entry in header["tensors"]:
        dtype = _DTYPES.get(entry["dtype"])
        if dtype is None:
            raise CorruptBlock(f"unknown dtype {entry['dtype']!r} in block")
        n = entry["nbytes"]
        if offset + n > size:
            raise CorruptBlock(f"block payload truncated ({max(size - offset, 0)} of {n} bytes for {entry['name']!r})")
        t = payload(offset, offset + n).view(dtype) if n else torch.zeros(0, dtype=dtype)
        tensors[entry["name"]] = t.reshape(entry["shape"]).to(device)
        offset += n
    if offset != size:
        raise CorruptBlock(f"block has {size - offset} trailing bytes")
    return tensors, header["attrs"]


class ListedStore(BlockStore):
    """A store whose block ids live in an in-memory ``{session: {block id: ...}}`` index (``_index``),
    guarded by ``_lock``: the listing methods are the same for all of them."""

    _index: "dict[str, dict[str, object]]"
    _lock: "threading.Lock | threading.RLock | threading.Condition"

    def contains(self, session: str, block_id: str) -> bool:
        with self._lock:
            return block_id in self._index.get(session, {})

    def list(self, session: str) -> list[str]:
        with self._lock:
            return sorted(self._index.get(session, {}))

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted(s for s, blocks in self._index.items() if blocks)


class IndexedStore(ListedStore):
    """A listed store that counts each block's payload bytes in its index, against ``quota_bytes``, and
    writes from background threads: its puts are refused once ``_closed``, and closing is the same for all
    of them (the disk stores)."""

    _index: dict[str, dict[str, int]]  # session -> block id -> payload bytes
    _nbytes: int
    _closed: bool
    quota_bytes: int | None

    def session_nbytes(self, session: str) -> int:
        """Bytes of the session's blocks, counted in the index (no block is read)."""
        with self._lock:
            return sum(self._index.get(session, {}).values())

    def put(self, session: str, block_id: str, data: bytes) -> None:
        self.put_owned(session, block_id, data if isinstance(data, bytes) else bytes(data))

    def put_owned(self, session: str, block_id: str, data: Buffer) -> None:
        """Like :meth:`put` without the defensive copy: the store keeps ``data`` until it is written."""
        check_key(session, block_id)
        self._put(session, block_id, data)

    @abc.abstractmethod
    def _put(self, session: str, block_id: str, data: Buffer) -> None:
        """Index the put (names checked) and hand it to the writers."""

    @staticmethod
    def _raise_unwritten(where: str, failed: dict[Key, BaseException]) -> None:
        """Raise for the blocks a writer could not write (they stay readable in memory): StoreFull when the
        file system is full, else StoreError; nothing when none failed."""
        if not failed:
            return
        (session, block_id), exc = next(iter(failed.items()))
        kind = StoreFull if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) else StoreError
        raise kind(f"{where}: {len(failed)} block(s) not written, e.g. {block_id!r} of session {session!r}: {exc} "
                   "(they stay readable in memory; free space and flush again)")

    def close(self) -> None:
        """Flush, then refuse puts and let go of the writer threads and files (:meth:`_release`) even if
        the flush raised; closing again does nothing."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            with self._lock:
                self._closed = True
            self._release()

    @abc.abstractmethod
    def _release(self) -> None:
        """Stop the store's threads and close its files (after the last flush)."""

    def _admit(self, what: str, session: str, block_id: str, size: int) -> None:
        """Count a put of ``size`` bytes into the index (caller holds ``_lock``); over the quota: StoreFull."""
        old = self._index.get(session, {}).get(block_id, 0)
        if self.quota_bytes is not None and self._nbytes - old + size > self.quota_bytes:
            raise StoreFull(f"{what} quota of {self.quota_bytes} bytes reached: block {block_id!r} of "
                            f"session {session!r} ({size} bytes) not stored")
        self._index.setdefault(session, {})[block_id] = size
        self._nbytes += size - old
