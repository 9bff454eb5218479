"""Device and host tiers: blocks kept in a slab of fixed-size slots in (GPU / pinned host / process) memory.

Why a slab: a fresh tensor per put costs more than the copy it holds (a new 256 KiB host buffer
page-faults on first touch; a pinned one is a ``cudaHostAlloc``; a device one goes through the
caching allocator). Slots are carved out of chunks allocated once, kept on free lists and reused;
a put is one copy into a reused slot.

Size classes: a block of ``n`` bytes takes a slot of ``n`` rounded up to 1/8 of its power of two
(at least 256 bytes), so slack is at most 12.5% and equal-sized KV blocks share one class. A class
grows by chunks (its capacity doubles per chunk, from 64 KiB up to ``chunk_bytes`` per chunk) and
keeps them: the slab stays at its high-water mark, which the tier's budget bounds (quota, watermark),
so a tier that empties and refills (a session closing, a prefetch wave) never allocates again.
:meth:`MemoryStore.trim` releases the chunks that hold no block.

Views: :meth:`MemoryStore.get_tensor` returns a view of the block's slot, valid until that block is
deleted or overwritten (its slot then goes back to the free list and a later put reuses it). A
caller that keeps the bytes longer passes ``out=`` (or clones). On CUDA a freed slot is reused only
after the work queued on the current stream at the time of the delete has finished (a CUDA event),
so an asynchronous copy out of a block deleted right after it (``TierPlacement.move``) never reads
overwritten bytes.
"""

from __future__ import annotations

import ctypes
import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import numpy as np
import torch

from kvstore.stores.base import BlockNotFound, ListedStore, StoreFull, check_key

T = TypeVar("T")
MIN_SLOT = 256
MIN_CHUNK = 64 << 10


