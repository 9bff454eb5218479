"""Cache layers of TieredCache: the tiered full-attention layer and a rollback-able sliding layer.

:class:`TieredLayer` is transformers' cache layer for one full-attention layer, a thin facade over
parts with one job each: :class:`~kvstore.block_storage.BlockStorage` (pools, page table, summary),
:class:`~kvstore.compression.CompressionPolicy` (budget and format plan),
:class:`~kvstore.cold_index.ColdIndex` (blocks waiting in the cold tier),
:class:`~kvstore.exact_copies.ExactCopies` (full-precision copies of quantized blocks, read for questions),
:class:`~kvstore.layer_attention.BlockAttention` (reading the blocks) and kvstore.layer_state
(checkpoints, saved state). The parts see the owning cache only through
:class:`~kvstore.layer_context.LayerContext`.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import CacheLayerMixin, DynamicSlidingWindowLayer

from kvstore import layer_state
from kvstore.block_storage import BlockStorage, LayerGeometry, tensor_bytes
from kvstore.blocks import BlockFormat, BlockPool, PageTable
from kvstore.cold_index import ColdIndex
from kvstore.compression import CompressionPolicy
from kvstore.exact_copies import ExactCopies
from kvstore.config import TieredCacheConfig
from kvstore.layer_attention import BlockAttention
from kvstore.layer_context import LayerContext
from kvstore.layer_state import TieredLayerSnapshot
from kvstore.scoring import BlockScoringInputs, CombinedScorer


class TieredLayer(CacheLayerMixin):
    """KV of one full-attention layer, in blocks behind a page table, full precision or quantized.

    ``update`` appends the new tokens to full-precision blocks, then returns either the dense kept
    K/V (any attention implementation: exact when nothing was compressed) or, under the minutia
    attention, just the new tokens while :meth:`attend` reads the blocks itself. After an update it
    enforces the byte budget (if compression is on) by re-planning each block's format.
    """

    is_sliding = False
    is_compileable = False

    def __init__(self, layer_idx: int, settings: TieredCacheConfig, ctx: LayerContext) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.settings = settings
        self.ctx = ctx
        self.cumulative_length = 0
        self.block_size = settings.block_size
        self.policy = CompressionPolicy(settings, ctx)
        self.attention = BlockAttention(settings, ctx)
        self.storage: BlockStorage | None = None
        self.cold_index: ColdIndex | None = None
        self.exact_copies: ExactCopies | None = None
        self._compression_pending = False

    # ------------------------------------------------------------------------------------------
    # The parts' state, read where callers and tests look for it
    # ------------------------------------------------------------------------------------------

    @property
    def scorer(self) -> CombinedScorer:
        return self.policy.scorer

    @property
    def table(self) -> PageTable:
        return self.storage.table

    @property
    def pools(self) -> dict[int, BlockPool]:
        return self.storage.pools

    @property
    def cold(self) -> PageTable:
        """The cold index's rows (blocks waiting in the cold tier)."""
        return self.cold_index.table

    @property
    def summary(self):
        return self.storage.summary

    @property
    def outlier_idx(self) -> dict[str, torch.Tensor | None]:
        return self.storage.outlier_idx

    @property
    def recent_queries(self) -> torch.Tensor | None:
        return self.attention.recent_queries

    @property
    def last_scale(self) -> float | None:
        return self.attention.last_scale

    @property
    def batch(self) -> int:
        return self.storage.batch

    @property
    def n_heads(self) -> int:
        return self.storage.n_heads

    @property
    def head_dim(self) -> int:
        return self.storage.head_dim

    @property
    def value_dim(self) -> int:
        return self.storage.value_dim

    # ------------------------------------------------------------------------------------------
    # transformers' CacheLayerMixin
    # ------------------------------------------------------------------------------------------

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self._initialize(LayerGeometry.of(key_states, value_states))

    def _initialize(self, geometry: LayerGeometry) -> None:
        if self.cold_index is not None:
            self.cold_index.forget()
            self.exact_copies.forget()
        self.dtype, self.device = geometry.dtype, geometry.device
        self.storage = BlockStorage(geometry, self.settings)
        self.cold_index = ColdIndex(self.layer_idx, self.storage, self.settings, self.ctx)
        self.exact_copies = ExactCopies(self.layer_idx, self.storage, self.settings, self.ctx)
        self.attention = BlockAttention(self.settings, self.ctx)
        self.is_initialized = True

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._run_pending_compression()
        start = self.cumulative_length
        if key_states.shape[2]:
            self.attention.begin_chunk(start, self.storage.append(key_states, value_states, start))
            self.cumulative_length += key_states.shape[2]
        else:
            self.attention.begin_chunk(start, self.attention.chunk_blocks)
        self._compression_pending = self.settings.compress
        if self.ctx.sparse_attention:
            # attend() reads the blocks itself, then compresses (the chunk must stay intact until then).
            return key_states, value_states
        result = self.dense_kv()  # an independent copy: compressing now cannot change it
        self._run_pending_compression()
        return result

    def _run_pending_compression(self) -> None:
        """Peak KV = budget + the chunk just written: compression follows every update's attention."""
        if self._compression_pending and not self.ctx.compression_suspended:
            self._compression_pending = False
            self.compress()

    def get_mask_sizes(self, cache_position: torch.Tensor) -> tuple[int, int]:
        """Kept tokens plus the new ones; the offset makes the kept past visible to every query."""
        kept = self.kept_tokens()
        return kept + cache_position.shape[0], self.cumulative_length - kept

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_max_cache_shape(self) -> int:
        return -1

    def reset(self) -> None:
        if self.is_initialized:
            self._initialize(self.storage.geometry)
        self.cumulative_length = 0

    def offload(self) -> None:  # the tiers decide placement, not transformers' offloading
        pass

    def prefetch(self) -> None:
        pass

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("TieredCache does not support beam search (blocks are owned by one batch row)")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("TieredCache does not support batch expansion")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("TieredCache does not support batch selection")

    def crop(self, max_length: int) -> None:
        """Forget tokens from ``max_length`` on (negative: that many from the end), as DynamicLayer does."""
        if max_length < 0:
            max_length = self.cumulative_length + max_length
        if not self.is_initialized or max_length >= self.cumulative_length:
            return
        self.storage.crop(max_length)
        self.cold_index.keep_before(max_length)
        self.exact_copies.keep_before(max_length)
        self.cumulative_length = max_length

    # ------------------------------------------------------------------------------------------
    # Reading
    # ------------------------------------------------------------------------------------------

    def kept_tokens(self) -> int:
        return self.storage.kept_tokens() if self.is_initialized else 0

    def dense_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every kept token in logical order, dequantized: ``[B, H, kept, D]`` (what DynamicCache returns)."""
        return self.storage.dense_kv()

    def attend(
        self,
        query: torch.Tensor,
        key_chunk: torch.Tensor,
        value_chunk: torch.Tensor,
        scale: float,
        softcap: float | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention of the chunk's queries over the kept blocks, the summary and the chunk
        (:meth:`BlockAttention.attend`); cold blocks the queries want come back first, and during a
        question the quantized ones they want are read from their exact copies."""
        self.attention.check_no_padding(attention_mask, self.cumulative_length)
        if self.ctx.cold_tier is not None:
            n_past = self.attention.past_rows(self.storage)
            if len(self.cold_index):
                self.cold_index.recall_predicted(query, n_past)
                n_past = self.attention.past_rows(self.storage)  # recalled rows are past rows too
            self.exact_copies.upgrade(query, n_past)
        out = self.attention.attend(self.storage, query, key_chunk, value_chunk, scale, softcap, self.cumulative_length)
        self._run_pending_compression()
        return out

    def exact_dense_path(self, n_queries: int, attention_mask: torch.Tensor | None) -> bool:
        """Whether the minutia attention should hand this call to SDPA over :meth:`dense_kv`
        (:meth:`BlockAttention.exact_dense_path`)."""
        if not self.is_initialized:
            return False
        return self.attention.exact_dense_path(self.storage, n_queries, attention_mask, self.cumulative_length)

    def after_dense_attention(self, query: torch.Tensor, scale: float) -> None:
        """Bookkeeping of :meth:`attend` that still applies on the exact dense path."""
        self.attention.last_scale = scale
        self.attention.remember_queries(query, self.storage.dtype)
        self._run_pending_compression()

    # ------------------------------------------------------------------------------------------
    # Budget and compression
    # ------------------------------------------------------------------------------------------

    def full_precision_bytes(self) -> int:
        """What DynamicCache would hold for this layer: every token seen, K and V, source dtype."""
        return self.cumulative_length * self.full_precision_bytes_per_token()

    def full_precision_bytes_per_token(self) -> int:
        return self.storage.geometry.full_bytes_per_token() if self.is_initialized else 0

    def metadata_bytes(self) -> int:
        return self.storage.metadata_bytes(extra=self.attention.recent_queries)

    def payload_bytes(self) -> int:
        return self.storage.payload_bytes() if self.is_initialized else 0

    def kv_bytes(self) -> int:
        """Bytes this layer's KV occupies (used blocks + metadata), measured from tensor storage sizes."""
        return self.payload_bytes() + self.metadata_bytes() if self.is_initialized else 0

    def reserved_bytes(self) -> int:
        """Like :meth:`kv_bytes` but counting whole pool storage, free slots included."""
        if not self.is_initialized:
            return 0
        return self.storage.reserved_pool_bytes() + self.metadata_bytes()

    def budget(self) -> int:
        return self.policy.budget(self.full_precision_bytes(), self.full_precision_bytes_per_token())

    def modality_budgets(self) -> dict[int, int]:
        """Per-layer byte ceilings of the modalities whose policy sets one (code -> bytes)."""
        return self.policy.modality_budgets(self.budget())

    def scoring_inputs(self) -> BlockScoringInputs:
        return self.policy.scoring_inputs(self.storage, self.cumulative_length, self.attention.recent_queries,
                                          self.attention.last_scale)

    def compress(self, protect_from: int | None = None) -> bool:
        """Bring the layer under its budget and its modalities' policies (:meth:`CompressionPolicy.plan`),
        then carry the plan out: convert blocks, drop (or evict) the ones planned out. Returns whether
        anything changed."""
        if not self.is_initialized or len(self.table) == 0:
            return False
        storage = self.storage
        fixed = self.metadata_bytes() - storage.row_metadata_bytes() * len(storage.table)  # summary, queries, outliers
        new_format = self.policy.plan(
            storage, self.scoring_inputs(), self.budget(), self.kv_bytes(), fixed,
            self.cumulative_length if protect_from is None else protect_from,
        )
        if new_format is None:
            return False
        changed = new_format != storage.table.format
        self.exact_copies.keep(torch.nonzero(changed).flatten(), new_format[changed])
        for fmt in [BlockFormat.FULL] + [BlockFormat.from_kind(k) for k in self.settings.warm_kinds]:
            rows = torch.nonzero(changed & (new_format == int(fmt))).flatten()
            if rows.numel():
                storage.convert_rows(rows, fmt)
        dropped = new_format < 0
        if bool(dropped.any()):
            self.drop_rows(torch.nonzero(dropped).flatten())
        storage.compact(only_if_mostly_free=True)
        return True

    def convert_rows(self, rows: torch.Tensor, fmt: BlockFormat) -> None:
        """Re-store ``rows`` in pool ``fmt`` (quantizing from their current, dequantized content)."""
        self.storage.convert_rows(rows, fmt)

    def drop_rows(self, rows: torch.Tensor) -> None:
        """Fold the rows into the Global Summary and remove them from the page table.

        With a cold tier attached the rows' payloads go there too, and their key bounds and scores
        to the cold index, so a question can bring them back (:meth:`recall`).
        """
        if self.ctx.cold_tier is not None:
            self.cold_index.evict(rows)
        self.storage.absorb_rows(rows)

    def recall(self, blocks: torch.Tensor) -> int:
        """Bring the cold blocks among ``blocks`` (logical indices) back, and read the quantized ones from
        their exact copies (during a question); returns how many came back from the cold tier."""
        if not self.is_initialized:
            return 0
        back = self.cold_index.recall(blocks)
        self.exact_copies.upgrade_blocks(blocks)
        return back

    def compact_storage(self) -> None:
        """Shrink every pool to exactly its used blocks."""
        self.storage.compact()

    # ------------------------------------------------------------------------------------------
    # Checkpoints and saved state (kvstore.layer_state)
    # ------------------------------------------------------------------------------------------

    def snapshot(self) -> TieredLayerSnapshot | None:
        if not self.is_initialized:
            return None
        snap = layer_state.snapshot(self.storage, self.attention, self.cold_index, self.cumulative_length)
        snap.upgraded = len(self.exact_copies.upgraded)
        return snap

    def restore(self, snap: TieredLayerSnapshot | None) -> None:
        if snap is None:
            if self.is_initialized:
                self.reset()
            return
        self.exact_copies.undo(snap.upgraded)  # the low-bit rows back before the question's rows leave
        layer_state.restore(self.storage, self.attention, self.cold_index, snap)
        self.cumulative_length = snap.seen

    def keep_recalls(self, snap: TieredLayerSnapshot | None) -> None:
        """A checkpoint released: the blocks recalled since ``snap`` stay resident, the ones read from
        their exact copies stay at full precision (the next compression pass plans them)."""
        if snap is not None and self.is_initialized:
            self.cold_index.keep_recalls(snap.recalled)
            self.exact_copies.keep_upgrades(snap.upgraded)

    def state_dict(self) -> dict[str, Any]:
        """Everything this layer holds except block payloads (:meth:`block_payload`), on the CPU."""
        if not self.is_initialized:
            return {"initialized": False, "cumulative_length": self.cumulative_length}
        return layer_state.state_dict(self.storage, self.attention, self.cold_index, self.cumulative_length,
                                      self._compression_pending)

    def block_payload(self, row: int) -> dict[str, torch.Tensor]:
        """The stored tensors of page-table row ``row`` in its pool's format: ``[B, *slot shape]`` each."""
        return self.storage.block_payload(row)

    def cold_payload(self, row: int) -> dict[str, torch.Tensor]:
        """The stored tensors of cold-index row ``row``, read from the cold tier (not counted as a recall)."""
        return self.cold_index.payload(row)

    def load_state_dict(self, state: dict[str, Any], payloads: list[dict[str, torch.Tensor]],
                        device: torch.device | str = "cpu", cold_payloads: list[dict[str, torch.Tensor]] = ()) -> None:
        """Rebuild the layer from :meth:`state_dict` and one payload per row (pools come back packed)."""
        self.cumulative_length = int(state["cumulative_length"])
        if not state["initialized"]:
            self.is_initialized = False
            return
        self._initialize(layer_state.saved_geometry(state, device))
        layer_state.load_state_dict(self.storage, self.attention, self.cold_index, state, payloads,
                                    list(cold_payloads), self.layer_idx)
        self._compression_pending = bool(state["compression_pending"])


class SlidingWindowLayer(DynamicSlidingWindowLayer):
    """transformers' sliding-window layer plus checkpoint/rollback.

    Its update never writes into existing tensors (it concatenates and slices), so a snapshot is
    just references to the current tensors: nothing is copied.
    """

    def snapshot(self) -> tuple[Any, ...]:
        return (self.keys, self.values, self.cumulative_length, self.is_initialized)

    def restore(self, snap: tuple[Any, ...]) -> None:
        self.keys, self.values, self.cumulative_length, self.is_initialized = snap

    def kv_bytes(self) -> int:
        return tensor_bytes(self.keys, self.values) if self.is_initialized else 0

    def reserved_bytes(self) -> int:
        """Storage actually held: the window is a view into the last update's concatenation."""
        if not self.is_initialized:
            return 0
        return self.keys.untyped_storage().nbytes() + self.values.untyped_storage().nbytes()
