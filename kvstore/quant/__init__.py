"""KV quantizers (INT8, INT4, INT2, FP8 e4m3), one per quantized format of kernels.formats, looked up by name."""

from kvstore.quant.base import GroupQuantizer, effective_group_size
from kvstore.quant.registry import QUANTIZERS, get_quantizer, register_quantizer

# Names kept for callers that import a format's class directly.
Int8Quantizer = QUANTIZERS["int8"]
Int4Quantizer = QUANTIZERS["int4"]
Int2Quantizer = QUANTIZERS["int2"]
Fp8Quantizer = QUANTIZERS["fp8"]

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
