"""INT2: asymmetric, 4 levels per group, four codes per byte (KIVI-2): the last step before dropping.

At a quarter of the full cache's bytes INT4 cannot hold every block (its codes alone are a quarter),
so without a cheaper format the budget drops blocks; a 2-bit block still answers where it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvstore.quant.base import GroupQuantizer
from kvstore.quant.registry import register_quantizer


@register_quantizer
@dataclass(frozen=True)
class Int2Quantizer(GroupQuantizer):
    kind: ClassVar[str] = "int2"
    bits: ClassVar[int] = 2
