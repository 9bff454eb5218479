"""KV quantizers (INT8, INT4, INT2, FP8 e4m3), one file each, looked up by name."""

from kvstore.quant.base import GroupQuantizer, effective_group_size
from kvstore.quant.fp8 import Fp8Quantizer
from kvstore.quant.int2 import Int2Quantizer
from kvstore.quant.int4 import Int4Quantizer
from kvstore.quant.int8 import Int8Quantizer
from kvstore.quant.registry import QUANTIZERS, get_quantizer, register_quantizer

__all__ = [
    "Fp8Quantizer",
    "GroupQuantizer",
    "Int2Quantizer",
    "Int4Quantizer",
    "Int8Quantizer",
    "QUANTIZERS",
    "effective_group_size",
    "get_quantizer",
    "register_quantizer",
]
