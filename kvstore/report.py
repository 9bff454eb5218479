"""One account of a TieredCache's KV bytes: what the UI, /metrics, the CLI, the manager and benches read.

Everything is measured from the storage tensors (pools, page tables, summaries, sliding windows) and,
when a cold tier or tier placement is attached, from the placement's own byte counts. Two kinds of
"tier" appear and are named apart: a block's **precision tier** (L1 hot = full precision, L2 warm =
quantized, L3 cold = folded into the layer's Global Summary) and a block's **location** in the memory
hierarchy (device / host / disk / redis: kvstore.placement.Tier).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvstore.blocks import BlockFormat
from kvstore.modality import Modality

if TYPE_CHECKING:
    from kvstore.placement import TierPlacement


class PrecisionTier(enum.IntEnum):
    """How precisely a block is kept (not where: that is kvstore.placement.Tier)."""

    L1_HOT = 1  # full precision
    L2_WARM = 2  # quantized (INT8 / FP8 / INT4 / INT2)
    L3_COLD = 3  # dropped into the layer's Global Summary


def precision_tier(fmt: BlockFormat | int) -> PrecisionTier:
    return PrecisionTier.L1_HOT if int(fmt) == BlockFormat.FULL else PrecisionTier.L2_WARM


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
class KVReport:
    """The cache's KV, counted once. ``per_*`` sum over tiered layers; ``layers`` has one entry per layer."""

    tokens: int = 0
    kv_bytes: int = 0  # every layer: blocks, metadata, summaries, sliding windows
    tiered_kv_bytes: int = 0  # the tiered (full-attention) layers only
    full_precision_bytes: int = 0  # what DynamicCache would hold for the tiered layers
    budget_bytes: int = 0
    bytes_by_tier: dict[str, int] = field(default_factory=dict)  # L1, L2, L3, metadata, sliding, cold_<location>
    per_tier: dict[PrecisionTier, TierUsage] = field(default_factory=dict)
    per_layer: dict[int, dict[PrecisionTier, TierUsage]] = field(default_factory=dict)
    per_modality: dict[Modality, TierUsage] = field(default_factory=dict)
    modality_formats: dict[Modality, dict[str, int]] = field(default_factory=dict)  # block bytes per format
    modality_tokens_seen: dict[Modality, int] = field(default_factory=dict)
    layers: list[dict[str, Any]] = field(default_factory=list)
    device_cap_bytes: int | None = None
    peak_device_bytes: int = 0
    refused_recalls: int = 0
    # the memory hierarchy (kvstore.placement), when one is attached
    # device / host / disk / redis: what each holds, sealed blocks at their sealed size (TierPlacement.tier_bytes)
    bytes_per_location: dict[str, int] = field(default_factory=dict)
    mode: str = "normal"  # "fallback": L1/L2 only after a low prefetch hit rate
    transfer_gbps: dict[str, float] = field(default_factory=dict)  # per location pair, e.g. "disk->device"
    placement_hit_rate: float | None = None
    prefetch_requests: int = 0  # KVCacheManager.prefetch calls' blocks
    prefetch_hits: int = 0

    @property
    def compression_ratio(self) -> float:
        return self.full_precision_bytes / self.tiered_kv_bytes if self.tiered_kv_bytes else 1.0

    @property
    def prefetch_hit_rate(self) -> float | None:
        """Share of prefetched blocks found resident; None ("n/a") when nothing was read."""
        if self.placement_hit_rate is not None:
            return self.placement_hit_rate
        return self.prefetch_hits / self.prefetch_requests if self.prefetch_requests else None

    def as_dict(self) -> dict[str, Any]:
        """Plain numbers for dashboards, /metrics, logs and benches (JSON-safe)."""
        n_layers = max(len(self.per_layer), 1)
        modalities = {
            m.label: {
                "tokens_seen": self.modality_tokens_seen.get(m, 0),
                "tokens_kept": self.per_modality.get(m, TierUsage()).tokens // n_layers,  # mean over tiered layers
                "blocks": self.per_modality.get(m, TierUsage()).blocks,
                "bytes": self.per_modality.get(m, TierUsage()).bytes,
                "bytes_by_format": dict(self.modality_formats.get(m, {})),
            }
            for m in Modality
        }
        return {
            "tokens": self.tokens,
            "seq_length": self.tokens,
            "kv_bytes": self.kv_bytes,
            "tiered_kv_bytes": self.tiered_kv_bytes,
            "full_precision_bytes": self.full_precision_bytes,
            "budget_bytes": self.budget_bytes,
            "compression_ratio": self.compression_ratio,
            "bytes_by_tier": dict(self.bytes_by_tier),
            "bytes_by_modality": {name: entry["bytes"] for name, entry in modalities.items()},
            "modalities": modalities,
            "tiers": {t.name: vars(u) for t, u in self.per_tier.items()},
            "layers": self.layers,
            "device_cap_bytes": self.device_cap_bytes,
            "peak_device_bytes": self.peak_device_bytes,
            "refused_recalls": self.refused_recalls,
            "bytes_per_location": dict(self.bytes_per_location),
            "mode": self.mode,
            "transfer_gbps": dict(self.transfer_gbps),
            "prefetch_hit_rate": self.prefetch_hit_rate,
        }


