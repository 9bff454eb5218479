"""INT4: asymmetric, 16 levels per group, two codes per byte; the warm/cold workhorse (KIVI)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvstore.quant.base import GroupQuantizer
from kvstore.quant.registry import register_quantizer


@register_quantizer
@dataclass(frozen=True)
class Int4Quantizer(GroupQuantizer):
    kind: ClassVar[str] = "int4"
    bits: ClassVar[int] = 4
