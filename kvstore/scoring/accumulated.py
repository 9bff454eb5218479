"""S_acc: attention the block actually received (prefill observation windows and decode steps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from kvstore.scoring.inputs import BlockScoringInputs
from kvstore.scoring.registry import register_scorer


@register_scorer("accumulated")
@dataclass(frozen=True)
class AccumulatedAttentionScorer:
    """Mean attention mass per observing query (H2O / SnapKV evidence).

    Dividing by the number of observations removes the bias towards old blocks, which have simply
    been looked at by more queries than recent ones.
    """

    normalize: ClassVar[bool] = True  # attention mass has no fixed scale
    per_observation: bool = True

    def score(self, inputs: BlockScoringInputs) -> torch.Tensor:
        if inputs.attention_mass is None:
            return torch.zeros(inputs.num_blocks, 1)
        mass = inputs.attention_mass.float()
        if not self.per_observation or inputs.observations is None:
            return mass
        obs = inputs.observations.float()
        if obs.ndim == 1:
            obs = obs.unsqueeze(-1)
        return mass / obs.clamp(min=1.0)
