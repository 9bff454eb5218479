"""The block formats, in one table: adding a format is a row here plus the kernel code that reads it.

Everything that names formats is derived from :data:`FORMATS`: :class:`BlockFormat` (page tables,
checkpoints), the config validation (kvstore.config, app.config), the quantizer registry
(kvstore.quant) and the kernels' code maps (kernels.reference, triton_quant, triton_decode,
cpu_decode). tests/test_formats.py holds today's codes as the compatibility contract: codes are
persisted in checkpoints and branched on by the kernels, so a row's ``code`` never changes.

A block's bytes are not in the table: a pool measures its slot layout on a probe quantization
(kvstore.block_storage), so scales, zero points and outlier channels are counted as the quantizer stores them.
Pure Python (no torch), so the app's settings can import it cheaply.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    """One storage format of a KV block.

    ``code``: the :class:`BlockFormat` value, persisted in checkpoints, and the Triton kernels' ``KIND``.
    ``bits``: bits per stored code (None: the model's own dtype); ``8 // bits`` codes share a byte.
    ``fidelity``: default share of a block's value the format keeps (TieredCacheConfig.fidelity),
    about 1 - its relative error on KV activations, so quantizing usually beats dropping.
    ``cpu_code``: the C++ decode kernel's ``enum Kind`` value (None for full precision, whose dtype
    picks the kind). ``native_from``: the CUDA compute capability computing on the format natively
    (None: everywhere; storage works on every device).
    """

    name: str
    code: int
    bits: int | None
    fidelity: float
    cpu_code: int | None = None
    native_from: tuple[int, int] | None = None

    @property
    def codes_per_byte(self) -> int:
        return 8 // (self.bits or 8)


FORMATS: tuple[Format, ...] = (
    Format("full", 0, None, 1.0),
    Format("int8", 1, 8, 0.99, cpu_code=3),  # asymmetric, ~0.5% error: near lossless
    Format("int4", 2, 4, 0.9, cpu_code=4),  # asymmetric, ~8%: the warm/cold workhorse (KIVI)
    Format("fp8", 3, 8, 0.97, cpu_code=5, native_from=(8, 9)),  # e4m3, absmax scale, ~2.5%
    Format("int2", 4, 2, 0.7, cpu_code=6),  # asymmetric, ~30%: the last step before dropping
)
QUANTIZED: tuple[Format, ...] = tuple(f for f in FORMATS if f.name != "full")
BY_NAME: dict[str, Format] = {f.name: f for f in FORMATS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
QUANTIZED_NAMES: tuple[str, ...] = tuple(f.name for f in QUANTIZED)


class _FormatEnum(enum.IntEnum):
    @property
    def kind(self) -> str:
        """Name used by kvstore.quant's registry and the configs (``"full"`` for full precision)."""
        return self.name.lower()

    @classmethod
    def from_kind(cls, kind: str) -> "BlockFormat":
        return cls[kind.upper()]


# How a block's K/V are stored: L1 hot = FULL, L2 warm = one of the quantized formats.
BlockFormat = _FormatEnum("BlockFormat", [(f.name.upper(), f.code) for f in FORMATS], module=__name__)
