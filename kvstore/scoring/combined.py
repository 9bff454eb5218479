"""The importance score of seed 2.2: ``a*norm(S_acc) + b*norm(S_qry) + c*S_pos + d*bonus``."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kvstore.scoring.accumulated import AccumulatedAttentionScorer
from kvstore.scoring.inputs import BlockScoringInputs
from kvstore.scoring.position import PositionScorer
from kvstore.scoring.query_aware import QueryAwareScorer
from kvstore.scoring.structural import StructuralBonusScorer


@dataclass(frozen=True)
class ScoreWeights:
    """Weights of the four terms; configs set them per deployment (e.g. more bonus for meetings)."""

    accumulated: float = 1.0  # a
    query: float = 1.0  # b
    position: float = 0.5  # c
    structural: float = 0.3  # d


def min_max_normalize(scores: torch.Tensor) -> torch.Tensor:
    """Scale each column to [0, 1] over the blocks; a constant column becomes 0 (it ranks nothing)."""
    if scores.numel() == 0:
        return scores
    low = scores.amin(dim=0, keepdim=True)
    span = scores.amax(dim=0, keepdim=True) - low
    return torch.where(span > 0, (scores - low) / span.clamp(min=1e-30), torch.zeros_like(scores))


@dataclass(frozen=True)
class CombinedScorer:
    """Weighted sum of the scorers, one column per (batch row, KV head): ``[N, K]`` (``K`` may be 1)."""

    weights: ScoreWeights = field(default_factory=ScoreWeights)
    accumulated: AccumulatedAttentionScorer = field(default_factory=AccumulatedAttentionScorer)
    query: QueryAwareScorer = field(default_factory=QueryAwareScorer)
    position: PositionScorer = field(default_factory=PositionScorer)
    structural: StructuralBonusScorer = field(default_factory=StructuralBonusScorer)

    def score(self, inputs: BlockScoringInputs) -> torch.Tensor:
        w = self.weights
        total = (
            w.accumulated * min_max_normalize(self.accumulated.score(inputs))
            + w.query * min_max_normalize(self.query.score(inputs))
            + w.position * self.position.score(inputs)
            + w.structural * self.structural.score(inputs)
        )
        if inputs.boost is not None:  # query-aware promotion (a question asked about these blocks)
            total = total + inputs.boost.float().view(-1, 1)
        return total

    def block_scores(self, inputs: BlockScoringInputs) -> torch.Tensor:
        """One score per block (``[N]``): the max over columns, since a block is kept or not for all heads."""
        scores = self.score(inputs)
        return scores.amax(dim=1) if scores.numel() else torch.zeros(inputs.num_blocks)
