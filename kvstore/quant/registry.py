"""Quantizers by name, so configs can say ``warm_kinds: [int8, int4]``: one per codec row of kernels.formats (a
split format such as ``k4v2`` uses two of them, one for keys and one for values: kvstore.block_storage).

Every format quantizes group-wise through the kernels (:class:`GroupQuantizer`); a row only sets the
class's ``kind`` and ``bits``, so the registry is built from the table and a new format needs no module here.
"""

from __future__ import annotations

from typing import Any, TypeVar

from kernels.formats import BY_NAME, CODECS, Format
from kvstore.quant.base import GroupQuantizer

Q = TypeVar("Q", bound=type[GroupQuantizer])


def quantizer_class(fmt: Format) -> type[GroupQuantizer]:
    """``Int8Quantizer`` & co.: the frozen dataclass GroupQuantizer with the row's kind and bits."""
    name = fmt.name.capitalize() + "Quantizer"
    return type(name, (GroupQuantizer,), {"kind": fmt.name, "bits": fmt.bits, "__module__": __name__, "__qualname__": name})


QUANTIZERS: dict[str, type[GroupQuantizer]] = {f.name: quantizer_class(f) for f in CODECS}
globals().update({cls.__name__: cls for cls in QUANTIZERS.values()})  # module attributes, so instances pickle


def register_quantizer(cls: Q) -> Q:
    """Class decorator: serve the table's format ``cls.kind`` with ``cls`` (a quantizer that is not a plain group one)."""
    if cls.kind not in BY_NAME or BY_NAME[cls.kind] not in CODECS:
        raise ValueError(f"{cls.__name__}: {cls.kind!r} is not a codec of kernels.formats")
    QUANTIZERS[cls.kind] = cls
    return cls


def get_quantizer(name: str, **options: Any) -> GroupQuantizer:
    """Build the quantizer registered as ``name`` with dataclass ``options`` (group_size, axis, ...)."""
    try:
        return QUANTIZERS[name](**options)
    except KeyError:
        raise KeyError(f"unknown quantizer {name!r}; known: {sorted(QUANTIZERS)}") from None
