"""TieredCache: a transformers Cache for stock causal LMs with a compressed, tiered KV store.

Usage::

    cache = TieredCache(config=model.config, settings=TieredCacheConfig(compress=True, budget_ratio=0.25))
    use_minutia_attention(model)            # optional without compression, needed for dropping blocks
    out = model(input_ids, past_key_values=cache, use_cache=True)

Layer kinds follow the model config exactly like DynamicCache: sliding-window / chunked layers
(Gemma 3's local layers) keep transformers' sliding behaviour, every full-attention layer becomes a
:class:`~kvstore.layers.TieredLayer`. With compression off the logits equal DynamicCache's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers.cache_utils import Cache
from transformers.configuration_utils import PreTrainedConfig

from kvstore.annotations import TokenAnnotations, TokenFlag
from kvstore.attention import MINUTIA_ATTENTION, bind_layer
from kvstore.config import TieredCacheConfig
from kvstore.layers import SlidingWindowLayer, TieredLayer

_checkpoint_ids = itertools.count()


@dataclass(frozen=True)
class CacheCheckpoint:
    """A point the cache can return to (e.g. before a question is asked)."""

    ident: int
    seq_length: int
    layer_states: tuple[Any, ...]


class TieredCache(Cache):
    """Cache whose full-attention layers are tiered (blocks, quantization, drop-with-summary)."""

    def __init__(
        self,
        config: PreTrainedConfig,
        settings: TieredCacheConfig | None = None,
        **overrides: Any,
    ) -> None:
        settings = settings or TieredCacheConfig()
        if overrides:
            settings = replace(settings, **overrides)
        self.settings = settings
        self.text_config = config.get_text_config(decoder=True)
        self.annotations = TokenAnnotations()
        self._checkpoints: list[CacheCheckpoint] = []
        layers: list[Any] = []
        for layer_idx, layer_type in enumerate(self._layer_types(self.text_config)):
            if layer_type in ("sliding_attention", "chunked_attention"):
                window = getattr(self.text_config, "sliding_window", None) or getattr(
                    self.text_config, "attention_chunk_size", None
                )
                layers.append(SlidingWindowLayer(sliding_window=window))
            else:
                layers.append(TieredLayer(layer_idx, settings, self))
        super().__init__(layers=layers)

    @staticmethod
    def _layer_types(text_config: PreTrainedConfig) -> list[str]:
        """Same rule as DynamicCache(config=...), so both caches build the same layer kinds."""
        sliding_window = getattr(text_config, "sliding_window", None) or getattr(text_config, "attention_chunk_size", None)
        layer_types = getattr(text_config, "layer_types", None)
        if layer_types is None:
            kind = "sliding_attention" if sliding_window is not None else "full_attention"
            layer_types = [kind] * text_config.num_hidden_layers
        if hasattr(text_config, "num_kv_shared_layers"):
            layer_types = layer_types[: -text_config.num_kv_shared_layers]
        return list(layer_types)

    # ------------------------------------------------------------------------------------------
    # transformers interface
    # ------------------------------------------------------------------------------------------

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[layer_idx]
        keys, values = layer.update(key_states, value_states, cache_kwargs)
        if isinstance(layer, TieredLayer) and self.sparse_attention:
            bind_layer(layer_idx, layer, keys)
        else:
            bind_layer(layer_idx, None, None)
        return keys, values

    @property
    def sparse_attention(self) -> bool:
        """Whether the model currently runs the minutia attention (read at every update)."""
        return getattr(self.text_config, "_attn_implementation", None) == MINUTIA_ATTENTION

    @property
    def tiered_layers(self) -> list[TieredLayer]:
        return [layer for layer in self.layers if isinstance(layer, TieredLayer)]

    @property
    def num_tiered_layers(self) -> int:
        return len(self.tiered_layers)

    # ------------------------------------------------------------------------------------------
    # Checkpoint / rollback
    # ------------------------------------------------------------------------------------------

    @property
    def compression_suspended(self) -> bool:
        """Compression waits while a checkpoint is open, so that rollback is exact and copy-free."""
        return bool(self._checkpoints)

    def checkpoint(self) -> CacheCheckpoint:
        """Remember the current state; tokens added afterwards can be removed with :meth:`rollback`."""
        states = tuple(layer.snapshot() for layer in self.layers)
        cp = CacheCheckpoint(next(_checkpoint_ids), self.get_seq_length(), states)
        self._checkpoints.append(cp)
        return cp

    def rollback(self, checkpoint: CacheCheckpoint) -> None:
        """Return to ``checkpoint`` (dropping it and any later checkpoint), e.g. after answering."""
        position = self._checkpoint_position(checkpoint)
        for layer, state in zip(self.layers, checkpoint.layer_states):
            layer.restore(state)
        self.annotations.truncate(checkpoint.seq_length)
        del self._checkpoints[position:]

    def release(self, checkpoint: CacheCheckpoint) -> None:
        """Keep what was added since ``checkpoint`` and forget the checkpoint (compression resumes)."""
        del self._checkpoints[self._checkpoint_position(checkpoint):]

    def _checkpoint_position(self, checkpoint: CacheCheckpoint) -> int:
        for i, cp in enumerate(self._checkpoints):
            if cp.ident == checkpoint.ident:
                return i
        raise ValueError("unknown or already released checkpoint")

    # ------------------------------------------------------------------------------------------
    # Annotations, compression, accounting
    # ------------------------------------------------------------------------------------------

    def annotate(self, positions: torch.Tensor | list[int], flags: TokenFlag | int) -> None:
        """Mark token positions (past or upcoming) with structural flags for the importance score."""
        self.annotations.mark(positions, int(flags))

    def compress(self) -> bool:
        """Enforce the budget now on every tiered layer (normally done after each update)."""
        if self.compression_suspended:
            return False
        changed = False
        for layer in self.tiered_layers:
            changed |= layer.compress()
        return changed

    def compact_storage(self) -> None:
        """Shrink every block pool to its used blocks (gives memory back after heavy compression)."""
        for layer in self.tiered_layers:
            layer.compact_storage()

    def kv_bytes(self, include_sliding: bool = True) -> int:
        """Bytes of KV held (used blocks, metadata, summaries; sliding windows if asked)."""
        return sum(
            layer.kv_bytes() for layer in self.layers if include_sliding or isinstance(layer, TieredLayer)
        )

    def reserved_bytes(self, include_sliding: bool = True) -> int:
        """Bytes of storage allocated, free pool slots included."""
        return sum(
            layer.reserved_bytes() for layer in self.layers if include_sliding or isinstance(layer, TieredLayer)
        )

    def full_precision_bytes(self) -> int:
        """Bytes the tiered layers would hold uncompressed (DynamicCache's footprint for them)."""
        return sum(layer.full_precision_bytes() for layer in self.tiered_layers)

    def budget_bytes(self) -> int:
        return sum(layer.budget() for layer in self.tiered_layers)

    def stats(self) -> dict[str, Any]:
        return {
            "seq_length": self.get_seq_length(),
            "kv_bytes": self.kv_bytes(),
            "tiered_kv_bytes": self.kv_bytes(include_sliding=False),
            "full_precision_bytes": self.full_precision_bytes(),
            "layers": [layer.stats() for layer in self.layers],
        }
