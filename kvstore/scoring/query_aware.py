"""S_qry: how much attention recent queries could give each block, from its min/max keys (Quest)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from kvstore.scoring.inputs import BlockScoringInputs
from kvstore.scoring.registry import register_scorer


@register_scorer("query")
@dataclass(frozen=True)
class QueryAwareScorer:
    """Quest upper bound ``sum_d max(q_d kmin_d, q_d kmax_d)`` turned into a relative attention weight.

    The bound is on the logit scale; ``exp(scale * (bound - max bound))`` estimates the block's best
    possible share of the softmax relative to the strongest block, which is what matters for keeping
    it, and is averaged over the recent queries.
    """

    normalize: ClassVar[bool] = True  # relative weights: only the ranking among blocks counts

    def score(self, inputs: BlockScoringInputs) -> torch.Tensor:
        if inputs.queries is None or inputs.key_min is None or inputs.key_max is None or inputs.num_blocks == 0:
            return torch.zeros(inputs.num_blocks, 1)
        q = inputs.queries.float()  # [K, Q, D]
        lo = inputs.key_min.float().transpose(0, 1)  # [K, N, D]
        hi = inputs.key_max.float().transpose(0, 1)
        # [K, Q, N]: bound of each query against each block, without materialising [K, Q, N, D].
        positive = q.clamp(min=0)
        negative = q.clamp(max=0)
        bound = positive @ hi.transpose(1, 2) + negative @ lo.transpose(1, 2)
        logits = inputs.scale * bound
        weights = torch.exp(logits - logits.amax(dim=-1, keepdim=True))
        return weights.mean(dim=1).transpose(0, 1)  # [N, K]
