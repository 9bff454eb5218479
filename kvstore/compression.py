"""Which format each block of a tiered layer should have: budgets in, a new format per block out.

One job: planning. The policy reads the layer's block scores (kvstore.scoring), its byte budget, its
modalities' policies and which blocks are protected or pinned, and returns the format each page-table
row should move to (or DROP); :class:`~kvstore.layers.TieredLayer` carries the plan out on its
:class:`~kvstore.block_storage.BlockStorage`.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kvstore.block_storage import BlockStorage
from kvstore.blocks import BlockFormat
from kvstore.config import TieredCacheConfig
from kvstore.layer_context import LayerContext
from kvstore.modality import Modality
from kvstore.scoring import DROP, BlockScoringInputs, CombinedScorer, PositionScorer, TierOption, fewest_drops, plan_tiers


class CompressionPolicy:
    """Byte budget and format plan of one tiered layer."""

    def __init__(self, settings: TieredCacheConfig, ctx: LayerContext) -> None:
        self.settings = settings
        self.ctx = ctx
        self.scorer = CombinedScorer(
            weights=settings.weights,
            position=PositionScorer(sink_tokens=settings.sink_tokens, recent_tokens=settings.recent_tokens),
        )

    # ------------------------------------------------------------------------------------------
    # Budgets
    # ------------------------------------------------------------------------------------------

    def budget(self, full_precision_bytes: int, bytes_per_token: int) -> int:
        """This layer's byte budget: :meth:`uncapped_budget`, capped by the device watermark."""
        watermark = self.ctx.watermark_budget_per_layer()
        budget = self.uncapped_budget(full_precision_bytes, bytes_per_token)
        return budget if watermark is None else min(budget, watermark)

    def uncapped_budget(self, full_precision_bytes: int, bytes_per_token: int) -> int:
        """Its share of ``budget_bytes``, else ``budget_ratio`` of what the full cache would hold (never under
        the floor): the budget before any device cap."""
        if self.settings.budget_bytes is not None:
            return int(self.settings.budget_bytes / max(self.ctx.num_tiered_layers, 1))
        ratio = self.settings.budget_ratio if self.settings.budget_ratio is not None else 1.0
        floor = self.settings.budget_floor_tokens * bytes_per_token
        return int(max(ratio * full_precision_bytes, floor))

    def modality_budgets(self, budget: int) -> dict[int, int]:
        """Per-layer byte ceilings of the modalities whose policy sets one (code -> bytes)."""
        ceilings = {}
        for name, policy in self.settings.modalities.items():
            code = int(Modality.parse(name))
            if policy.budget_bytes is not None:
                ceilings[code] = int(policy.budget_bytes / max(self.ctx.num_tiered_layers, 1))
            elif policy.budget_share is not None:
                ceilings[code] = int(policy.budget_share * budget)
        return ceilings

    def protected_window(self, budget: int, bytes_per_token: int) -> PositionScorer:
        """The sinks and recent window the budget keeps at full precision; the recent window takes at
        most ``recent_budget_share`` of the budget, so a short context under a tight budget is not
        spent on its last few hundred tokens while older blocks are dropped."""
        position = self.scorer.position
        if bytes_per_token <= 0:
            return position
        cap = int(self.settings.recent_budget_share * budget // bytes_per_token)
        return position if cap >= position.recent_tokens else replace(position, recent_tokens=cap)

    # ------------------------------------------------------------------------------------------
    # Scores in, formats out
    # ------------------------------------------------------------------------------------------

    def scoring_inputs(self, storage: BlockStorage, seq_len: int, recent_queries: torch.Tensor | None,
                       last_scale: float | None) -> BlockScoringInputs:
        table, block_size = storage.table, storage.block_size
        n, k = len(table), storage.batch * storage.n_heads
        queries = None
        if recent_queries is not None:
            rq = recent_queries.float()  # [B, Hq, W, D]
            groups = rq.shape[1] // storage.n_heads
            queries = rq.reshape(storage.batch, storage.n_heads, groups * rq.shape[2], -1).reshape(k, -1, rq.shape[-1])
        cols = table.columns
        return BlockScoringInputs(
            block_start=table.block_index * block_size,
            block_len=table.fill.clone(),
            seq_len=seq_len,
            attention_mass=cols["attention_mass"].reshape(n, k),
            observations=cols["observations"].reshape(n, k),
            key_min=cols["key_min"].reshape(n, k, -1).cpu(),
            key_max=cols["key_max"].reshape(n, k, -1).cpu(),
            queries=None if queries is None else queries.cpu(),
            scale=last_scale if last_scale is not None else storage.head_dim**-0.5,
            flags=self.ctx.annotations.block_flags(table.block_index, block_size),
            boost=self.ctx.priorities.for_blocks(table.block_index)[0],
        )

    def plan(self, storage: BlockStorage, inputs: BlockScoringInputs, budget: int, kv_bytes: int,
             fixed_bytes: int, protect_from: int) -> torch.Tensor | None:
        """The format code each page-table row should have (-1: drop), or None when nothing changes.

        Partially filled blocks, sinks, the recent window and blocks holding tokens at or after
        ``protect_from`` stay at full precision; blocks pinned by a question keep their format.
        Each block may only use its modality's formats and is capped at its ``preferred`` one;
        modalities with a byte ceiling are planned against it first. ``fixed_bytes``: what the layer
        holds besides its blocks (summary, remembered queries, outlier index).
        """
        settings, table, block_size = self.settings, storage.table, storage.block_size
        starts = inputs.block_start
        protected = self.protected_window(budget, storage.geometry.full_bytes_per_token()).protected(inputs)
        protected |= table.fill < block_size
        protected |= starts + block_size > protect_from
        _, pinned = self.ctx.priorities.for_blocks(table.block_index)
        pinned = pinned & ~protected

        formats = [BlockFormat.FULL] + [BlockFormat.from_kind(k) for k in settings.warm_kinds]
        fidelity = settings.fidelity
        fidelity_of = torch.tensor([fidelity[BlockFormat(f).kind] for f in range(len(BlockFormat))])
        current_fidelity = fidelity_of[table.format]
        format_bytes = torch.zeros(len(BlockFormat), dtype=torch.long)
        for f in formats:
            format_bytes[int(f)] = storage.block_bytes(f)
        current_bytes = format_bytes[table.format]

        # Per-block options: the modality's formats (pinned blocks: only their current one).
        modality = self.ctx.annotations.block_modality(table.block_index, block_size)
        allowed = torch.ones(len(table), len(formats), dtype=torch.bool)
        drop_ok = torch.full((len(table),), settings.allow_drop and self.ctx.sparse_attention)
        cap = current_fidelity.clone()
        for name, policy in settings.modalities.items():
            rows = modality == int(Modality.parse(name))
            usable = policy.formats(settings.warm_kinds)
            allowed[rows] = torch.tensor([f.kind in usable for f in formats])
            drop_ok &= ~rows | policy.allow_drop
            if policy.preferred is not None:
                settled = rows & ~protected & ~pinned
                cap[settled] = torch.clamp(cap[settled], max=fidelity[policy.preferred])
        allowed[pinned] = torch.stack([table.format[pinned] == int(f) for f in formats], dim=1)
        drop_ok &= ~pinned

        ceilings = self.modality_budgets(budget)
        over_ceiling = {code: int(current_bytes[modality == code].sum()) > limit for code, limit in ceilings.items()}
        needs_pass = kv_bytes > budget or any(over_ceiling.values()) or bool((cap < current_fidelity - 1e-9).any())
        if not needs_pass:
            return None
        scores = self.scorer.block_scores(inputs)
        options = [TierOption(f.kind, int(format_bytes[int(f)]), fidelity[f.kind]) for f in formats]
        keep = 1.0 - settings.hysteresis

        def plan(rows: torch.Tensor, target: int, caps: torch.Tensor) -> torch.Tensor:
            """Option index (into ``formats``, DROP = -1) per row in ``rows``."""
            args = (scores[rows], options, target, protected[rows], caps[rows])
            may_drop = drop_ok[rows]
            if settings.drop_last_resort:
                quantize_only = plan_tiers(*args, allow_drop=False, allowed=allowed[rows])
                if not quantize_only.over_budget:
                    return quantize_only.level
                # Drop no more blocks than the budget forces, the lowest-scored ones.
                may_drop = fewest_drops(scores[rows], options, target, protected[rows], allowed[rows], may_drop)
            return plan_tiers(*args, allow_drop=may_drop, allowed=allowed[rows]).level

        for code, limit in ceilings.items():  # modalities with a ceiling first, against it alone
            if over_ceiling[code] or bool((cap[modality == code] < current_fidelity[modality == code] - 1e-9).any()):
                rows = modality == code
                level = plan(rows, int(limit * keep), cap)
                chosen_fid = torch.tensor([fidelity[formats[i].kind] if i != DROP else 0.0 for i in level.tolist()])
                cap[rows] = torch.minimum(cap[rows], chosen_fid)
        every = torch.ones(len(table), dtype=torch.bool)
        level = plan(every, int(budget * keep) - fixed_bytes, cap)
        new_format = torch.tensor([int(formats[i]) if i != DROP else -1 for i in level.tolist()], dtype=torch.long)
        return new_format if bool((new_format != table.format).any()) else None
