"""Shared behaviour of the group-wise KV quantizers (the formats themselves live in kernels.reference)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from kernels import dispatch as ops  # Triton on CUDA, the torch reference elsewhere
from kernels.reference import QuantizedTensor
from kernels.formats import BY_NAME


def effective_group_size(group_size: int, length: int) -> int:
    """Largest group that divides ``length`` and ``group_size`` (e.g. 16 for head_dim 16 with groups of 32).

    Falling back to the gcd keeps one configuration usable for every model shape instead of failing on
    small heads; the scale overhead grows accordingly and is measured, not assumed, by the budget.
    """
    return math.gcd(group_size, length)


@dataclass(frozen=True)
class GroupQuantizer:
    """Quantize along ``axis`` with one scale per ``group_size`` elements.

    For the KV store: keys use the token axis (KIVI per-channel), values the channel axis (per-token);
    see :meth:`for_keys` and :meth:`for_values`. ``param_dtype`` stores scales and zero points.
    """

    kind: ClassVar[str] = ""
    bits: ClassVar[int] = 0
    group_size: int = 32
    axis: int = -1
    param_dtype: torch.dtype = torch.float16

    def quantize(self, x: torch.Tensor, outlier_idx: torch.Tensor | None = None) -> QuantizedTensor:
        """Compress ``x``; ``outlier_idx`` (broadcastable, see kernels.reference) keeps channels exact."""
        group = effective_group_size(self.group_size, x.shape[self.axis])
        return ops.quantize(x, self.kind, self.axis, group, outlier_idx, self.param_dtype)

    def dequantize(self, qt: QuantizedTensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Restore the tensor (in the source dtype unless ``dtype`` is given)."""
        return ops.dequantize(qt, dtype)

    def for_keys(self, token_axis: int) -> "GroupQuantizer":
        return replace(self, axis=token_axis)

    def for_values(self) -> "GroupQuantizer":
        return replace(self, axis=-1)

    @classmethod
    def natively_supported(cls, device: torch.device | str) -> bool:
        """Whether the device computes on this format natively (storage works everywhere)."""
        need = BY_NAME[cls.kind].native_from
        if need is None:
            return True
        device = torch.device(device)
        if device.type != "cuda" or not torch.cuda.is_available():
            return False
        return torch.cuda.get_device_capability(device) >= need