def slot_size(nbytes: int) -> int:
    """Slot bytes for a block of ``nbytes``: rounded up to 1/8 of its power of two, at least :data:`MIN_SLOT`."""
    if nbytes <= MIN_SLOT:
        return MIN_SLOT
    step = max(MIN_SLOT, (1 << (nbytes.bit_length() - 1)) // 8)
    return -(-nbytes // step) * step


@dataclass(eq=False)
class _Chunk:
    tensor: torch.Tensor
    free: list[int]
    slots: int
    views: list[torch.Tensor | None] = field(default_factory=list)  # per-slot views, made on first use
    array: np.ndarray | None = None  # the same memory as numpy (CPU): slicing it is 10x cheaper than a tensor
    addr: int = 0  # its address (CPU): a put is one memmove to addr + slot offset, no array made per put

    @property
    def used(self) -> int:
        return self.slots - len(self.free)


@dataclass
class _SizeClass:
    slot_bytes: int
    chunks: list[_Chunk] = field(default_factory=list)
    open: list[_Chunk] = field(default_factory=list)  # the chunks with a free slot (no scan per put)

    @property
    def slots(self) -> int:
        return sum(c.slots for c in self.chunks)


@dataclass(eq=False, slots=True)
class _Block:
    nbytes: int
    cls: _SizeClass | None = None
    chunk: _Chunk | None = None
    index: int = 0
    view: torch.Tensor | None = None  # the block's bytes in its slot (made once: slicing costs ~1.5 us)


class MemoryStore(ListedStore):
    """Blocks as byte slots on ``device``; on a host tier with CUDA present the slab is pinned.

    Pinned host slots make host -> device copies asynchronous (the prefetch stream relies on it).
    ``quota_bytes`` is the tier's hard cap on block bytes (:meth:`nbytes`): a put that would cross
    it raises :class:`StoreFull`. The slab reserves up to 12.5% more plus partly used chunks; see
    :meth:`stats` and :meth:`trim`.
    """

    def __init__(self, device: torch.device | str = "cpu", tier: str | None = None,
                 quota_bytes: int | None = None, chunk_bytes: int = 16 << 20) -> None:
        self.device = torch.device(device)
        self.tier = tier or ("device" if self.device.type != "cpu" else "host")
        self.pin = self.device.type == "cpu" and self.tier == "host" and torch.cuda.is_available()
        self.quota_bytes = quota_bytes
        self.chunk_bytes = chunk_bytes
        self._async = self.device.type == "cuda" or self.pin  # copies out of a slot may still be queued
        self._cpu = self.device.type == "cpu"
        self._index: dict[str, dict[str, _Block]] = {}
        self._classes: dict[int, _SizeClass] = {}
        self._class_of: dict[int, _SizeClass] = {}  # block bytes -> its size class (a cache)
        self._deferred: list[tuple[torch.cuda.Event, _Block]] = []  # freed slots waiting for their stream
        self._bytes = 0
        self._lock = threading.RLock()  # re-entrant: a lent read's ``use`` may read the store again (a data key)

    # -------------------------------------------------------------------------------------------
    # slab
    # -------------------------------------------------------------------------------------------

    def _new_chunk(self, cls: _SizeClass, slots: int) -> _Chunk:
        try:
            tensor = torch.empty(slots * cls.slot_bytes, dtype=torch.uint8, device=self.device, pin_memory=self.pin)
        except torch.OutOfMemoryError as exc:
            raise StoreFull(f"{self.tier} tier: cannot allocate {slots * cls.slot_bytes} bytes: {exc}") from None
        array = tensor.numpy() if self.device.type == "cpu" else None
        if array is not None and not self.pin:
            array.fill(0)  # fault the pages in now, once, instead of inside later puts (numpy: one thread)
        chunk = _Chunk(tensor, list(range(slots - 1, -1, -1)), slots, [None] * slots, array,
                       tensor.data_ptr() if array is not None else 0)
        cls.chunks.append(chunk)
        cls.open.append(chunk)
        return chunk

    def _alloc(self, nbytes: int) -> _Block:
        if self._deferred:
            self._reclaim()
        cls = self._class_of.get(nbytes)
        if cls is None:
            size = slot_size(nbytes)
            cls = self._classes.get(size)
            if cls is None:
                cls = self._classes[size] = _SizeClass(size)
            if len(self._class_of) < 4096:
                self._class_of[nbytes] = cls
        if cls.open:
            chunk = cls.open[-1]
        else:
            grow = min(max(cls.slots * cls.slot_bytes, MIN_CHUNK), max(self.chunk_bytes, cls.slot_bytes))
            chunk = self._new_chunk(cls, max(1, grow // cls.slot_bytes))
        index = chunk.free.pop()
        if not chunk.free:
            cls.open.pop()
        return _Block(nbytes, cls, chunk, index)

    def _release(self, block: _Block) -> None:
        """Give a block's slot back (after the current stream's queued work on CUDA)."""
        if block.chunk is None:
            return
        if self._async:
            event = torch.cuda.Event()
            event.record()
            self._deferred.append((event, block))
        else:
            self._free(block)

    def _reclaim(self) -> None:
        still = []
        for event, block in self._deferred:
            if event.query():
                self._free(block)
            else:
                still.append((event, block))
        self._deferred = still

    @staticmethod
    def _free(block: _Block) -> None:
        chunk = block.chunk
        assert chunk is not None and block.cls is not None
        if not chunk.free:
            block.cls.open.append(chunk)
        chunk.free.append(block.index)

    @staticmethod
    def _addr(block: _Block) -> int:
        """The address of the block's slot (CPU stores, non-empty blocks)."""
        return block.chunk.addr + block.index * block.cls.slot_bytes  # type: ignore[union-attr]

    @staticmethod
    def _array(block: _Block) -> np.ndarray:
        """The block's bytes in its slot as numpy (CPU stores, non-empty blocks)."""
        start = block.index * block.cls.slot_bytes  # type: ignore[union-attr]
        return block.chunk.array[start:start + block.nbytes]  # type: ignore[union-attr,index]

    def _view(self, block: _Block) -> torch.Tensor:
        if block.view is None:
            chunk = block.chunk
            if chunk is None:
                block.view = torch.empty(0, dtype=torch.uint8, device=self.device)
            else:
                slot = chunk.views[block.index]
                if slot is None:
                    size = block.cls.slot_bytes  # type: ignore[union-attr]
                    slot = chunk.views[block.index] = chunk.tensor[block.index * size:(block.index + 1) * size]
                block.view = slot if block.nbytes == slot.numel() else slot[:block.nbytes]
        return block.view

    def _store(self, session: str, block_id: str, nbytes: int, fill) -> None:
        check_key(session, block_id)
        with self._lock:
            old = self._index.get(session, {}).get(block_id)
            growth = nbytes - (old.nbytes if old is not None else 0)
            if self.quota_bytes is not None and self._bytes + growth > self.quota_bytes:
                raise StoreFull(f"{self.tier} tier full: {self._bytes + growth} > {self.quota_bytes} bytes "
                                f"(session {session!r}, block {block_id!r})")
            block = self._alloc(nbytes) if nbytes else _Block(0)
            try:
                if nbytes:
                    fill(block)
            except BaseException:
                self._release(block)
                raise
            if old is not None:  # a new slot, then free the old one: a view of the old bytes stays intact until reuse
                self._release(old)
            self._index.setdefault(session, {})[block_id] = block
            self._bytes += growth

    # -------------------------------------------------------------------------------------------
    # tensors
    # -------------------------------------------------------------------------------------------

    def put_tensor(self, session: str, block_id: str, data: torch.Tensor) -> None:
        """Copy a uint8 tensor into a slot (tier-to-tier moves, no round trip through Python bytes)."""
        if data.dtype != torch.uint8:
            raise TypeError("blocks are byte tensors")
        if self._cpu and data.is_cpu:
            # one plain memcpy to the slot's address: torch splits a 256 KiB copy over its intra-op threads,
            # which stalls on a busy CPU, and making numpy arrays per put cost a fifth of the copy
            src = data if data.is_contiguous() else data.contiguous()
            ptr, n = src.data_ptr(), src.numel()
            self._store(session, block_id, n, lambda block: ctypes.memmove(self._addr(block), ptr, n))
            return
        flat = data if data.dim() == 1 else data.reshape(-1)
        # host -> device from pinned memory runs on the stream; device -> host waits, so the bytes are there
        non_blocking = self.device.type == "cuda" and (flat.device.type == "cuda" or flat.is_pinned())
        self._store(session, block_id, flat.numel(),
                    lambda block: self._view(block).copy_(flat, non_blocking=non_blocking))

    def _held(self, session: str, block_id: str) -> _Block:
        """The block's slot (caller holds ``_lock``); BlockNotFound if this tier does not hold it."""
        try:
            return self._index[session][block_id]
        except KeyError:
            raise BlockNotFound(f"no block {block_id!r} in session {session!r} ({self.tier} tier)") from None

    def get_tensor(self, session: str, block_id: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """The block's bytes: a view of its slot (valid until the block is deleted or overwritten),
        or, with ``out`` (a uint8 tensor of the block's size), a copy into ``out``."""
        with self._lock:
            block = self._held(session, block_id)
            view = self._view(block)
            if out is None:
                return view
            if out.dtype != torch.uint8 or out.numel() != block.nbytes:
                raise ValueError(f"out must be a uint8 tensor of {block.nbytes} elements, got {out.dtype} "
                                 f"with {out.numel()}")
            if out.device.type == "cpu" and view.device.type == "cpu":
                np.copyto(out.view(-1).numpy(), view.numpy())
            else:
                out.view(-1).copy_(view)
            return out

    # -------------------------------------------------------------------------------------------
    # BlockStore
    # -------------------------------------------------------------------------------------------

    def put(self, session: str, block_id: str, data: bytes) -> None:
        src = np.frombuffer(data, dtype=np.uint8) if len(data) else None
        if self._cpu:
            self._store(session, block_id, len(data), lambda block: np.copyto(self._array(block), src))
            return
        with warnings.catch_warnings():  # read-only source buffer: only read from here
            warnings.simplefilter("ignore")
            host = torch.from_numpy(src) if src is not None else None
        self._store(session, block_id, len(data), lambda block: self._view(block).copy_(host))

    def get(self, session: str, block_id: str) -> bytes:
        with self._lock:
            block = self._held(session, block_id)
            if self.device.type == "cpu" and block.nbytes:
                return self._array(block).tobytes()
            return self._view(block).cpu().numpy().tobytes()

    def read_with(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        """``use(view)`` of the block's slot itself on the CPU (no copy), under the store's lock so the slot
        is neither freed nor refilled meanwhile. Why: an encrypted host tier decrypts straight out of the
        slot (``EncryptedStore.read_with``); a copy first cost as much as the decryption."""
        if not self._cpu:
            return use(memoryview(self.get(session, block_id)))
        with self._lock:
            block = self._held(session, block_id)
            return use(memoryview(self._array(block)) if block.nbytes else memoryview(b""))

    def read_unverified(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        return self.read_with(session, block_id, use)  # memory keeps no checksum to skip

    def delete(self, session: str, block_id: str) -> bool:
        with self._lock:
            blocks = self._index.get(session, {})
            old = blocks.pop(block_id, None)
            if old is None:
                return False
            self._release(old)
            self._bytes -= old.nbytes
            if not blocks:
                self._index.pop(session, None)
            return True

    def nbytes(self) -> int:
        return self._bytes

    # -------------------------------------------------------------------------------------------
    # slab management
    # -------------------------------------------------------------------------------------------

    def reserve(self, block_bytes: int, count: int) -> None:
        """Preallocate slots for ``count`` blocks of ``block_bytes`` (e.g. the tier's budget at start-up)."""
        with self._lock:
            size = slot_size(block_bytes)
            cls = self._classes.setdefault(size, _SizeClass(size))
            missing = count - sum(len(c.free) for c in cls.chunks)
            per_chunk = max(1, max(self.chunk_bytes, size) // size)
            while missing > 0:
                missing -= self._new_chunk(cls, min(per_chunk, missing)).slots

    def trim(self) -> int:
        """Release every chunk with no block in it; returns the bytes released."""
        with self._lock:
            if self._deferred:
                self._reclaim()
            released = 0
            for cls in self._classes.values():
                empty = [c for c in cls.chunks if c.used == 0]
                released += sum(c.tensor.numel() for c in empty)
                cls.chunks = [c for c in cls.chunks if c.used]
                cls.open = [c for c in cls.open if c.used]
            return released

    def stats(self) -> dict[str, object]:
        """Block bytes vs bytes the slab really holds (measured from its chunk tensors), per size class."""
        with self._lock:
            classes = {cls.slot_bytes: {"chunks": len(cls.chunks), "slots": cls.slots,
                                        "used": sum(c.used for c in cls.chunks),
                                        "reserved_bytes": sum(c.tensor.numel() for c in cls.chunks)}
                       for cls in self._classes.values() if cls.chunks}
            return {"block_bytes": self._bytes,
                    "blocks": sum(len(b) for b in self._index.values()),
                    "reserved_bytes": sum(c["reserved_bytes"] for c in classes.values()),
                    "slots_used": sum(c["used"] for c in classes.values()),
                    "slots_free": sum(c["slots"] - c["used"] for c in classes.values()),
                    "pending_frees": len(self._deferred),
                    "classes": classes}
