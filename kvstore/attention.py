"""The ``minutia_sparse`` attention function for transformers' AttentionInterface.

A stock model calls ``past_key_values.update(k, v, layer_idx)`` and then the registered attention
function with what update returned. For tiered layers TieredCache returns the chunk's own K/V
unchanged and binds (thread-locally) the layer to exactly those tensor objects; this function finds
the binding, and the layer computes attention over its kept blocks (read per block, dequantized on
the fly, top-k selected at decode), the summary of dropped blocks, and the causal chunk, merged by
log-sum-exp. Every other call (sliding-window layers, no cache, a different cache) goes to SDPA,
with the masks transformers builds for SDPA.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from kvstore.layers import TieredLayer

MINUTIA_ATTENTION = "minutia_sparse"

_bindings = threading.local()


def bind_layer(layer_idx: int, layer: "TieredLayer | None", key: torch.Tensor | None) -> None:
    """Record that the next attention call of ``layer_idx`` with ``key`` belongs to ``layer``."""
    table = getattr(_bindings, "table", None)
    if table is None:
        table = _bindings.table = {}
    if layer is None:
        table.pop(layer_idx, None)
    else:
        table[layer_idx] = (layer, key)


def bound_layer(layer_idx: int | None, key: torch.Tensor) -> "TieredLayer | None":
    table = getattr(_bindings, "table", None)
    if table is None or layer_idx is None or layer_idx not in table:
        return None
    layer, bound_key = table[layer_idx]
    return layer if bound_key is key else None


def minutia_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """AttentionInterface entry point: ``[B, Q, Hq, D]`` output, no attention weights."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    layer = bound_layer(getattr(module, "layer_idx", None), key)
    if layer is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, softcap=softcap, **kwargs
        )
    if layer.exact_dense_path(query.shape[2], attention_mask):
        # Nothing compressed and compression off: the same SDPA call DynamicCache's layer would get
        # (bitwise-equal logits; two correct fp32 attention implementations differ by ~1e-5 on real
        # models, so the reference path below cannot promise DynamicCache's exact logits).
        keys, values = layer.dense_kv()
        out, _ = sdpa_attention_forward(
            module, query, keys, values, attention_mask, dropout=dropout, scaling=scaling, softcap=softcap, **kwargs
        )
        layer.after_dense_attention(query, scaling if scaling is not None else query.shape[-1] ** -0.5)
        return out, None
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = layer.attend(query, key, value, scale, softcap, attention_mask)
    return out.transpose(1, 2).contiguous(), None


def register_minutia_attention() -> str:
    """Register the attention function (and SDPA's mask builder under the same name); idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(MINUTIA_ATTENTION, minutia_attention_forward)
    AttentionMaskInterface.register(MINUTIA_ATTENTION, sdpa_mask)
    return MINUTIA_ATTENTION


def use_minutia_attention(model: Any) -> None:
    """Switch a loaded transformers model to the minutia attention."""
    register_minutia_attention()
    model.set_attn_implementation(MINUTIA_ATTENTION)