def kv_report(cache: Any, placement: "TierPlacement | None" = None) -> KVReport:
    """Measure ``cache`` (a kvstore.cache.TieredCache, which imports this module) and ``placement``
    (default: the cache's cold tier's) into one :class:`KVReport`."""
    from kvstore.layers import TieredLayer

    if placement is None and cache.cold_tier is not None:
        placement = cache.cold_tier.placement
    report = KVReport(  # the byte totals are the sums of the layers', measured once each in the loop below
        tokens=cache.get_seq_length(),
        per_tier={tier: TierUsage() for tier in PrecisionTier},
        per_modality={m: TierUsage() for m in Modality},
        modality_formats={m: {} for m in Modality},
        device_cap_bytes=cache.settings.device_cap_bytes,
        peak_device_bytes=cache.peak_device_bytes,
        refused_recalls=cache.refused_recalls,
    )
    by_tier = {"L1": 0, "L2": 0, "L3": 0, "metadata": 0, "sliding": 0}
    for layer_idx, layer in enumerate(cache.layers):
        kv_bytes = layer.kv_bytes()
        report.kv_bytes += kv_bytes
        if not isinstance(layer, TieredLayer):
            by_tier["sliding"] += kv_bytes
            report.layers.append({"tokens_seen": layer.cumulative_length, "kv_bytes": kv_bytes,
                                  "sliding_window": layer.sliding_window})
            continue
        budget, full_precision = layer.budget(), layer.full_precision_bytes()
        report.tiered_kv_bytes += kv_bytes
        report.budget_bytes += budget
        report.full_precision_bytes += full_precision
        if not layer.is_initialized:
            report.layers.append({"tokens_seen": 0})
            continue
        per_layer = {tier: TierUsage() for tier in PrecisionTier}
        table, summary = layer.table, layer.summary
        modality = cache.annotations.block_modality(table.block_index, layer.block_size)
        formats = {}
        for fmt, pool in layer.pools.items():
            in_fmt = table.format == fmt
            n_blocks, used, reserved = int(in_fmt.sum()), pool.used_bytes(), pool.reserved_bytes()
            block_bytes = layer.batch * pool.slot_bytes
            kind = BlockFormat(fmt).kind
            per_layer[precision_tier(fmt)].add(TierUsage(n_blocks, int(table.fill[in_fmt].sum()), used, reserved))
            formats[kind] = {"blocks": n_blocks, "used_bytes": used, "reserved_bytes": reserved}
            by_tier["L1" if fmt == BlockFormat.FULL else "L2"] += n_blocks * block_bytes
            for m in Modality:
                rows = in_fmt & (modality == int(m))
                n_rows = int(rows.sum())
                if n_rows:
                    report.per_modality[m].add(TierUsage(n_rows, int(table.fill[rows].sum()), n_rows * block_bytes,
                                                         n_rows * block_bytes))
                    by_format = report.modality_formats[m]
                    by_format[kind] = by_format.get(kind, 0) + n_rows * block_bytes
        summary_bytes, metadata_bytes = summary.nbytes(), layer.metadata_bytes()
        per_layer[PrecisionTier.L3_COLD].add(TierUsage(
            0, int(summary.count.max()) if summary.count.numel() else 0, summary_bytes, summary_bytes))
        report.per_layer[layer_idx] = per_layer
        for tier, usage in per_layer.items():
            report.per_tier[tier].add(usage)
        by_tier["L3"] += summary_bytes
        by_tier["metadata"] += metadata_bytes - summary_bytes
        report.layers.append({
            "tokens_seen": layer.cumulative_length,
            "tokens_kept": layer.kept_tokens(),
            "tokens_summarised": float(summary.count.mean()) if summary.count.numel() else 0.0,
            "formats": formats,
            "metadata_bytes": metadata_bytes,
            "kv_bytes": kv_bytes,
            "full_precision_bytes": full_precision,
            "budget_bytes": budget,
        })
    seen = cache.annotations.tokens_by_modality(report.tokens).tolist()
    report.modality_tokens_seen = {m: int(seen[int(m)]) for m in Modality}
    if placement is not None:
        placed = placement.stats()
        report.bytes_per_location = dict(placed["bytes_per_tier"])
        report.mode = str(placed["mode"])
        report.transfer_gbps = dict(placed["transfer_gbps"])
        report.placement_hit_rate = placed["prefetch_hit_rate"]  # None until the placement serves a read
        by_tier |= {f"cold_{where}": n for where, n in report.bytes_per_location.items() if where != "device"}
    report.bytes_by_tier = by_tier
    return report
