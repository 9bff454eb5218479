"""FP8 e4m3 with one absmax scale per group: native on GPUs with FP8 units (sm_89+), storage-only elsewhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from kvstore.quant.base import GroupQuantizer
from kvstore.quant.registry import register_quantizer


@register_quantizer
@dataclass(frozen=True)
class Fp8Quantizer(GroupQuantizer):
    kind: ClassVar[str] = "fp8"
    bits: ClassVar[int] = 8

    @classmethod
    def natively_supported(cls, device: torch.device | str) -> bool:
        device = torch.device(device)
        if device.type != "cuda" or not torch.cuda.is_available():
            return False
        return torch.cuda.get_device_capability(device) >= (8, 9)
