"""Per-block tier placement (device / host / disk / Redis), prefetch, hit-rate fallback, watermarks.

:class:`TierPlacement` keeps blocks (packed bytes, see ``kvstore.stores``) of one session across the
tiers it is given and decides where each lives from its score, its modality and the budgets:
the best blocks go to the device up to the device budget, the next ones to the host, the rest to
the lowest tier (disk, or Redis). A :class:`WatermarkController` (kvstore/tier_guards.py) sets the device
budget so device bytes sit at a target share (85%) of a hard cap, with a hysteresis band; no move ever crosses the cap.

Before a decode step the app asks the :class:`Prefetcher` (kvstore/prefetch.py) to bring up the blocks the current
query's block scores predict for the next step; a worker thread copies them while the step computes (on
CUDA on a second stream, asynchronously: from the host tier's pinned slab, or from disk and Redis
through pinned double buffers, :class:`PinnedStaging`). Each read of a block counts as a hit if the
block was already on the device. When the hit rate over a window (:class:`HitRateWindow`) stays below 50%, placement
falls back to "L1/L2-only" mode (nothing below the host tier; logged and reported in the stats) and
retries normal mode after a cool-down.
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import numpy as np
import torch

from kvstore.annotations import Modality
from kvstore.tier_guards import HitRateWindow, WatermarkController
from kvstore.stores.base import BlockNotFound, BlockStore
from kvstore.stores.memory import MemoryStore

log = logging.getLogger(__name__)
T = TypeVar("T")


def _as_bytes(data: torch.Tensor | memoryview) -> bytes:
    return data.cpu().numpy().tobytes() if isinstance(data, torch.Tensor) else bytes(data)


class Tier(str, enum.Enum):
    DEVICE = "device"
    HOST = "host"
    DISK = "disk"
    REDIS = "redis"


TIER_ORDER = (Tier.DEVICE, Tier.HOST, Tier.DISK, Tier.REDIS)


@dataclass
class PlacementPolicy:
    """Budgets per tier (None: unbounded) and how much each modality's score counts."""

    host_bytes: int | None = None
    modality_weight: dict[int, float] = field(default_factory=lambda: {
        int(Modality.TEXT): 1.0, int(Modality.AUDIO): 1.0, int(Modality.VIDEO): 0.8})


@dataclass
class BlockInfo:
    tier: Tier
    nbytes: int  # the block's own (plaintext) bytes
    score: float
    modality: int = int(Modality.TEXT)
    source: str = ""  # what crypto-shredding forgets it by (an encrypted tier's per-source data key)
    stored: int = 0  # bytes its tier holds for it: nbytes, plus the header, nonce and tag where sealed


def _put(store: BlockStore, session: str, block_id: str, data, source: str) -> int:
    """Put a block into a tier, tagged with its source where the tier encrypts; returns the bytes it holds."""
    if source and getattr(store, "takes_source", False):  # encrypted (a lazy or audited wrapper: its inner store)
        store.put(session, block_id, data, source=source)
        return store.sealed_size(len(data), source)
    store.put(session, block_id, data)
    sealed = getattr(store, "sealed_size", None)  # encrypted, under the session's own source
    return sealed(len(data), session) if sealed is not None else len(data)


@dataclass
class TransferCounter:
    bytes: int = 0
    seconds: float = 0.0
    count: int = 0

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds else 0.0


