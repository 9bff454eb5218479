"""Structural bonus: blocks holding a speaker-turn start, a speaker change, a slide change or an entity."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kvstore.annotations import TokenFlag
from kvstore.scoring.inputs import BlockScoringInputs


def _default_weights() -> dict[TokenFlag, float]:
    return {
        TokenFlag.TURN_START: 1.0,
        TokenFlag.SPEAKER_CHANGE: 1.0,
        TokenFlag.SLIDE_CHANGE: 1.0,
        TokenFlag.ENTITY: 1.0,
        TokenFlag.TIMESTAMP: 0.5,
    }


@dataclass(frozen=True)
class StructuralBonusScorer:
    """``max`` of the weights of the flags present in the block: the ``1[structural]`` term of seed 2.2."""

    flag_weights: dict[TokenFlag, float] = field(default_factory=_default_weights)

    def score(self, inputs: BlockScoringInputs) -> torch.Tensor:
        if inputs.flags is None:
            return torch.zeros(inputs.num_blocks, 1)
        flags = inputs.flags.long()
        bonus = torch.zeros(inputs.num_blocks)
        for flag, weight in self.flag_weights.items():
            present = (flags & int(flag)) != 0
            bonus = torch.where(present, torch.clamp(bonus, min=weight), bonus)
        return bonus.unsqueeze(-1)
