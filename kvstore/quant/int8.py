"""INT8: asymmetric, 256 levels per group; near lossless for KV (relative error ~0.5%)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvstore.quant.base import GroupQuantizer
from kvstore.quant.registry import register_quantizer


@register_quantizer
@dataclass(frozen=True)
class Int8Quantizer(GroupQuantizer):
    kind: ClassVar[str] = "int8"
    bits: ClassVar[int] = 8