class TierPlacement:
    """One session's blocks across tiers; thread-safe (the prefetch worker moves blocks too)."""

    def __init__(self, tiers: dict[Tier, BlockStore], session: str, controller: WatermarkController,
                 policy: PlacementPolicy | None = None, window: HitRateWindow | None = None) -> None:
        if Tier.DEVICE not in tiers:
            raise ValueError("a device tier is required")
        self.tiers = dict(tiers)
        self.session = session
        self.controller = controller
        self.policy = policy or PlacementPolicy()
        self.hits = window or HitRateWindow()
        self.blocks: dict[str, BlockInfo] = {}  # change only through _place / _drop (they keep the totals)
        self._totals = {t: 0 for t in TIER_ORDER}  # bytes per tier, kept as blocks come, move and go (O(1) reads)
        self.transfers: dict[tuple[Tier, Tier], TransferCounter] = collections.defaultdict(TransferCounter)
        self._staging: PinnedStaging | None = None  # made on the first move from disk / Redis to a CUDA slab
        self._lock = threading.RLock()

    # -------------------------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self.hits.mode

    def lowest_tier(self) -> Tier:
        allowed = [t for t in TIER_ORDER if t in self.tiers]
        if self.mode == "fallback":
            allowed = [t for t in allowed if t in (Tier.DEVICE, Tier.HOST)]
        return allowed[-1]

    def tier_bytes(self) -> dict[str, int]:
        """Bytes each tier holds for the blocks: on an encrypted tier the sealed size (plaintext + header,
        nonce, tag: ~40 bytes a block); the wrapped data keys (60 bytes per source) are not counted."""
        with self._lock:
            return {t.value: n for t, n in self._totals.items()}

    def _place(self, block_id: str, info: BlockInfo) -> None:
        self._drop(block_id)
        self.blocks[block_id] = info
        self._totals[info.tier] += info.stored

    def _drop(self, block_id: str) -> BlockInfo | None:
        info = self.blocks.pop(block_id, None)
        if info is not None:
            self._totals[info.tier] -= info.stored
        return info

    def _sealed_size(self, tier: Tier, nbytes: int, source: str) -> int:
        """What a block of ``nbytes`` will take on ``tier`` (its budget counts that)."""
        sealed = getattr(self.tiers[tier], "sealed_size", None) if tier == Tier.HOST else None
        return sealed(nbytes, source or self.session) if sealed is not None else nbytes

    def _priority(self, info: BlockInfo) -> float:
        return info.score * self.policy.modality_weight.get(info.modality, 1.0)

    def plan(self, device_budget: int | None) -> dict[str, Tier]:
        """Target tier of every block: by priority, device up to its budget, host up to its, then the lowest.

        ``device_budget=None`` keeps the device set as it is (inside the watermark band) and plans the rest.
        """
        with self._lock:
            order = sorted(self.blocks.items(), key=lambda kv: -self._priority(kv[1]))
            lowest = self.lowest_tier()
            keep_device = device_budget is None
            budgets = {Tier.DEVICE: 0 if keep_device else min(device_budget, self.controller.cap_bytes),
                       Tier.HOST: self.policy.host_bytes if Tier.HOST in self.tiers else 0}
            used = {Tier.DEVICE: 0, Tier.HOST: 0}
            plan: dict[str, Tier] = {}
            for block_id, info in order:
                if keep_device and info.tier == Tier.DEVICE:
                    plan[block_id] = Tier.DEVICE
                    continue
                for tier in (Tier.DEVICE, Tier.HOST):
                    budget = budgets[tier]
                    size = info.nbytes if tier == Tier.DEVICE else self._sealed_size(tier, info.nbytes, info.source)
                    if budget is not None and used[tier] + size > budget:
                        continue
                    if tier == Tier.HOST and lowest == Tier.DEVICE:
                        continue
                    plan[block_id] = tier
                    used[tier] += size
                    break
                else:
                    plan[block_id] = lowest
            return plan

    # -------------------------------------------------------------------------------------------

    def put(self, block_id: str, data: bytes, score: float, modality: int = int(Modality.TEXT),
            source: str = "") -> Tier:
        """Add a block where its priority puts it (new blocks start on the lowest tier that fits).
        ``source``: its data key on encrypted tiers (default: the session's), what :meth:`shred` forgets."""
        with self._lock:
            info = BlockInfo(self.lowest_tier(), len(data), score, modality, source)
            device_bytes = self.tier_bytes()[Tier.DEVICE.value]
            budget = self.controller.device_budget(device_bytes) or self.controller.target_bytes
            if device_bytes + len(data) <= budget and self.controller.admits(device_bytes, len(data)):
                info.tier = Tier.DEVICE
            info.stored = _put(self.tiers[info.tier], self.session, block_id, data, source)
            self._place(block_id, info)
            return info.tier

    def put_cold(self, block_id: str, data: bytes, score: float, modality: int = int(Modality.TEXT),
                 source: str = "") -> Tier:
        """Add a block evicted from the device: on the host while the host budget lasts, else the lowest tier."""
        with self._lock:
            lowest = self.lowest_tier()
            tier = lowest
            if Tier.HOST in self.tiers and lowest != Tier.DEVICE:
                budget, used = self.policy.host_bytes, self.tier_bytes()[Tier.HOST.value]
                # the plaintext size first: a host tier with no room is not opened (a lazy one loads a key)
                if budget is None or (used + len(data) <= budget
                                      and used + self._sealed_size(Tier.HOST, len(data), source) <= budget):
                    tier = Tier.HOST
            stored = _put(self.tiers[tier], self.session, block_id, data, source)
            self._place(block_id, BlockInfo(tier, len(data), score, modality, source, stored))
            return tier

    def tier_of(self, block_id: str) -> Tier | None:
        with self._lock:
            info = self.blocks.get(block_id)
            return None if info is None else info.tier

    def forget(self, block_ids: list[str]) -> None:
        """Delete blocks from whatever tier holds them (a session closing, a source shredded)."""
        with self._lock:
            for block_id in block_ids:
                info = self._drop(block_id)
                if info is not None:
                    self.tiers[info.tier].delete(self.session, block_id)

    def shred(self, source: str) -> int:
        """Crypto-shred ``source``: every encrypted tier destroys its data key and deletes its blocks, and
        its blocks leave the placement (staged plaintext copies on the device included); returns how many.
        A copy of their ciphertext taken before (a core dump, a backup) can no longer be decrypted."""
        with self._lock:
            for store in self.tiers.values():
                if callable(getattr(store, "shred", None)):  # the encrypted ones (a lazy one not yet opened: no-op)
                    store.shred(source, self.session)
            gone = [b for b, info in self.blocks.items() if (info.source or self.session) == source]
            for block_id in gone:
                info = self._drop(block_id)
                self.tiers[info.tier].delete(self.session, block_id)
            return len(gone)

    def update_scores(self, scores: dict[str, float]) -> None:
        with self._lock:
            for block_id, score in scores.items():
                if block_id in self.blocks:
                    self.blocks[block_id].score = score

    def move(self, block_id: str, tier: Tier) -> bool:
        """Copy a block to ``tier`` and delete it from its old one; refuses moves over the device cap."""
        with self._lock:
            info = self.blocks[block_id]
            source = info.tier
            if source == tier:
                return False
            if tier == Tier.DEVICE and not self.controller.admits(self.tier_bytes()[Tier.DEVICE.value], info.nbytes):
                return False
            start = time.perf_counter()
            src_store, dst_store = self.tiers[source], self.tiers[tier]
            stored = info.nbytes
            if isinstance(src_store, MemoryStore) and isinstance(dst_store, MemoryStore):
                dst_store.put_tensor(self.session, block_id, src_store.get_tensor(self.session, block_id))
            elif isinstance(dst_store, MemoryStore):  # up from disk / Redis / a sealed host: the store lends the bytes
                src_store.read_with(self.session, block_id, lambda view: self._put_lent(dst_store, block_id, view))
            else:
                stored = self._put_moved(src_store, dst_store, block_id, info.source)
            src_store.delete(self.session, block_id)
            self._totals[source] -= info.stored
            info.tier, info.stored = tier, stored
            self._totals[tier] += stored
            counter = self.transfers[(source, tier)]
            counter.bytes += info.nbytes
            counter.seconds += time.perf_counter() - start
            counter.count += 1
            return True

    def _put_moved(self, src: BlockStore, dst: BlockStore, block_id: str, source: str) -> int:
        """Copy a block down to a tier that is not a plain memory slab (sealing it there on an encrypted one)."""
        if isinstance(src, MemoryStore) and src.device.type == "cpu" and getattr(dst, "takes_source", False):
            # an encrypted tier seals from the slot itself into a blob of its own: no bytes copy first (a plain
            # write-behind tier might keep the view past the slot's reuse, so it gets bytes)
            return _put(dst, self.session, block_id, src.get_tensor(self.session, block_id).numpy(), source)
        return _put(dst, self.session, block_id, src.get(self.session, block_id), source)

    def _put_lent(self, store: MemoryStore, block_id: str, view: memoryview) -> None:
        """Copy a lent block into a memory tier: straight into the slot on the CPU; to a CUDA slab
        through a pinned staging buffer, so the copy to the device is asynchronous (on the caller's
        stream: the prefetch worker's side stream) and the next block is read meanwhile."""
        if store.device.type != "cuda":
            store.put(self.session, block_id, view)
            return
        if self._staging is None:
            self._staging = PinnedStaging()
        self._staging.put(store, self.session, block_id, view)

    def rebalance(self) -> int:
        """Apply the watermark controller's budget (demotions first, so the cap is never crossed)."""
        with self._lock:
            device_bytes = self.tier_bytes()[Tier.DEVICE.value]
            budget = self.controller.device_budget(device_bytes)
            plan = self.plan(budget)
            down = [b for b, t in plan.items() if TIER_ORDER.index(t) > TIER_ORDER.index(self.blocks[b].tier)]
            up = [b for b, t in plan.items() if TIER_ORDER.index(t) < TIER_ORDER.index(self.blocks[b].tier)]
            moved = 0
            for block_id in down + up:
                moved += self.move(block_id, plan[block_id])
            self.controller.device_budget(self.tier_bytes()[Tier.DEVICE.value])  # record the peak
            return moved

    def read(self, block_id: str) -> bytes:
        """The block's bytes; a read of a block not on the device is a prefetch miss (then promoted)."""
        return self.read_with(block_id, _as_bytes)

    def read_with(self, block_id: str, use: Callable[[torch.Tensor | memoryview], T]) -> T:
        """``use(data)`` of a block, counted as a decode-step read like :meth:`read`. ``data`` is valid only
        during the call: the slot itself (a uint8 tensor) when a memory tier holds the block, so a staged
        block goes to attention without leaving its device; a view the store lends from other tiers
        (:meth:`BlockStore.read_with`: for a sealed segment its mapping, decrypted into a reused buffer)."""
        return self._with_block(block_id, use, count=True)

    def peek_with(self, block_id: str, use: Callable[[torch.Tensor | memoryview], T]) -> T:
        """:meth:`read_with` without counting a read (a shadow comparison's reads are no decode step)."""
        return self._with_block(block_id, use, count=False)

    def peek(self, block_id: str) -> bytes:
        """The block's bytes without counting a read (saving a session is not a decode step)."""
        return self._with_block(block_id, _as_bytes, count=False)

    def _with_block(self, block_id: str, use: Callable[[torch.Tensor | memoryview], T], count: bool) -> T:
        with self._lock:
            info = self.blocks.get(block_id)
            if info is None:
                raise BlockNotFound(f"no block {block_id!r} in session {self.session!r}")
            if count:
                self._mode_changed(self.hits.record(info.tier == Tier.DEVICE))
            store = self.tiers[info.tier]
            if isinstance(store, MemoryStore):
                return use(store.get_tensor(self.session, block_id))
            return store.read_with(self.session, block_id, use)

    def will_read(self, block_ids: list[str]) -> None:
        """Tell the stores below memory which of these blocks are read next (:meth:`BlockStore.will_read`):
        those on disk start coming into the page cache while the ones before them are moved or read."""
        by_tier: dict[Tier, list[str]] = {}
        with self._lock:  # held for the hints too: a store's reads and hints go one at a time (Redis)
            for block_id in block_ids:
                info = self.blocks.get(block_id)
                if info is not None and not isinstance(self.tiers[info.tier], MemoryStore):
                    by_tier.setdefault(info.tier, []).append(block_id)
            for tier, ids in by_tier.items():
                self.tiers[tier].will_read(self.session, ids)

    def _mode_changed(self, change: str | None) -> None:
        if not change:
            return
        if change == "fallback":
            log.warning("KV placement of session %r: %s -> fallback mode (L1/L2 only: no recalls from the cold "
                        "tier, nothing below the host tier)", self.session, self.hits.reason)
            self.rebalance()
        else:
            log.warning("KV placement of session %r: back to normal mode", self.session)

    def transfers_saturated(self, backlog: int) -> None:
        """The prefetcher cannot keep up (``backlog`` requests queued): fall back to L1/L2-only mode."""
        with self._lock:
            self._mode_changed(self.hits.fall_back(f"transfers saturated ({backlog} prefetch requests queued)"))

    def stats(self) -> dict[str, object]:
        with self._lock:
            return {
                "bytes_per_tier": self.tier_bytes(),
                "prefetch_hit_rate": self.hits.overall_rate,
                "window_hit_rate": self.hits.rate,
                "mode": self.mode,
                "fallback_reason": self.hits.reason if self.mode == "fallback" else "",
                "transfer_gbps": {f"{a.value}->{b.value}": c.gbps for (a, b), c in self.transfers.items()},
                "device_cap_bytes": self.controller.cap_bytes,
                "device_target_bytes": self.controller.target_bytes,
                "peak_device_bytes": self.controller.peak_bytes,
            }


class PinnedStaging:
    """Pinned host buffers that blocks read from disk or Redis pass through on their way to a CUDA slab
    (double buffering): the copy of one block to the device runs while the next block is read into the
    other buffer, and a buffer is refilled only once its last copy has finished (a CUDA event)."""

    def __init__(self, count: int = 2) -> None:
        self._buffers: list[torch.Tensor | None] = [None] * count
        self._copied: list[torch.cuda.Event | None] = [None] * count
        self._next = 0

    def put(self, store: MemoryStore, session: str, block_id: str, view: memoryview) -> None:
        i = self._next
        self._next = (i + 1) % len(self._buffers)
        if self._copied[i] is not None:
            self._copied[i].synchronize()  # type: ignore[union-attr]
        n = len(view)
        buffer = self._buffers[i]
        if buffer is None or buffer.numel() < n:
            buffer = self._buffers[i] = torch.empty(max(n, 1 << 16), dtype=torch.uint8, pin_memory=True)
        staged = buffer[:n]
        staged.numpy()[:] = np.frombuffer(view, dtype=np.uint8)
        store.put_tensor(session, block_id, staged)  # pinned -> device: non-blocking, on the current stream
        event = torch.cuda.Event()
        event.record()
        self._copied[i] = event
