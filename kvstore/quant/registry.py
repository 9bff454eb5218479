"""Quantizers by name, so configs can say ``warm_kinds: [int8, int4]``."""

from __future__ import annotations

from typing import Any, TypeVar

from kvstore.quant.base import GroupQuantizer

QUANTIZERS: dict[str, type[GroupQuantizer]] = {}

Q = TypeVar("Q", bound=type[GroupQuantizer])


def register_quantizer(cls: Q) -> Q:
    """Class decorator: make ``cls`` available under ``cls.kind``."""
    if not cls.kind:
        raise ValueError(f"{cls.__name__} has no kind")
    QUANTIZERS[cls.kind] = cls
    return cls


def get_quantizer(name: str, **options: Any) -> GroupQuantizer:
    """Build the quantizer registered as ``name`` with dataclass ``options`` (group_size, axis, ...)."""
    try:
        return QUANTIZERS[name](**options)
    except KeyError:
        raise KeyError(f"unknown quantizer {name!r}; known: {sorted(QUANTIZERS)}") from None
