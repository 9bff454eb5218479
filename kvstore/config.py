"""Configuration of the tiered KV cache (one dataclass, loaded from the YAML presets by the app)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from kernels.formats import FORMATS, NAMES, QUANTIZED_NAMES
from kvstore.modality import MODALITY_NAMES
from kvstore.scoring.combined import ScoreWeights
from kvstore.scoring.registry import check_scorer_names


def _default_fidelity() -> dict[str, float]:
    """Share of a block's value kept by each format (kernels.formats)."""
    return {f.name: f.fidelity for f in FORMATS}


@dataclass(frozen=True)
class ModalityPolicy:
    """Tier policy of one modality's blocks (a live meeting keeps speech sharper than slide text).

    ``budget_share`` / ``budget_bytes`` are ceilings for this modality's blocks (share of the cache
    budget, or bytes for all tiered layers together); the cache budget still bounds the total.
    ``warm_kinds`` restricts the quantized formats (None: the cache's), ``allow_drop`` whether its
    blocks may be dropped, ``preferred`` the most precise format a settled block keeps (blocks
    leave full precision for it once out of the sink/recent window, even under budget).
    """

    budget_share: float | None = None
    budget_bytes: int | None = None
    warm_kinds: tuple[str, ...] | None = None
    allow_drop: bool = True
    preferred: str | None = None

    def formats(self, cache_warm_kinds: tuple[str, ...]) -> tuple[str, ...]:
        """Formats this modality may use: full precision plus its allowed warm kinds."""
        warm = cache_warm_kinds if self.warm_kinds is None else self.warm_kinds
        return ("full", *warm)


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
    # Open-ended (live) prefill with budget_ratio: the budget never falls below this many tokens at
    # full precision, so the first chunks are not squeezed against a tiny budget and dropped for good.
    budget_floor_tokens: int = 0
    # Drop blocks only when quantizing every unprotected block cannot meet the budget (decisions that
    # can still be revised later win over irreversible ones while the budget is growing).
    drop_last_resort: bool = False
    hysteresis: float = 0.05  # compress down to (1 - hysteresis) * budget, so passes are spaced out
    sink_tokens: int = 4
    recent_tokens: int = 256
    # The recent window kept at full precision takes at most this share of the budget (tight budgets on
    # short contexts: 256 tokens are 6% of a 4K-token cache, a quarter of a 25% budget).
    recent_budget_share: float = 0.0625
    warm_kinds: tuple[str, ...] = ("int8", "int4", "int2")
    allow_drop: bool = True  # dropping needs the minutia attention (it adds the summary term)
    group_size: int = 32
    param_dtype: torch.dtype = torch.float16
    outlier_channels: int = 0  # full-precision channels per KV head in quantized blocks
    fidelity: dict[str, float] = field(default_factory=_default_fidelity)
    # Importance score: registered scorer name (kvstore.scoring.registry) -> weight; a new scorer is one
    # module and one entry here, e.g. ``{**ScoreWeights(), "mine": 0.5}``.
    weights: Mapping[str, float] = field(default_factory=ScoreWeights)
    observation_window: int = 32  # recent queries kept per layer for the query-aware score
    # Blocks read per decode step and KV head on top of the always-read ones (sinks, recent window,
    # tail), chosen by Quest bound against the current query; None reads every kept block.
    decode_top_k_blocks: int | None = None
    modalities: dict[str, ModalityPolicy] = field(default_factory=dict)  # keyed "text" / "audio" / "video"
    # Device memory: a hard cap on the KV bytes (all layers, the cold tier's staging included). The budget
    # then never exceeds ``watermark`` x cap (compression down to (1 - hysteresis) of that); blocks recalled
    # for a question may fill half the headroom above the watermark, the rest takes the question's tokens
    # and one prefill chunk.
    device_cap_bytes: int | None = None
    watermark: float = 0.85

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError("block_size must be positive")
        unknown = set(self.warm_kinds) - set(QUANTIZED_NAMES)
        if unknown:
            raise ValueError(f"unknown warm formats {sorted(unknown)}")
        if set(self.fidelity) - set(NAMES):
            raise ValueError(f"fidelity of unknown formats {sorted(set(self.fidelity) - set(NAMES))}")
        # a partial map overrides the table's defaults (a format added later keeps its own)
        object.__setattr__(self, "fidelity", {**_default_fidelity(), **self.fidelity})
        check_scorer_names(self.weights)
        if self.budget_ratio is not None and self.budget_ratio < 0:
            raise ValueError("budget_ratio must be >= 0")
        if not 0 <= self.recent_budget_share <= 1:
            raise ValueError("recent_budget_share must be in [0, 1]")
        if self.budget_floor_tokens < 0:
            raise ValueError("budget_floor_tokens must be >= 0")
        if not 0 < self.watermark <= 1:
            raise ValueError("watermark must be in (0, 1]")
        if self.device_cap_bytes is not None and self.device_cap_bytes <= 0:
            raise ValueError("device_cap_bytes must be positive")
        for name, policy in self.modalities.items():
            if name not in MODALITY_NAMES:
                raise ValueError(f"unknown modality {name!r} (expected one of {', '.join(MODALITY_NAMES)})")
            extra = set(policy.warm_kinds or ()) - set(self.warm_kinds)
            if extra:
                raise ValueError(f"{name}: warm formats {sorted(extra)} are not among the cache's {self.warm_kinds}")
            if policy.preferred is not None and policy.preferred not in policy.formats(self.warm_kinds):
                raise ValueError(f"{name}: preferred format {policy.preferred!r} is not allowed for it")
            if policy.budget_share is not None and not 0 <= policy.budget_share <= 1:
                raise ValueError(f"{name}: budget_share must be in [0, 1]")
