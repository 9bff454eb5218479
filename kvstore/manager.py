"""KVCacheManager: explicit block movement between precision tiers, prefetch, and the one KV report.

TieredCache moves blocks by itself when it is over budget; the manager is the handle the app uses
for everything else: demote what the controller says is cold, promote what a question is about
(query-aware promotion, seed 4: :meth:`focus`) and recall its cold blocks (:meth:`recall_tokens`),
drop blocks, pre-grow pools before a large prefill, prefetch the blocks a step will read (resident ones count as hits; cold ones are handed to the cold tier's
prefetcher; hit rate, seed 6.4), copy blocks into a tier placement, and :meth:`report` bytes per
precision tier, location, layer and modality (kvstore.report, the one account everyone reads).

Precision tiers (L1 hot = full precision, L2 warm = quantized, L3 cold = the Global Summary) are
:class:`~kvstore.report.PrecisionTier`; where a block lives (device / host / disk / redis) is
:class:`kvstore.placement.Tier`.
"""

from __future__ import annotations


import contextlib
from typing import Iterator

import torch

from kvstore.blocks import BlockFormat
from kvstore.cache import PromotionReport, TieredCache, TokenRanges
from kvstore.layers import TieredLayer
from kvstore.block_ids import block_id
from kvstore.placement import TierPlacement
from kvstore.report import KVReport, kv_report
from kvstore.stores.base import pack_block


