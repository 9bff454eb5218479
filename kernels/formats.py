"""The block formats, in one table: adding a format is a row here plus the kernel code that reads it.

Everything that names formats is derived from :data:`FORMATS`: :class:`BlockFormat` (page tables,
checkpoints), the config validation (kvstore.config, app.platform.config), the quantizer registry
(kvstore.quant) and the kernels' code maps (kernels.reference, triton_quant, triton_decode,
cpu_decode). tests/test_formats.py holds today's codes as the compatibility contract: codes are
persisted in checkpoints and branched on by the kernels, so a row's ``code`` never changes.

A block's bytes are not in the table: a pool measures its slot layout on a probe quantization
(kvstore.block_storage), so scales, zero points and outlier channels are counted as the quantizer stores them.

A split format (``parts``) stores a block's keys as one codec's codes and its values as another's: the kernels
see two ordinary quantized tensors (each carries its own kind), so a split row needs no kernel code. Keys carry
most of a low-bit cache's loss (bench/kv_formats.py: INT2 keys with exact values lose two to four times what
INT2 values with exact keys do), so ``k4v2`` spends INT4's bits on keys and INT2's on values.

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
    (None: everywhere; storage works on every device). ``parts``: (key codec, value codec) of a split
    format, which has no codes of its own (``bits`` and ``cpu_code`` None).
    """

    name: str
    code: int
    bits: int | None
    fidelity: float
    cpu_code: int | None = None
    native_from: tuple[int, int] | None = None
    parts: tuple[str, str] | None = None

    @property
    def codes_per_byte(self) -> int:
        if self.parts:
            raise ValueError(f"{self.name} stores two codecs' codes: ask its key_codec and value_codec")
        return 8 // (self.bits or 8)

    @property
    def key_codec(self) -> str:
        """The codec (a row without parts) that stores this format's keys."""
        return self.parts[0] if self.parts else self.name

    @property
    def value_codec(self) -> str:
        return self.parts[1] if self.parts else self.name


FORMATS: tuple[Format, ...] = (
    Format("full", 0, None, 1.0),
    Format("int8", 1, 8, 0.99, cpu_code=3),  # asymmetric, ~0.5% error: near lossless
    Format("int4", 2, 4, 0.9, cpu_code=4),  # asymmetric, ~8%: the warm/cold workhorse (KIVI)
    Format("fp8", 3, 8, 0.97, cpu_code=5, native_from=(8, 9)),  # e4m3, absmax scale, ~2.5%
    Format("int2", 4, 2, 0.7, cpu_code=6),  # asymmetric, ~30%: the last step before dropping
    Format("k4v2", 5, None, 0.83, parts=("int4", "int2")),  # INT4 keys, INT2 values: INT2's loss at 4/5 of INT4's bytes
)
QUANTIZED: tuple[Format, ...] = tuple(f for f in FORMATS if f.name != "full")
# The quantized formats with codes of their own: what the kernels quantize, pack and branch on.
CODECS: tuple[Format, ...] = tuple(f for f in QUANTIZED if f.parts is None)
CODEC_NAMES: tuple[str, ...] = tuple(f.name for f in CODECS)
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
