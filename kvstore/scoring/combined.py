"""The importance score of seed 2.2, ``a*norm(S_acc) + b*norm(S_qry) + c*S_pos + d*bonus``, as a weighted
sum of registered scorers: the configured weights name the terms, in the order they are added."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch

from kvstore.scoring.base import Scorer
from kvstore.scoring.inputs import BlockScoringInputs
from kvstore.scoring.position import PositionScorer
from kvstore.scoring.registry import get_scorer


@dataclass(frozen=True)
class ScoreWeights(Mapping[str, float]):
    """The built-in terms' weights by keyword, read as ``{scorer name: weight}``; the defaults are the
    library's (configs set them per deployment, e.g. more bonus for meetings)."""

    accumulated: float = 1.0  # a
    query: float = 1.0  # b
    position: float = 0.5  # c
    structural: float = 0.3  # d

    def __getitem__(self, name: str) -> float:
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.__dataclass_fields__)

    def __len__(self) -> int:
        return len(self.__dataclass_fields__)


def min_max_normalize(scores: torch.Tensor) -> torch.Tensor:
    """Scale each column to [0, 1] over the blocks; a constant column becomes 0 (it ranks nothing)."""
    if scores.numel() == 0:
        return scores
    low = scores.amin(dim=0, keepdim=True)
    span = scores.amax(dim=0, keepdim=True) - low
    return torch.where(span > 0, (scores - low) / span.clamp(min=1e-30), torch.zeros_like(scores))


@dataclass(frozen=True)
class CombinedScorer:
    """Weighted sum of the scorers, one column per (batch row, KV head): ``[N, K]`` (``K`` may be 1).

    ``weights`` maps registered scorer names to weights; each term is built by the registry with its
    defaults, except the ``position`` term, which is ``position``: the compression policy protects
    the same sinks and recent window that this term scores 1.
    """

    weights: Mapping[str, float] = field(default_factory=ScoreWeights)
    position: PositionScorer = field(default_factory=PositionScorer)
    terms: tuple[tuple[Scorer, float], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        terms = tuple((self.position if name == "position" else get_scorer(name), float(weight))
                      for name, weight in self.weights.items())
        object.__setattr__(self, "terms", terms)

    def score(self, inputs: BlockScoringInputs) -> torch.Tensor:
        total = torch.zeros(inputs.num_blocks, 1)  # adding to 0 is exact: the sum is the terms' in order
        for scorer, weight in self.terms:
            column = scorer.score(inputs)
            total = total + weight * (min_max_normalize(column) if scorer.normalize else column)
        if inputs.boost is not None:  # query-aware promotion (a question asked about these blocks)
            total = total + inputs.boost.float().view(-1, 1)
        return total

    def block_scores(self, inputs: BlockScoringInputs) -> torch.Tensor:
        """One score per block (``[N]``): the max over columns, since a block is kept or not for all heads."""
        scores = self.score(inputs)
        return scores.amax(dim=1) if scores.numel() else torch.zeros(inputs.num_blocks)