class KVCacheManager:
    """Block-level control of a :class:`TieredCache` (one manager per cache / meeting session)."""

    def __init__(self, cache: TieredCache, placement: "TierPlacement | None" = None) -> None:
        self.cache = cache
        self.placement = placement
        self._prefetch_requests = 0
        self._prefetch_hits = 0

    # ------------------------------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------------------------------

    def _layer(self, layer_idx: int) -> TieredLayer:
        layer = self.cache.layers[layer_idx]
        if not isinstance(layer, TieredLayer):
            raise ValueError(f"layer {layer_idx} is not tiered (sliding-window layers keep their window)")
        if not layer.is_initialized:
            raise ValueError(f"layer {layer_idx} holds no tokens yet")
        return layer

    def _rows(self, layer: TieredLayer, blocks: torch.Tensor | list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of the given logical blocks that are still stored, and a mask of which were found."""
        blocks = torch.as_tensor(blocks, dtype=torch.long).flatten()
        index = layer.table.block_index
        rows = torch.searchsorted(index, blocks).clamp(max=max(len(index) - 1, 0))
        found = (index[rows] == blocks) if len(index) else torch.zeros_like(blocks, dtype=torch.bool)
        return rows[found], found

    def _movable(self, layer: TieredLayer, rows: torch.Tensor) -> None:
        if self.cache.compression_suspended:
            raise RuntimeError("blocks cannot move while a checkpoint is open (rollback must stay exact)")
        if bool((layer.table.fill[rows] < layer.block_size).any()):
            raise ValueError("the partially filled tail block stays at full precision")

    # ------------------------------------------------------------------------------------------
    # block movement
    # ------------------------------------------------------------------------------------------

    def alloc(self, layer_idx: int, blocks: int, fmt: BlockFormat = BlockFormat.FULL) -> int:
        """Pre-grow a pool so the next ``blocks`` blocks need no reallocation; returns its capacity."""
        layer = self._layer(layer_idx)
        pool = layer.pools[int(fmt)]
        slots = pool.alloc(blocks * layer.batch)
        pool.free(slots)
        return pool.capacity

    def demote(self, layer_idx: int, blocks: torch.Tensor | list[int], fmt: BlockFormat) -> int:
        """Quantize the given logical blocks to ``fmt`` (never to a more precise format); returns moved."""
        layer = self._layer(layer_idx)
        if int(fmt) not in layer.pools or fmt == BlockFormat.FULL:
            raise ValueError(f"{fmt!r} is not a warm format of this cache")
        rows, _ = self._rows(layer, blocks)
        fidelity = layer.settings.fidelity
        current = layer.table.format[rows]
        lower = torch.tensor([fidelity[BlockFormat(int(f)).kind] > fidelity[fmt.kind] for f in current.tolist()],
                             dtype=torch.bool)
        rows = rows[lower]
        if rows.numel():
            self._movable(layer, rows)
            layer.convert_rows(rows, fmt)
        return int(rows.numel())

    def promote(self, layer_idx: int, blocks: torch.Tensor | list[int]) -> int:
        """Bring quantized blocks back to full-precision storage (cheaper reads; lost precision stays lost)."""
        layer = self._layer(layer_idx)
        rows, _ = self._rows(layer, blocks)
        rows = rows[layer.table.format[rows] != BlockFormat.FULL]
        if rows.numel():
            self._movable(layer, rows)
            layer.convert_rows(rows, BlockFormat.FULL)
        return int(rows.numel())

    def free(self, layer_idx: int, blocks: torch.Tensor | list[int]) -> int:
        """Drop the given blocks into the layer's Global Summary (needs the minutia attention)."""
        layer = self._layer(layer_idx)
        if not self.cache.sparse_attention:
            raise RuntimeError("dropping blocks needs the minutia_sparse attention (stock attention cannot "
                               "see the summary, and per-layer token counts would break its masks)")
        rows, _ = self._rows(layer, blocks)
        if rows.numel():
            self._movable(layer, rows)
            layer.drop_rows(rows)
        return int(rows.numel())

    def prefetch(self, layer_idx: int, blocks: torch.Tensor | list[int]) -> torch.Tensor:
        """Make the given blocks readable for the next step; returns which ones are resident now.

        Resident blocks count as hits. Blocks waiting in the cold tier are handed to its prefetcher,
        which stages them on the device while the current step computes (a later :meth:`recall`
        reads them from there); dropped blocks are misses for good.
        """
        layer = self._layer(layer_idx)
        blocks = torch.as_tensor(blocks, dtype=torch.long).flatten()
        _, found = self._rows(layer, blocks)
        self._prefetch_requests += int(blocks.numel())
        self._prefetch_hits += int(found.sum())
        tier = self.cache.cold_tier
        if tier is not None and len(layer.cold) and not bool(found.all()):
            rows = torch.nonzero(torch.isin(layer.cold.block_index, blocks[~found])).flatten()
            tier.request([i for i in layer.cold_index.ids(rows) if not tier.staged(i)])
        return found

    def recall_tokens(self, token_ranges: TokenRanges) -> PromotionReport:
        """Bring the cold blocks holding ``token_ranges`` back into every layer's pools.

        Each layer's blocks are :meth:`prefetch` ed first (resident ones count as hits, cold ones are
        staged by the cold tier's prefetcher in parallel), then recalled. Call it inside a
        checkpoint (:meth:`TieredCache.checkpoint`) so that the rollback returns them to the cold tier.
        """
        from kvstore.timeline import blocks_of_ranges

        blocks = blocks_of_ranges(list(token_ranges), self.cache.settings.block_size)
        tier = self.cache.cold_tier
        if tier is not None and blocks.numel():
            layers = [i for i, layer in enumerate(self.cache.layers)
                      if isinstance(layer, TieredLayer) and layer.is_initialized]
            for i in layers:
                layer = self.cache.layers[i]
                self.prefetch(i, blocks[blocks * layer.block_size < layer.cumulative_length])
            tier.wait()
            for i in layers:
                self.cache.layers[i].recall(blocks)
        return self.cache.block_residency(blocks)

    def read_everything(self) -> None:
        """Inside a checkpoint: every cold block back and every quantized block read from its exact copy, as far
        as the device cap allows, with no prefetch and no read counted: the meeting at full precision, a shadow
        comparison's reference (app/llm/drift.py). The rollback puts the cache back as it was."""
        tier = self.cache.cold_tier
        if tier is None:
            return
        with tier.shadow_reads(every_copy=True):
            for layer in self.cache.tiered_layers:
                if layer.is_initialized:
                    layer.recall(torch.arange(-(-layer.cumulative_length // layer.block_size)))

    @contextlib.contextmanager
    def focus(self, token_ranges: TokenRanges) -> Iterator[PromotionReport]:
        """Query-aware promotion for one answer: the blocks holding ``token_ranges`` get an importance
        boost (kept afterwards), keep their format and are always read until the block ends."""
        with torch.inference_mode():
            report = self.cache.promote_tokens(token_ranges, pin=True)
        try:
            yield report
        finally:
            with torch.inference_mode():
                self.cache.unpin()

    def recall(self, layer_idx: int, blocks: torch.Tensor | list[int]) -> int:
        """Bring the given blocks back from the cold tier into the layer's pools; returns how many came."""
        return self._layer(layer_idx).recall(torch.as_tensor(blocks, dtype=torch.long).flatten())

    def spill(self, layer_idx: int, blocks: torch.Tensor | list[int] | None = None,
              score: float | None = None) -> int:
        """Copy blocks (payload in their stored format) into the attached tier placement.

        The placement then keeps them on device / host / disk / Redis by score and budgets, so
        they can be persisted or brought back; returns the number of blocks copied.
        """
        if self.placement is None:
            raise RuntimeError("no TierPlacement attached to this manager")
        layer = self._layer(layer_idx)
        if blocks is None:
            rows = torch.arange(len(layer.table))
        else:
            rows, _ = self._rows(layer, blocks)
        scores = layer.scorer.block_scores(layer.scoring_inputs()) if score is None else None
        modality = self.cache.annotations.block_modality(layer.table.block_index, layer.block_size)
        for row in rows.tolist():
            block = int(layer.table.block_index[row])
            data = pack_block(layer.block_payload(row), layer=layer_idx, block=block,
                              format=int(layer.table.format[row]))
            value = float(score) if scores is None else float(scores[row])
            self.placement.put(block_id(layer_idx, block), data, value, int(modality[row]))
        return int(rows.numel())

    # ------------------------------------------------------------------------------------------
    # the report
    # ------------------------------------------------------------------------------------------

    def report(self) -> KVReport:
        """The one account of the cache's KV (kvstore.report) plus this manager's prefetch counts."""
        report = kv_report(self.cache, self.placement)
        report.prefetch_requests, report.prefetch_hits = self._prefetch_requests, self._prefetch_hits
        return report
