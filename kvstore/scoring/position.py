"""S_pos: attention sinks and the recent window (StreamingLLM's observation), plus a mild recency ramp."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from kvstore.scoring.inputs import BlockScoringInputs
from kvstore.scoring.registry import register_scorer


@register_scorer("position")
@dataclass(frozen=True)
class PositionScorer:
    """1 for blocks holding one of the first ``sink_tokens`` or the last ``recent_tokens`` tokens.

    Other blocks get ``recency_ramp * block_end / seq_len`` so that, all else equal, newer context
    wins. :meth:`protected` names the blocks the budget must keep at full precision.
    """

    normalize: ClassVar[bool] = False  # 1 means protected, whatever the other blocks score
    sink_tokens: int = 4
    recent_tokens: int = 256
    recency_ramp: float = 0.1

    def protected(self, inputs: BlockScoringInputs) -> torch.Tensor:
        start = inputs.block_start
        end = start + inputs.block_len
        sink = start < self.sink_tokens
        recent = end > inputs.seq_len - self.recent_tokens
        return sink | recent

    def score(self, inputs: BlockScoringInputs) -> torch.Tensor:
        end = (inputs.block_start + inputs.block_len).float()
        ramp = self.recency_ramp * end / max(inputs.seq_len, 1)
        return torch.where(self.protected(inputs), torch.ones_like(ramp), ramp).unsqueeze(-1)
