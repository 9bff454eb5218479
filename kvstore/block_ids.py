"""How KV blocks are named in block stores and tiers: one place, so every module spells them alike.

The names are stored (session manifests, cold-tier keys): never change a format here.
"""

from __future__ import annotations


def block_id(layer: int, block: int, fmt: int | None = None) -> str:
    """A kept block (``L2.b17``), or with its format code a cold-tier entry (``L2.b17.f2``)."""
    return f"L{layer}.b{block}" if fmt is None else f"L{layer}.b{block}.f{fmt}"


def cold_block_id(layer: int, block: int) -> str:
    """A saved session's copy of a block that waits in the cold tier (``L2.c17``)."""
    return f"L{layer}.c{block}"


def layer_record_id(layer: int, name: str) -> str:
    """A saved session's per-layer record (``L2.state``, ``L3.window``)."""
    return f"L{layer}.{name}"
