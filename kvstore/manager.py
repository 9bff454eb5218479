"""KVCacheManager: explicit block movement between tiers, and stats measured from tensor storage.

TieredCache moves blocks by itself when it is over budget; the manager is the handle the app uses
for everything else: demote what the controller says is cold, promote what a question is about
(query-aware promotion, seed 4), drop blocks, pre-grow pools before a large prefill, ask whether the
blocks a step will read are resident (prefetch; hit rate, seed 6.4), and report bytes per tier,
layer and modality.

Tiers here are storage classes: L1 hot = full precision, L2 warm = quantized (INT8 / FP8 / INT4),
L3 cold = dropped into the layer's Global Summary. Every pool currently lives on the layer's device;
host/disk placement of L2/L3 is future work and will plug in behind ``prefetch``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import torch

from kvstore.annotations import Modality
from kvstore.blocks import BlockFormat
from kvstore.cache import TieredCache
from kvstore.layers import TieredLayer
from kvstore.placement import TierPlacement
from kvstore.stores.base import pack_block


class Tier(enum.IntEnum):
    L1_HOT = 1
    L2_WARM = 2
    L3_COLD = 3


def tier_of(fmt: BlockFormat | int) -> Tier:
    return Tier.L1_HOT if int(fmt) == BlockFormat.FULL else Tier.L2_WARM


@dataclass
class TierUsage:
    """Blocks, tokens and bytes in one tier (bytes from the storage tensors' element sizes)."""

    blocks: int = 0
    tokens: int = 0
    bytes: int = 0
    reserved_bytes: int = 0

    def add(self, other: "TierUsage") -> None:
        self.blocks += other.blocks
        self.tokens += other.tokens
        self.bytes += other.bytes
        self.reserved_bytes += other.reserved_bytes


@dataclass
class ManagerStats:
    per_tier: dict[Tier, TierUsage] = field(default_factory=dict)
    per_layer: dict[int, dict[Tier, TierUsage]] = field(default_factory=dict)
    per_modality: dict[Modality, TierUsage] = field(default_factory=dict)
    prefetch_requests: int = 0
    prefetch_hits: int = 0
    # memory-hierarchy placement (kvstore.placement), when a TierPlacement is attached
    bytes_per_tier: dict[str, int] = field(default_factory=dict)  # device / host / disk / redis
    mode: str = "normal"  # "fallback": L1/L2-only after a low prefetch hit rate
    transfer_gbps: dict[str, float] = field(default_factory=dict)  # per tier pair, e.g. "disk->device"
    placement_hit_rate: float | None = None

    @property
    def prefetch_hit_rate(self) -> float | None:
        """Share of prefetched blocks found resident; None when nothing was requested (shown as n/a)."""
        if self.placement_hit_rate is not None:
            return self.placement_hit_rate
        return self.prefetch_hits / self.prefetch_requests if self.prefetch_requests else None


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
        """Make the given blocks readable for the next step; returns which ones are (misses = dropped).

        All pools are resident on the layer's device today, so this only checks residency and
        records the hit rate; host/disk tiers will start their copies here.
        """
        layer = self._layer(layer_idx)
        blocks = torch.as_tensor(blocks, dtype=torch.long).flatten()
        _, found = self._rows(layer, blocks)
        self._prefetch_requests += int(blocks.numel())
        self._prefetch_hits += int(found.sum())
        return found

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
            self.placement.put(f"L{layer_idx}.b{block}", data, value, int(modality[row]))
        return int(rows.numel())

    # ------------------------------------------------------------------------------------------
    # stats
    # ------------------------------------------------------------------------------------------

    def stats(self) -> ManagerStats:
        """Usage per tier, per tiered layer and per modality; bytes are counted from the pools' tensors."""
        stats = ManagerStats(prefetch_requests=self._prefetch_requests, prefetch_hits=self._prefetch_hits)
        if self.placement is not None:
            placed = self.placement.stats()
            stats.bytes_per_tier = dict(placed["bytes_per_tier"])
            stats.mode = str(placed["mode"])
            stats.transfer_gbps = dict(placed["transfer_gbps"])
            stats.placement_hit_rate = placed["prefetch_hit_rate"]  # None until the placement serves a read
        for tier in Tier:
            stats.per_tier[tier] = TierUsage()
        for layer_idx, layer in enumerate(self.cache.layers):
            if not isinstance(layer, TieredLayer) or not layer.is_initialized:
                continue
            per_layer = {tier: TierUsage() for tier in Tier}
            table = layer.table
            modality = self.cache.annotations.block_modality(table.block_index, layer.block_size)
            for fmt, pool in layer.pools.items():
                in_fmt = table.format == fmt
                usage = TierUsage(
                    blocks=int(in_fmt.sum()),
                    tokens=int(table.fill[in_fmt].sum()),
                    bytes=pool.used_bytes(),
                    reserved_bytes=pool.reserved_bytes(),
                )
                per_layer[tier_of(fmt)].add(usage)
                block_bytes = layer.batch * pool.slot_bytes
                for mod in modality[in_fmt].unique().tolist():
                    rows = in_fmt & (modality == mod)
                    stats.per_modality.setdefault(Modality(mod), TierUsage()).add(
                        TierUsage(int(rows.sum()), int(table.fill[rows].sum()), int(rows.sum()) * block_bytes,
                                  int(rows.sum()) * block_bytes)
                    )
            summary = layer.summary
            per_layer[Tier.L3_COLD].add(TierUsage(
                blocks=0,
                tokens=int(summary.count.max()) if summary.count.numel() else 0,
                bytes=summary.nbytes(),
                reserved_bytes=summary.nbytes(),
            ))
            stats.per_layer[layer_idx] = per_layer
            for tier, usage in per_layer.items():
                stats.per_tier[tier].add(usage)
        return stats

    def summary(self) -> dict[str, Any]:
        """Plain-dict stats for logs and the metrics endpoint."""
        stats = self.stats()
        return {
            "tiers": {t.name: vars(u) for t, u in stats.per_tier.items()},
            "modalities": {m.name: vars(u) for m, u in stats.per_modality.items()},
            "prefetch_hit_rate": stats.prefetch_hit_rate,
            "bytes_per_tier": stats.bytes_per_tier,
            "mode": stats.mode,
            "transfer_gbps": stats.transfer_gbps,
        }
