"""Structural bonus: blocks holding a speaker-turn start, a speaker change, a slide change or an entity."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from kvstore.annotations import TokenFlag
from kvstore.scoring.inputs import BlockScoringInputs
from kvstore.scoring.registry import register_scorer


def _default_weights() -> dict[TokenFlag, float]:
    # Turn starts alone are not a bonus: in a meeting transcript nearly every 64-token block holds one
    # (measured: marking them hurt NLL). Speaker changes, slide changes and entities are the events.
    return {
        TokenFlag.TURN_START: 0.0,
        TokenFlag.SPEAKER_CHANGE: 1.0,
        TokenFlag.SLIDE_CHANGE: 1.0,
        TokenFlag.ENTITY: 1.0,
        TokenFlag.TIMESTAMP: 0.5,
    }


@register_scorer("structural")
@dataclass(frozen=True)
class StructuralBonusScorer:
    """``max`` of the weights of the flags present in the block: the ``1[structural]`` term of seed 2.2.

    With ``rarity`` each flag's weight is scaled by ``1 - share of blocks carrying it``: a flag that
    nearly every block has (speaker changes in a fast dialogue) ranks nothing and so adds nothing,
    while a rare one (a slide change, the one block with a name) keeps its full bonus.
    """

    normalize: ClassVar[bool] = False  # a bonus in flag-weight units, 0 when no block has one
    flag_weights: dict[TokenFlag, float] = field(default_factory=_default_weights)
    rarity: bool = True

    def score(self, inputs: BlockScoringInputs) -> torch.Tensor:
        if inputs.flags is None or inputs.num_blocks == 0:
            return torch.zeros(inputs.num_blocks, 1)
        flags = inputs.flags.long()
        bonus = torch.zeros(inputs.num_blocks)
        for flag, weight in self.flag_weights.items():
            present = (flags & int(flag)) != 0
            if self.rarity:
                weight = weight * (1.0 - float(present.float().mean()))
            bonus = torch.where(present, torch.clamp(bonus, min=weight), bonus)
        return bonus.unsqueeze(-1)
