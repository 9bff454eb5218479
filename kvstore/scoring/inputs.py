"""What a scorer sees: one layer's candidate blocks, with one score column per (batch row, KV head)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class BlockScoringInputs:
    """Per-block evidence for N blocks of one layer; ``K`` columns = batch rows x KV heads.

    Anything a scorer does not need may be ``None`` (e.g. no queries were observed yet).
    """

    block_start: torch.Tensor  # [N] first token position of each block
    block_len: torch.Tensor  # [N] valid tokens in each block
    seq_len: int  # tokens seen by the layer so far
    attention_mass: torch.Tensor | None = None  # [N, K] accumulated attention probability mass
    observations: torch.Tensor | None = None  # [N, K] or [N]: queries that contributed to the mass
    key_min: torch.Tensor | None = None  # [N, K, D] element-wise min key of each block
    key_max: torch.Tensor | None = None  # [N, K, D]
    queries: torch.Tensor | None = None  # [K, Q, D] recent queries grouped by the KV head they read
    scale: float = 1.0  # softmax scale of the attention (head_dim ** -0.5 for most models)
    flags: torch.Tensor | None = None  # [N] OR of the TokenFlag bits of the block's tokens
    boost: torch.Tensor | None = None  # [N] query-aware promotion (score units), added as is

    @property
    def num_blocks(self) -> int:
        return int(self.block_start.shape[0])
