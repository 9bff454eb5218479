"""The cold tier: blocks the budget cannot hold wait on host / disk / Redis until a question needs them.

Without a cold tier, a block that no format fits into the budget is dropped: only its share of the
layer's Global Summary remains. With one attached (:meth:`kvstore.cache.TieredCache.attach_cold_tier`)
the evicted block's payload, in its stored format, goes to a :class:`~kvstore.placement.TierPlacement`
(host memory while the host budget lasts, then disk or Redis; sealed with AES-GCM on every tier that is
an ``EncryptedStore``, the host tier included when the app encrypts it, ``kv.cold.encrypt_host``), and
the layer keeps the block's key bounds and scores in its cold index.

Blocks come back into the device pools for the length of an answer:

* predicted ones: while a question's tokens are prefilled, cold blocks whose Quest bound against the
  question ranks among the best blocks of the layer are requested from the prefetcher, whose worker
  stages them in device memory while the model computes; at each decode step the cold blocks the
  current query ranks that high are recalled (a hit when already staged, a miss when they still had
  to be read from the host or lower);
* focus ranges (:meth:`~kvstore.manager.KVCacheManager.recall_tokens`): the blocks of the lines a
  question retrieved.

With ``exact_copies`` the tier also keeps the full-precision payload of every block the budget
quantizes, and a question reads the quantized blocks its queries rank highest from that copy
(:class:`~kvstore.exact_copies.ExactCopies`).

A recalled row leaves the Global Summary while it is back, and rolling back the question's
checkpoint returns it to the cold index, so the cache after an answer is exactly what it was before.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, replace
from typing import Iterator

import torch

from kvstore import block_ids
from kernels.formats import BlockFormat
from kvstore.placement import Tier, TierPlacement
from kvstore.prefetch import Prefetcher
from kvstore.stores.base import StoreError, pack_block, unpack_block

log = logging.getLogger(__name__)


@dataclass
class ColdTierStats:
    evicted: int = 0  # blocks written to the cold tier
    failed: int = 0  # evictions a tier refused (full, unreachable): those blocks were dropped instead
    recalled: int = 0  # blocks brought back into the pools
    requested: int = 0  # prefetch requests (blocks)
    copies: int = 0  # full-precision copies of quantized blocks written (exact_copies)
    exact_reads: int = 0  # quantized blocks read from their copy for a question


class ColdTier:
    """The cold blocks of one cache (all its tiered layers), kept by a :class:`TierPlacement`."""

    def __init__(self, placement: TierPlacement, recall_top_k: int = 8, prefetch: bool = True,
                 source: str = "", exact_copies: bool = False, exact_max_blocks: int | None = None) -> None:
        """``source``: what the meeting's blocks are tagged with on encrypted tiers (their data key), so
        :meth:`shred` forgets them; default: the placement's session. ``exact_copies``: keep a
        full-precision copy of each block the budget quantizes (kvstore.exact_copies); a question reads
        at most ``exact_max_blocks`` blocks per layer from them (default ``recall_top_k``), which bounds
        the device memory an answer adds."""
        if recall_top_k <= 0:
            raise ValueError("recall_top_k must be positive")
        self.placement = placement
        self.source = source
        self.recall_top_k = recall_top_k
        self.exact_copies = exact_copies
        self.exact_max_blocks = recall_top_k if exact_max_blocks is None else exact_max_blocks
        if self.exact_max_blocks < 0:
            raise ValueError("exact_max_blocks must be >= 0")
        self.prefetcher = Prefetcher(placement, top_k=recall_top_k) if prefetch else None
        self.counts = ColdTierStats()
        self._uncounted = False  # inside shadow_reads()

    @contextlib.contextmanager
    def shadow_reads(self, every_copy: bool = False) -> Iterator[None]:
        """Inside, reads are a shadow comparison's, not the meeting's: none is counted and nothing is staged (the
        hit rate, and so the fallback mode, the placement and the tier's counts stay as they were); with
        ``every_copy``, every quantized block a recall is given is read from its copy (as the device cap allows),
        not only ``exact_max_blocks``."""
        saved_max, saved_counts = self.exact_max_blocks, replace(self.counts)
        self._uncounted = True
        if every_copy:
            self.exact_max_blocks = 1 << 30
        try:
            yield
        finally:
            self.exact_max_blocks, self._uncounted, self.counts = saved_max, False, saved_counts

    @staticmethod
    def block_id(layer_idx: int, block: int, fmt: int) -> str:
        return block_ids.block_id(layer_idx, block, fmt)

    def evict(self, layer_idx: int, block: int, fmt: int, payload: dict[str, torch.Tensor], score: float,
              modality: int) -> bool:
        """Keep a block's payload; a block already there in the same format is not written again.

        Returns False (logged) when no tier could take it: the caller drops the block instead, so a
        full disk or an unreachable Redis costs that block's recall, never the meeting.
        """
        if not self._put(self.block_id(layer_idx, block, fmt), payload, score, modality):
            return False
        self.counts.evicted += 1
        return True

    def _put(self, block_id: str, payload: dict[str, torch.Tensor], score: float, modality: int) -> bool:
        """Write a payload once (later: refresh its score); False, logged, when no tier could take it."""
        try:
            if self.placement.tier_of(block_id) is None:
                self.placement.put_cold(block_id, pack_block(payload), score, modality, source=self.source)
            else:
                self.placement.update_scores({block_id: score})
        except StoreError as exc:
            self.counts.failed += 1
            if self.counts.failed == 1 or self.counts.failed % 100 == 0:
                log.warning("cold tier of %r: block %s dropped instead (%s; %d so far)", self.placement.session,
                            block_id, exc, self.counts.failed)
            return False
        return True

    @staticmethod
    def copy_id(layer_idx: int, block: int) -> str:
        """A block's full-precision copy: the id a full-precision block would be evicted under (same bytes)."""
        return ColdTier.block_id(layer_idx, block, int(BlockFormat.FULL))

    def keep_copy(self, layer_idx: int, block: int, payload: dict[str, torch.Tensor], modality: int) -> bool:
        """Keep a full-precision copy of a block about to be quantized; False (logged as a failed
        eviction) when no tier could take it: the block is then only ever read quantized."""
        if not self._put(self.copy_id(layer_idx, block), payload, 0.0, modality):
            return False
        self.counts.copies += 1
        return True

    def read_copy(self, layer_idx: int, block: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """The full-precision payload kept by :meth:`keep_copy` (not counted as a prefetch hit or miss:
        copies are read on demand, and their misses must not switch the recall of cold blocks off)."""
        tensors, _ = unpack_block(self.placement.peek(self.copy_id(layer_idx, block)), device=device)
        self.counts.exact_reads += 1
        return tensors

    def staged(self, block_id: str) -> bool:
        return self.placement.tier_of(block_id) == Tier.DEVICE

    def request(self, block_ids: list[str]) -> None:
        """Stage blocks in device memory in the background (returns at once)."""
        if self.prefetcher is None or not block_ids or self._uncounted:
            return
        self.counts.requested += len(block_ids)
        self.prefetcher.request(block_ids)

    def wait(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.wait()

    def fetch(self, block_id: str, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """A block's payload tensors; the read counts as a prefetch hit when the block was staged."""
        # a staged block is unpacked from its slot on the device (no device -> host -> device copy)
        read = self.placement.peek_with if self._uncounted else self.placement.read_with
        tensors, _ = read(block_id, lambda data: unpack_block(data, device=device))
        self.counts.recalled += 1
        return tensors

    def shred(self, source: str) -> int:
        """Crypto-shred a source's cold blocks on every tier (:meth:`TierPlacement.shred`); their cold-index
        rows stay, and a recall of one raises :class:`~kvstore.stores.base.BlockNotFound`."""
        if self.prefetcher is not None:
            self.prefetcher.wait()  # no move of one of them in flight
        return self.placement.shred(source)

    def stats(self) -> dict[str, object]:
        placed = self.placement.stats()
        return {**placed, "evicted": self.counts.evicted, "failed": self.counts.failed, "recalled": self.counts.recalled,
                "requested": self.counts.requested, "copies": self.counts.copies,
                "exact_reads": self.counts.exact_reads, "cold_blocks": len(self.placement.blocks)}

    def close(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.close()
        self.placement.forget(list(self.placement.blocks))
        for store in self.placement.tiers.values():
            store.flush()  # the deletes of write-behind stores are done when this returns
            store.close()
