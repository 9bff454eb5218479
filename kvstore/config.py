"""Configuration of the tiered KV cache (one dataclass, loaded from the YAML presets by the app)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kvstore.scoring.combined import ScoreWeights


def _default_fidelity() -> dict[str, float]:
    # Share of a block's value kept by each format; roughly 1 - relative error of the format on KV
    # activations (INT8 ~0.5%, FP8 ~2.5%, INT4 ~8%), so quantizing usually beats dropping.
    return {"full": 1.0, "int8": 0.99, "fp8": 0.97, "int4": 0.9}


@dataclass
class TieredCacheConfig:
    """How TieredCache stores and compresses the KV of full-attention layers.

    With ``compress=False`` every token stays at full precision and the cache is exact (same logits
    as DynamicCache). With ``compress=True`` the cache keeps its bytes under the budget by
    quantizing (``warm_kinds``) or dropping blocks, chosen by importance score, after each update.
    """

    block_size: int = 64
    compress: bool = False
    budget_ratio: float | None = 0.25  # of the full-precision bytes of the tokens seen so far
    budget_bytes: int | None = None  # absolute, for all tiered layers together (overrides the ratio)
    hysteresis: float = 0.05  # compress down to (1 - hysteresis) * budget, so passes are spaced out
    sink_tokens: int = 4
    recent_tokens: int = 256
    warm_kinds: tuple[str, ...] = ("int8", "int4")
    allow_drop: bool = True  # dropping needs the minutia attention (it adds the summary term)
    group_size: int = 32
    param_dtype: torch.dtype = torch.float16
    outlier_channels: int = 0  # full-precision channels per KV head in quantized blocks
    fidelity: dict[str, float] = field(default_factory=_default_fidelity)
    weights: ScoreWeights = field(default_factory=ScoreWeights)
    observation_window: int = 32  # recent queries kept per layer for the query-aware score
    # Blocks read per decode step and KV head on top of the always-read ones (sinks, recent window,
    # tail), chosen by Quest bound against the current query; None reads every kept block.
    decode_top_k_blocks: int | None = None

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError("block_size must be positive")
        unknown = set(self.warm_kinds) - {"int8", "int4", "fp8"}
        if unknown:
            raise ValueError(f"unknown warm formats {sorted(unknown)}")
        if self.budget_ratio is not None and self.budget_ratio < 0:
            raise ValueError("budget_ratio must be >= 0")
