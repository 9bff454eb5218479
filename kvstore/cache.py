"""TieredCache: a transformers Cache for stock causal LMs with a compressed, tiered KV store.

Usage::

    cache = TieredCache(config=model.config, settings=TieredCacheConfig(compress=True, budget_ratio=0.25))
    use_minutia_attention(model)            # optional without compression, needed for dropping blocks
    out = model(input_ids, past_key_values=cache, use_cache=True)

Layer kinds follow the model config exactly like DynamicCache: sliding-window / chunked layers
(Gemma 3's local layers) keep transformers' sliding behaviour, every full-attention layer becomes a
:class:`~kvstore.layers.TieredLayer`. With compression off the logits equal DynamicCache's.

A live meeting session (app/live/session.py) drives one cache like this::

    # budget = max(0.25 x tokens seen, the full KV of 8192 tokens): below the floor compression only
    # keeps the floor (like a fixed byte budget, the best-measured policy); past it the ratio rules.
    settings = TieredCacheConfig(compress=True, budget_ratio=0.25, budget_floor_tokens=8192,
                                 drop_last_resort=True, hysteresis=0.05,
                                 modalities={"audio": ModalityPolicy(preferred="int8"),
                                             "video": ModalityPolicy(preferred="int4", budget_share=0.2)})
    cache = TieredCache(config=model.config, settings=settings)
    timeline = TimelineIndex()                                   # kvstore.timeline
    # ingestion, for each committed turn / slide text / prompt of n tokens at position p = cache.get_seq_length():
    cache.mark_modality((p, p + n), "audio")                     # before prefilling them (compression runs in it)
    cache.annotate([p], TokenFlag.SPEAKER_CHANGE)                # rare structural events only
    model(ids, past_key_values=cache)                            # chunked prefill, compresses as it goes
    timeline.add("audio", start_s, end_s, p, p + n, speaker=..., text=...)
    # a question about a moment ("the budget slide"):
    report = cache.promote_tokens(timeline.tokens_in(t0, t1))     # boost + pin those blocks
    cp = cache.checkpoint()                                      # question + answer tokens ...
    ...generate...
    cache.rollback(cp); timeline.truncate(cp.seq_length); cache.unpin()
    # dashboard:
    cache.stats()   # bytes_by_tier, bytes_by_modality, budget_bytes, full_precision_bytes, compression_ratio, tokens

Ingestion and questions must not run model forwards on one cache at the same time (one LLM thread).
Compression is suspended while a checkpoint is open, so new words prefilled during an answer would
be rolled back with it: queue them and prefill after the rollback.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import torch
from transformers.cache_utils import Cache
from transformers.configuration_utils import PreTrainedConfig

from kvstore.annotations import BlockPriorities, Modality, TokenAnnotations, TokenFlag
from kvstore.attention import MINUTIA_ATTENTION, bind_layer
from kvstore.config import TieredCacheConfig
from kvstore.blocks import BlockFormat
from kvstore.layers import SlidingWindowLayer, TieredLayer

if TYPE_CHECKING:
    from kvstore.cold import ColdTier

_checkpoint_ids = itertools.count()

TokenRanges = Sequence[tuple[int, int]]


@dataclass(frozen=True)
class PromotionReport:
    """Where the promoted blocks are, counted over (tiered layer, block) pairs.

    Full-precision and quantized blocks are read by the answer; cold ones can be recalled from the
    cold tier (:meth:`kvstore.manager.KVCacheManager.recall_tokens`); dropped ones survive only in
    the layer's summary.
    """

    blocks: int  # logical blocks requested
    full: int
    quantized: int
    dropped: int  # gone for good (only in the layer's summary)
    cold: int = 0  # on the cold tier (host / disk / Redis): recallable

    @property
    def readable_share(self) -> float:
        total = self.full + self.quantized + self.dropped + self.cold
        return (self.full + self.quantized) / total if total else 1.0


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
        self.priorities = BlockPriorities()
        self._checkpoints: list[CacheCheckpoint] = []
        self.cold_tier: "ColdTier | None" = None
        self.peak_device_bytes = 0  # tracked when settings.device_cap_bytes is set
        self.refused_recalls = 0  # cold blocks not recalled because the device cap had no room
        # Share of the device cap the budget follows; a controller (kvstore.control) moves it, else the watermark.
        self.budget_share: float | None = None
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
        if self.settings.device_cap_bytes is not None:
            self.peak_device_bytes = max(self.peak_device_bytes, self.device_bytes())
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

    @property
    def reads_sparsely(self) -> bool:
        """Whether a decode step reads only some resident blocks (``decode_top_k_blocks``)."""
        return self.settings.decode_top_k_blocks is not None

    @contextmanager
    def dense_reads(self) -> Iterator[None]:
        """Decode steps inside read every resident block (the reference a sparse step is compared with)."""
        saved = self.settings.decode_top_k_blocks
        self.settings.decode_top_k_blocks = None
        try:
            yield
        finally:
            self.settings.decode_top_k_blocks = saved

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
        self.priorities.truncate(-(-checkpoint.seq_length // self.settings.block_size))
        del self._checkpoints[position:]

    def note_refused_recalls(self, count: int) -> None:
        self.refused_recalls += count

    def checkpoint_length(self) -> int:
        """Tokens before the first open checkpoint (the meeting, without a question's tokens)."""
        return self._checkpoints[0].seq_length if self._checkpoints else self.get_seq_length()

    def release(self, checkpoint: CacheCheckpoint) -> None:
        """Keep what was added since ``checkpoint`` and forget the checkpoint (compression resumes)."""
        position = self._checkpoint_position(checkpoint)
        for layer, state in zip(self.layers, checkpoint.layer_states):
            if isinstance(layer, TieredLayer):
                layer.keep_recalls(state)  # recalled blocks stay resident
        del self._checkpoints[position:]

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

    def mark_modality(self, positions: torch.Tensor | list[int] | tuple[int, int], modality: Modality | str) -> None:
        """Tag tokens (a ``(start, end)`` range or explicit positions, past or upcoming) with their stream.

        Each modality follows its ``TieredCacheConfig.modalities`` policy; untagged tokens are "text".
        """
        if isinstance(positions, tuple) and len(positions) == 2:
            positions = torch.arange(int(positions[0]), int(positions[1]))
        self.annotations.set_modality(positions, Modality.parse(modality))

    def promote_tokens(self, token_ranges: TokenRanges, boost: float = 1.0, pin: bool = True) -> PromotionReport:
        """Query-aware promotion: raise the importance of the blocks holding ``token_ranges``.

        ``boost`` is added to those blocks' importance score from now on (max with earlier boosts);
        ``pin`` also keeps them in their current format and always reads them at decode until
        :meth:`unpin` (call it when the answer is done). Returns where the blocks are now.
        """
        from kvstore.timeline import blocks_of_ranges

        blocks = blocks_of_ranges(list(token_ranges), self.settings.block_size)
        self.priorities.promote(blocks, boost, pin)
        return self.block_residency(blocks)


    def unpin(self) -> None:
        """End the pins of :meth:`promote_tokens` (boosts stay); compression may move those blocks again."""
        self.priorities.unpin()

    # ------------------------------------------------------------------------------------------
    # Cold tier
    # ------------------------------------------------------------------------------------------

    def device_bytes(self) -> int:
        """KV bytes in device memory: every layer, plus the cold tier's staged blocks."""
        staged = 0
        if self.cold_tier is not None:
            from kvstore.placement import Tier

            staged = self.cold_tier.placement.tier_bytes()[Tier.DEVICE.value]
        return self.kv_bytes() + staged

    def watermark_budget_per_layer(self) -> int | None:
        """Each tiered layer's share of ``budget_share x device_cap_bytes`` (the watermark unless a controller
        set the share), after the sliding windows and the staging area (None without a cap): the share moves
        the keep / quantize / evict thresholds."""
        cap = self.settings.device_cap_bytes
        if cap is None:
            return None
        fixed = self.kv_bytes() - self.kv_bytes(include_sliding=False)
        if self.cold_tier is not None:
            fixed += self.cold_tier.placement.controller.cap_bytes
        share = self.settings.watermark if self.budget_share is None else self.budget_share
        return max(int((share * cap - fixed) / max(self.num_tiered_layers, 1)), 0)

    def device_room(self) -> int | None:
        """Bytes recalled blocks may still take (None without a cap): up to half the headroom above the
        watermark, so the question's and answer's own tokens still fit under the hard cap."""
        cap = self.settings.device_cap_bytes
        if cap is None:
            return None
        return int((1 + self.settings.watermark) / 2 * cap) - self.device_bytes()

    def attach_cold_tier(self, cold_tier: "ColdTier | None") -> None:
        """Evict blocks to ``cold_tier`` instead of dropping them (None: drop, the summary keeps their share)."""
        if self.cold_tier is not None and cold_tier is not self.cold_tier:
            self.cold_tier.close()
        self.cold_tier = cold_tier

    def block_residency(self, blocks: torch.Tensor) -> PromotionReport:
        full = quantized = dropped = cold = 0
        for layer in self.tiered_layers:
            if not layer.is_initialized:
                continue
            index = layer.table.block_index
            seen = blocks[blocks * layer.block_size < layer.cumulative_length]
            rows = torch.searchsorted(index, seen).clamp(max=max(len(index) - 1, 0))
            found = index[rows] == seen if len(index) else torch.zeros_like(seen, dtype=torch.bool)
            is_full = layer.table.format[rows[found]] == BlockFormat.FULL
            full += int(is_full.sum())
            quantized += int((~is_full).sum())
            in_cold = int(torch.isin(seen[~found], layer.cold.block_index).sum())
            cold += in_cold
            dropped += int((~found).sum()) - in_cold
        return PromotionReport(int(blocks.numel()), full, quantized, dropped, cold)

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
        """Dashboard numbers, all measured from the storage tensors: :func:`kvstore.report.kv_report`.

        ``bytes_by_tier``: L1 (full-precision blocks), L2 (quantized blocks), L3 (summaries of
        dropped blocks), ``metadata`` (page table, key bounds, scores), ``sliding`` (the window
        layers) and ``cold_<location>`` (the cold tier off the device). ``bytes_by_modality``: block
        bytes of each stream; ``modalities`` adds tokens seen / kept and bytes per format.
        ``compression_ratio`` = full-precision bytes / tiered KV bytes.
        """
        from kvstore.report import kv_report

        return kv_report(self).as_dict()
