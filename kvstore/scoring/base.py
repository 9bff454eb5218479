"""What a scorer is: anything with ``score(inputs) -> [N, K]`` and a word on its scale (kvpress's press idea)."""

from __future__ import annotations

from typing import ClassVar, Protocol

import torch

from kvstore.scoring.inputs import BlockScoringInputs


class Scorer(Protocol):
    """One importance term of :class:`~kvstore.scoring.combined.CombinedScorer`.

    ``score`` returns ``[N, K]`` (one column per batch row x KV head) or ``[N, 1]`` (the same for
    every column). ``normalize`` says whether the combination min-max scales the column to [0, 1]
    before weighting it: evidence on an open scale (attention mass, Quest bounds) is, scores that are
    already in [0, 1] and mean something absolute (position, structural bonus) are not.
    """

    normalize: ClassVar[bool]

    def score(self, inputs: BlockScoringInputs) -> torch.Tensor: ...
