"""Cache layers of TieredCache: the tiered full-attention layer and a rollback-able sliding layer."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import torch
from transformers.cache_utils import CacheLayerMixin, DynamicSlidingWindowLayer

from kernels import dispatch as ops  # Triton on CUDA, the torch reference elsewhere
from kernels.reference import GlobalSummary, PagedSource, QuantizedTensor
from kvstore.annotations import Modality
from kvstore.blocks import HEAD_MAJOR, BlockFormat, BlockPool, PageTable, SlotSpec
from kvstore.config import TieredCacheConfig
from kvstore.quant import get_quantizer
from kvstore.scoring import DROP, BlockScoringInputs, CombinedScorer, PositionScorer, TierOption, fewest_drops, plan_tiers
from kvstore.stores.base import unpack_block

if TYPE_CHECKING:
    from kvstore.annotations import BlockPriorities, TokenAnnotations
    from kvstore.cold import ColdTier


class CacheOwner(Protocol):
    """What a layer reads from the cache that holds it (kvstore.cache.TieredCache, which imports this module,
    never the other way round)."""

    annotations: TokenAnnotations
    priorities: BlockPriorities
    cold_tier: ColdTier | None
    refused_recalls: int

    @property
    def sparse_attention(self) -> bool: ...

    @property
    def num_tiered_layers(self) -> int: ...

    @property
    def compression_suspended(self) -> bool: ...

    def checkpoint_length(self) -> int: ...

    def watermark_budget_per_layer(self) -> int | None: ...

    def device_room(self) -> int | None: ...


def _select_rows(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``index_select`` on dim 0 that also works for float8 on CPU (via a byte view)."""
    if t.element_size() == 1 and t.is_floating_point():
        return t.view(torch.uint8).index_select(0, index).view(t.dtype)
    return t.index_select(0, index)


def _tensor_bytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


@dataclass
class TieredLayerSnapshot:
    """What a tiered layer needs to undo everything appended after a checkpoint.

    Compression is suspended while a checkpoint is open, so rows before ``rows`` are untouched
    except the tail block, whose fill and key bounds are saved; scores are small and copied whole.
    """

    rows: int
    seen: int
    tail_fill: int | None
    tail_key_min: torch.Tensor | None
    tail_key_max: torch.Tensor | None
    attention_mass: torch.Tensor
    observations: torch.Tensor
    summary: GlobalSummary
    recent_queries: torch.Tensor | None
    block_index: torch.Tensor
    recalled: int


class TieredLayer(CacheLayerMixin):
    """KV of one full-attention layer, in blocks behind a page table, full precision or quantized.

    ``update`` appends the new tokens to full-precision blocks, then returns either the dense kept
    K/V (any attention implementation: exact when nothing was compressed) or, under the minutia
    attention, just the new tokens while :meth:`attend` reads the blocks itself. After an update it
    enforces the byte budget (if compression is on) by re-planning each block's format.
    """

    is_sliding = False
    is_compileable = False

    def __init__(self, layer_idx: int, settings: TieredCacheConfig, owner: CacheOwner) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.settings = settings
        self.owner = owner
        self.cumulative_length = 0
        self.block_size = settings.block_size
        self.scorer = CombinedScorer(
            weights=settings.weights,
            position=PositionScorer(sink_tokens=settings.sink_tokens, recent_tokens=settings.recent_tokens),
        )
        self.last_scale: float | None = None
        self._chunk_start = 0
        self._chunk_blocks: torch.Tensor | None = None
        self._compression_pending = False

    # ------------------------------------------------------------------------------------------
    # Initialisation and storage
    # ------------------------------------------------------------------------------------------

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.batch, self.n_heads, _, self.head_dim = key_states.shape
        self.value_dim = value_states.shape[-1]
        bs = self.block_size
        self._forget_cold()
        self.table = self._new_table()
        # Blocks evicted to the owner's cold tier (kvstore.cold): same columns, slots unused.
        self.cold = self._new_table()
        self._recalled: list[PageTable] = []  # cold rows brought back while a checkpoint is open
        self.pools: dict[int, BlockPool] = {
            BlockFormat.FULL: BlockPool(
                {
                    "k": SlotSpec((bs, self.n_heads, self.head_dim), self.dtype),
                    "v": SlotSpec((bs, self.n_heads, self.value_dim), self.dtype),
                },
                self.device,
            )
        }
        self.key_quantizers = {}
        self.value_quantizers = {}
        for kind in self.settings.warm_kinds:
            fmt = BlockFormat.from_kind(kind)
            base = get_quantizer(kind, group_size=self.settings.group_size, param_dtype=self.settings.param_dtype)
            self.key_quantizers[fmt] = base.for_keys(token_axis=1)  # block layout [n, bs, H, D]
            self.value_quantizers[fmt] = base.for_values()
            self.pools[fmt] = BlockPool(self._quantized_specs(fmt), self.device)
        self.outlier_idx: dict[str, torch.Tensor | None] = {"k": None, "v": None}
        self.summary = GlobalSummary.empty(self.batch, self.n_heads, self.head_dim, self.device)
        self.recent_queries: torch.Tensor | None = None
        self.is_initialized = True

    def _new_table(self) -> PageTable:
        table = PageTable(self.batch)
        bound_shape = (self.batch, self.n_heads, self.head_dim)
        table.add_column("key_min", bound_shape, self.dtype, device=self.device)
        table.add_column("key_max", bound_shape, self.dtype, device=self.device)
        table.add_column("attention_mass", (self.batch, self.n_heads), torch.float32)
        table.add_column("observations", (self.batch, self.n_heads), torch.float32)
        return table

    def _outlier_probe(self, width: int) -> torch.Tensor | None:
        n = min(self.settings.outlier_channels, width)
        if n <= 0:
            return None
        return torch.arange(n).view(1, n).expand(self.n_heads, n)

    def _quantized_specs(self, fmt: BlockFormat) -> dict[str, SlotSpec]:
        """Slot layout of a quantized pool, read off a probe quantization of one empty block."""
        specs: dict[str, SlotSpec] = {}
        for prefix, quantizer, width in (
            ("k", self.key_quantizers[fmt], self.head_dim),
            ("v", self.value_quantizers[fmt], self.value_dim),
        ):
            probe = torch.zeros(1, self.block_size, self.n_heads, width, dtype=self.dtype)
            idx = self._outlier_probe(width)
            qt = quantizer.quantize(probe, None if idx is None else ops.outlier_index_for(idx, 4, 2))
            # Per-token value params head-major: the decode kernels read a (block, head)'s params as one run.
            layout = HEAD_MAJOR if prefix == "v" and quantizer.axis % 4 == 3 else None
            specs[f"{prefix}_data"] = SlotSpec(tuple(qt.data.shape[1:]), qt.data.dtype)
            specs[f"{prefix}_scale"] = SlotSpec(tuple(qt.scale.shape[1:]), qt.scale.dtype, layout)
            if qt.zero is not None:
                specs[f"{prefix}_zero"] = SlotSpec(tuple(qt.zero.shape[1:]), qt.zero.dtype, layout)
            if qt.outlier_values is not None:
                specs[f"{prefix}_outliers"] = SlotSpec(tuple(qt.outlier_values.shape[1:]), qt.outlier_values.dtype)
        return specs

    def _paged_quantized(self, fmt: int, prefix: str) -> QuantizedTensor:
        """The whole pool of ``fmt`` seen as one paged QuantizedTensor (nothing is copied)."""
        pool = self.pools[fmt]
        quantizer = (self.key_quantizers if prefix == "k" else self.value_quantizers)[fmt]
        width = self.head_dim if prefix == "k" else self.value_dim
        group = math.gcd(quantizer.group_size, self.block_size if prefix == "k" else width)
        idx = self.outlier_idx[prefix]
        return QuantizedTensor(
            data=pool.tensors[f"{prefix}_data"],
            scale=pool.tensors[f"{prefix}_scale"],
            zero=pool.tensors.get(f"{prefix}_zero"),
            kind=quantizer.kind,
            axis=quantizer.axis % 4,
            group_size=group,
            shape=(pool.capacity, self.block_size, self.n_heads, width),
            dtype=self.dtype,
            outlier_idx=None if idx is None else ops.outlier_index_for(idx, 4, 2),
            outlier_values=pool.tensors.get(f"{prefix}_outliers"),
        )

    # ------------------------------------------------------------------------------------------
    # transformers' CacheLayerMixin
    # ------------------------------------------------------------------------------------------

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._run_pending_compression()
        self._chunk_start = self.cumulative_length
        self._append(key_states, value_states)
        self._compression_pending = self.settings.compress
        if self.owner.sparse_attention:
            # attend() reads the blocks itself, then compresses (the chunk must stay intact until then).
            return key_states, value_states
        result = self.dense_kv()  # an independent copy: compressing now cannot change it
        self._run_pending_compression()
        return result

    def _run_pending_compression(self) -> None:
        """Peak KV = budget + the chunk just written: compression follows every update's attention."""
        if self._compression_pending and not self.owner.compression_suspended:
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
            self.lazy_initialization(
                torch.zeros(self.batch, self.n_heads, 0, self.head_dim, dtype=self.dtype, device=self.device),
                torch.zeros(self.batch, self.n_heads, 0, self.value_dim, dtype=self.dtype, device=self.device),
            )
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
        starts = self.table.block_index * self.block_size
        ends = starts + self.table.fill
        cut = ends > max_length
        if (self.table.format[cut] != BlockFormat.FULL).any():
            raise ValueError("cannot crop into compressed blocks")
        keep = starts < max_length
        if len(self.cold):
            self.cold.keep(self.cold.block_index * self.block_size < max_length)
        self._free_rows(torch.nonzero(~keep).flatten())
        self.table.keep(keep)
        if len(self.table) and int(ends[keep][-1]) > max_length:
            last = len(self.table) - 1
            self.table.fill[last] = max_length - int(self.table.block_index[last]) * self.block_size
            self._refresh_bounds(torch.tensor([last]))
        self.cumulative_length = max_length

    # ------------------------------------------------------------------------------------------
    # Writing and reading blocks
    # ------------------------------------------------------------------------------------------

    def kept_tokens(self) -> int:
        return self.table.token_count() if self.is_initialized else 0

    def _append(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Write new tokens into full-precision blocks (filling the tail block first)."""
        n_new = key_states.shape[2]
        if n_new == 0:
            return
        bs = self.block_size
        positions = torch.arange(self.cumulative_length, self.cumulative_length + n_new)
        blocks = positions // bs
        offsets = positions % bs
        first_block, last_block = int(blocks[0]), int(blocks[-1])
        reuse_tail = len(self.table) > 0 and int(self.table.block_index[-1]) == first_block
        if reuse_tail and int(self.table.format[-1]) != BlockFormat.FULL:
            raise RuntimeError("the partially filled tail block must be full precision")
        new_ids = torch.arange(first_block + (1 if reuse_tail else 0), last_block + 1)
        if new_ids.numel():
            slots = self.pools[BlockFormat.FULL].alloc(new_ids.numel() * self.batch).view(-1, self.batch)
            inf = torch.full((new_ids.numel(), self.batch, self.n_heads, self.head_dim), math.inf, dtype=self.dtype,
                             device=self.device)
            self.table.append(new_ids, BlockFormat.FULL, slots, torch.zeros(new_ids.numel(), dtype=torch.long),
                              key_min=inf, key_max=-inf)
        first_row = len(self.table) - (last_block - first_block + 1)
        rows = first_row + (blocks - first_block)  # [T]
        slot_bt = self.table.slot[rows].t().to(self.device)  # [B, T]
        offsets_bt = offsets.to(self.device).view(1, -1).expand_as(slot_bt)
        pool = self.pools[BlockFormat.FULL]
        pool.tensors["k"][slot_bt, offsets_bt] = key_states.transpose(1, 2).to(self.dtype)
        pool.tensors["v"][slot_bt, offsets_bt] = value_states.transpose(1, 2).to(self.dtype)
        self.table.fill.scatter_reduce_(0, rows, offsets + 1, reduce="amax")
        token_keys = key_states.permute(2, 0, 1, 3).to(self.dtype)  # [T, B, H, D]
        index = rows.to(self.device).view(-1, 1, 1, 1).expand_as(token_keys)
        self.table.columns["key_min"].scatter_reduce_(0, index, token_keys, reduce="amin")
        self.table.columns["key_max"].scatter_reduce_(0, index, token_keys, reduce="amax")
        self._chunk_blocks = blocks
        self.cumulative_length += n_new

    def _refresh_bounds(self, rows: torch.Tensor) -> None:
        keys, _ = self._rows_dense(rows)  # [n, B, bs, H, D]
        valid = torch.arange(self.block_size).view(1, -1) < self.table.fill[rows].view(-1, 1)
        valid = valid.to(self.device).view(-1, 1, self.block_size, 1, 1)
        self.table.columns["key_min"][rows] = keys.masked_fill(~valid, math.inf).amin(dim=2)
        self.table.columns["key_max"][rows] = keys.masked_fill(~valid, -math.inf).amax(dim=2)

    def _rows_dense(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the given rows, dequantized: ``[n, B, block_size, H, D]`` each."""
        n = int(rows.numel())
        keys = torch.empty(n, self.batch, self.block_size, self.n_heads, self.head_dim, dtype=self.dtype,
                           device=self.device)
        values = torch.empty(n, self.batch, self.block_size, self.n_heads, self.value_dim, dtype=self.dtype,
                             device=self.device)
        formats = self.table.format[rows]
        for fmt in formats.unique().tolist():
            where = torch.nonzero(formats == fmt).flatten()
            slots = self.table.slot[rows[where]]  # [m, B]
            target = where.to(self.device)
            if fmt == BlockFormat.FULL:
                keys[target] = self.pools[fmt].read("k", slots)
                values[target] = self.pools[fmt].read("v", slots)
            else:
                for prefix, out in (("k", keys), ("v", values)):
                    dense = self._dequantize_slots(self._paged_quantized(fmt, prefix), slots.flatten())
                    out[target] = dense.view(len(where), self.batch, *dense.shape[1:])
        return keys, values

    def _dequantize_slots(self, paged: QuantizedTensor, slots: torch.Tensor) -> torch.Tensor:
        """Dequantize whole blocks ``[m, block_size, H, D]`` of a paged quantized pool."""
        index = slots.to(self.device)
        picked = QuantizedTensor(
            data=_select_rows(paged.data, index),
            scale=paged.scale.index_select(0, index),
            zero=None if paged.zero is None else paged.zero.index_select(0, index),
            kind=paged.kind,
            axis=paged.axis,
            group_size=paged.group_size,
            shape=(int(index.numel()), *paged.shape[1:]),
            dtype=paged.dtype,
            outlier_idx=paged.outlier_idx,
            outlier_values=None if paged.outlier_values is None else paged.outlier_values.index_select(0, index),
        )
        return ops.dequantize(picked)

    def dense_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every kept token in logical order, dequantized: ``[B, H, kept, D]`` (what DynamicCache returns)."""
        n_rows = len(self.table)
        if n_rows == 0:
            empty = torch.zeros(self.batch, self.n_heads, 0, self.head_dim, dtype=self.dtype, device=self.device)
            return empty, empty.clone()
        if bool((self.table.format == BlockFormat.FULL).all()):
            pool = self.pools[BlockFormat.FULL]
            keys = pool.read("k", self.table.slot)
            values = pool.read("v", self.table.slot)
        else:
            keys, values = self._rows_dense(torch.arange(n_rows))
        kept = self.kept_tokens()  # only the last row may be partially filled
        keys = keys.permute(1, 3, 0, 2, 4).reshape(self.batch, self.n_heads, n_rows * self.block_size, -1)
        values = values.permute(1, 3, 0, 2, 4).reshape(self.batch, self.n_heads, n_rows * self.block_size, -1)
        return keys[:, :, :kept], values[:, :, :kept]

    def _free_rows(self, rows: torch.Tensor) -> None:
        for row in rows.tolist():
            self.pools[int(self.table.format[row])].free(self.table.slot[row])

    # ------------------------------------------------------------------------------------------
    # Attention (minutia_sparse)
    # ------------------------------------------------------------------------------------------

    def attend(
        self,
        query: torch.Tensor,
        key_chunk: torch.Tensor,
        value_chunk: torch.Tensor,
        scale: float,
        softcap: float | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention of the chunk's queries ``[B, Hq, Q, D]`` over kept past blocks + summary + the chunk.

        The past (tokens before the chunk) is visible to every query; the chunk is causal. At decode
        (``Q == 1``) with ``decode_top_k_blocks`` only the best Quest-scored blocks are read (sinks,
        recent window and the tail always). Attention mass is accumulated into the block scores.
        """
        bs = self.block_size
        chunk_start = self._chunk_start
        n_queries = query.shape[2]
        self.last_scale = scale
        self._check_no_padding(attention_mask)
        if self.owner.cold_tier is not None and len(self.cold):
            self._recall_predicted(query, int((self.table.block_index * bs < chunk_start).sum()))
        starts = self.table.block_index * bs
        n_past = int((starts < chunk_start).sum())
        groups = query.shape[1] // self.n_heads
        batch_idx = torch.arange(self.batch).view(-1, 1, 1)

        chosen = torch.arange(n_past).view(1, 1, -1).expand(self.batch, self.n_heads, n_past)
        top_k = self.settings.decode_top_k_blocks
        if n_queries == 1 and top_k is not None and n_past > top_k:
            chosen = self._select_blocks(query, n_past, top_k)

        sources: list[PagedSource] = []
        source_rows: list[torch.Tensor] = []
        past_formats = self.table.format[:n_past]
        boundary_valid = None
        if n_past and int(starts[n_past - 1]) + int(self.table.fill[n_past - 1]) > chunk_start:
            boundary_valid = chunk_start - int(starts[n_past - 1])  # tail block shared with the chunk
            if int(past_formats[n_past - 1]) != BlockFormat.FULL:
                raise RuntimeError("the block shared by the past and the chunk must be full precision")
        for fmt in past_formats.unique().tolist():
            safe = chosen.clamp(min=0)
            in_fmt = (chosen >= 0) & (past_formats[safe] == fmt)
            rows, count = ops.compact_block_table(torch.where(in_fmt, chosen, torch.full_like(chosen, -1)))
            width = int(count.max()) if count.numel() else 0
            rows = rows[..., :width]
            physical = self.table.slot[rows.clamp(min=0), batch_idx.expand_as(rows)]
            physical = torch.where(rows >= 0, physical, torch.full_like(physical, -1))
            seq_lens = count * bs
            if fmt == BlockFormat.FULL and boundary_valid is not None:
                has_boundary = (rows == n_past - 1).any(dim=-1)
                seq_lens = seq_lens - has_boundary.long() * (bs - boundary_valid)
            if fmt == BlockFormat.FULL:
                k_src = self.pools[fmt].tensors["k"]
                v_src = self.pools[fmt].tensors["v"]
            else:
                k_src = self._paged_quantized(fmt, "k")
                v_src = self._paged_quantized(fmt, "v")
            sources.append(PagedSource(k_src, v_src, physical.to(self.device), seq_lens.to(self.device)))
            source_rows.append(rows)

        chunk_partial, chunk_probs = ops.dense_attention_partial(
            query, key_chunk, value_chunk, scale, causal=True, softcap=softcap, return_probs=True
        )
        summary = self.summary if bool((self.summary.count > 0).any()) else None
        merged, masses = ops.mixed_sparse_attention(
            query, sources, scale, summary=summary, softcap=softcap, extra=[chunk_partial]
        )
        self._accumulate(source_rows, masses, groups * n_queries)
        self._accumulate_chunk(ops.renormalised_mass(chunk_probs, chunk_partial, merged), groups, n_queries)
        self._remember_queries(query)
        out = merged.out.to(query.dtype)
        self._run_pending_compression()
        return out

    def exact_dense_path(self, n_queries: int, attention_mask: torch.Tensor | None) -> bool:
        """Whether the minutia attention should hand this call to SDPA over :meth:`dense_kv`.

        True when compression is off and the read set is every token at full precision (nothing
        quantized or dropped, no decode top-k): attention is then exactly DynamicCache's, so the
        stock kernel gives the same logits bit for bit (and faster on CPU). No attention mass is
        accumulated on this path (it only feeds compression, which is off).
        """
        if self.settings.compress or not self.is_initialized:
            return False
        self._check_no_padding(attention_mask)
        if bool((self.table.format != BlockFormat.FULL).any()) or bool((self.summary.count > 0).any()):
            return False
        top_k = self.settings.decode_top_k_blocks
        if n_queries == 1 and top_k is not None:
            n_past = int((self.table.block_index * self.block_size < self._chunk_start).sum())
            if n_past > top_k:
                return False
        # transformers builds one mask for all full-attention layers, sized by the first one; another
        # tiered layer may have dropped blocks (KVCacheManager.free), so the mask must fit this layer.
        kv_len = self.kept_tokens()
        if attention_mask is None:
            return n_queries in (1, kv_len)
        return attention_mask.shape[-1] == kv_len

    def after_dense_attention(self, query: torch.Tensor, scale: float) -> None:
        """Bookkeeping of :meth:`attend` that still applies on the exact dense path."""
        self.last_scale = scale
        self._remember_queries(query)
        self._run_pending_compression()

    def _check_no_padding(self, attention_mask: torch.Tensor | None) -> None:
        """The tiered path has no padding support: refuse masks that hide part of the kept past."""
        if attention_mask is None or attention_mask.dtype != torch.bool or attention_mask.ndim != 4:
            return
        # The mask is sized for the first tiered layer: its past columns come before the chunk's.
        past = attention_mask.shape[-1] - (self.cumulative_length - self._chunk_start)
        if past > 0 and not bool(attention_mask[..., :past].all()):
            raise NotImplementedError("minutia_sparse attention does not support padded batches")

    def _select_blocks(self, query: torch.Tensor, n_past: int, top_k: int) -> torch.Tensor:
        """Per (batch, KV head): the ``top_k`` past rows with the best Quest bound, plus forced rows."""
        bs = self.block_size
        kmin = self.table.columns["key_min"][:n_past].reshape(n_past * self.batch, self.n_heads, self.head_dim)
        kmax = self.table.columns["key_max"][:n_past].reshape(n_past * self.batch, self.n_heads, self.head_dim)
        rows = torch.arange(n_past).view(1, 1, -1).expand(self.batch, self.n_heads, n_past)
        pseudo_pages = rows * self.batch + torch.arange(self.batch).view(-1, 1, 1)
        scores = ops.quest_scores(query, kmin, kmax, pseudo_pages.to(self.device)).cpu()
        starts = self.table.block_index[:n_past] * bs
        ends = starts + self.table.fill[:n_past]
        forced = (starts < self.settings.sink_tokens) | (ends > self.cumulative_length - self.settings.recent_tokens)
        forced[-1] = True  # the block shared with the chunk (or the newest past block)
        forced |= self.owner.priorities.for_blocks(self.table.block_index[:n_past])[1]  # promoted by a question
        forced = forced.view(1, 1, -1).expand_as(rows)
        return ops.select_top_k_blocks(scores, rows.contiguous(), top_k + int(forced[0, 0].sum()), forced)

    def _accumulate(self, source_rows: list[torch.Tensor], masses: list[torch.Tensor], observations: int) -> None:
        mass_col = self.table.columns["attention_mass"]
        obs_col = self.table.columns["observations"]
        for rows, mass in zip(source_rows, masses):
            present = rows >= 0
            if not bool(present.any()):
                continue
            b_idx = torch.arange(self.batch).view(-1, 1, 1).expand_as(rows)[present]
            h_idx = torch.arange(self.n_heads).view(1, -1, 1).expand_as(rows)[present]
            r_idx = rows[present]
            mass_col.index_put_((r_idx, b_idx, h_idx), mass.cpu()[present].float(), accumulate=True)
            obs_col.index_put_((r_idx, b_idx, h_idx), torch.full_like(r_idx, observations, dtype=torch.float32),
                               accumulate=True)

    def _accumulate_chunk(self, token_mass: torch.Tensor, groups: int, n_queries: int) -> None:
        """Mass the chunk's own tokens received ([B, H, T]) goes to their blocks' scores."""
        blocks = self._chunk_blocks
        if blocks is None or blocks.numel() != token_mass.shape[-1]:
            return
        rows = torch.searchsorted(self.table.block_index, blocks)
        mass = token_mass.cpu().float().permute(2, 0, 1)  # [T, B, H]
        self.table.columns["attention_mass"].index_add_(0, rows, mass)
        # Query i (position chunk_start + i) observed every chunk token at or before it, so a block
        # was observed by the queries from its first chunk token on (times the group's heads).
        unique_rows = torch.unique_consecutive(rows)
        row_first = torch.clamp(self.table.block_index[unique_rows] * self.block_size, min=self._chunk_start)
        seen_by = (self._chunk_start + n_queries - row_first).clamp(min=0).float() * groups
        self.table.columns["observations"][unique_rows] += seen_by.view(-1, 1, 1)

    def _remember_queries(self, query: torch.Tensor) -> None:
        window = self.settings.observation_window
        recent = query.detach()[:, :, -window:]
        if self.recent_queries is not None and recent.shape[2] < window:
            recent = torch.cat([self.recent_queries, recent], dim=2)[:, :, -window:]
        # A copy, not a view: a view would keep the whole chunk's query tensor alive.
        self.recent_queries = recent.to(self.dtype).clone()

    # ------------------------------------------------------------------------------------------
    # Budget and compression
    # ------------------------------------------------------------------------------------------

    def full_precision_bytes(self) -> int:
        """What DynamicCache would hold for this layer: every token seen, K and V, source dtype."""
        if not self.is_initialized:
            return 0
        element = torch.empty(0, dtype=self.dtype).element_size()
        return self.cumulative_length * self.batch * self.n_heads * (self.head_dim + self.value_dim) * element

    def metadata_bytes(self) -> int:
        table = self.table
        columns = sum(_tensor_bytes(c) for c in table.columns.values())
        index = _tensor_bytes(table.block_index, table.format, table.slot, table.fill)
        outliers = _tensor_bytes(*(i for i in self.outlier_idx.values() if i is not None))
        return columns + index + outliers + self.summary.nbytes() + _tensor_bytes(self.recent_queries)

    def payload_bytes(self) -> int:
        return sum(pool.used_bytes() for pool in self.pools.values()) if self.is_initialized else 0

    def kv_bytes(self) -> int:
        """Bytes this layer's KV occupies (used blocks + metadata), measured from tensor storage sizes."""
        return self.payload_bytes() + self.metadata_bytes() if self.is_initialized else 0

    def reserved_bytes(self) -> int:
        """Like :meth:`kv_bytes` but counting whole pool storage, free slots included."""
        if not self.is_initialized:
            return 0
        return sum(pool.reserved_bytes() for pool in self.pools.values()) + self.metadata_bytes()

    def budget(self) -> int:
        watermark = self.owner.watermark_budget_per_layer()
        if self.settings.budget_bytes is not None:
            budget = int(self.settings.budget_bytes / max(self.owner.num_tiered_layers, 1))
        else:
            ratio = self.settings.budget_ratio if self.settings.budget_ratio is not None else 1.0
            floor = self.settings.budget_floor_tokens * self.full_precision_bytes_per_token()
            budget = int(max(ratio * self.full_precision_bytes(), floor))
        return budget if watermark is None else min(budget, watermark)

    def _protected_window(self, budget: int) -> PositionScorer:
        """The sinks and recent window the budget keeps at full precision; the recent window takes at
        most ``recent_budget_share`` of the budget, so a short context under a tight budget is not
        spent on its last few hundred tokens while older blocks are dropped."""
        position = self.scorer.position
        per_token = self.full_precision_bytes_per_token()
        if per_token <= 0:
            return position
        cap = int(self.settings.recent_budget_share * budget // per_token)
        return position if cap >= position.recent_tokens else replace(position, recent_tokens=cap)

    def full_precision_bytes_per_token(self) -> int:
        if not self.is_initialized:
            return 0
        element = torch.empty(0, dtype=self.dtype).element_size()
        return self.batch * self.n_heads * (self.head_dim + self.value_dim) * element

    def modality_budgets(self) -> dict[int, int]:
        """Per-layer byte ceilings of the modalities whose policy sets one (code -> bytes)."""
        ceilings = {}
        for name, policy in self.settings.modalities.items():
            code = int(Modality.parse(name))
            if policy.budget_bytes is not None:
                ceilings[code] = int(policy.budget_bytes / max(self.owner.num_tiered_layers, 1))
            elif policy.budget_share is not None:
                ceilings[code] = int(policy.budget_share * self.budget())
        return ceilings

    def _row_metadata_bytes(self) -> int:
        table = self.table
        per_row = sum(_tensor_bytes(c[:1]) for c in table.columns.values())
        return per_row + 8 * (3 + self.batch)

    def scoring_inputs(self) -> BlockScoringInputs:
        n, k = len(self.table), self.batch * self.n_heads
        queries = None
        if self.recent_queries is not None:
            rq = self.recent_queries.float()  # [B, Hq, W, D]
            groups = rq.shape[1] // self.n_heads
            queries = rq.reshape(self.batch, self.n_heads, groups * rq.shape[2], -1).reshape(k, -1, rq.shape[-1])
        cols = self.table.columns
        return BlockScoringInputs(
            block_start=self.table.block_index * self.block_size,
            block_len=self.table.fill.clone(),
            seq_len=self.cumulative_length,
            attention_mass=cols["attention_mass"].reshape(n, k),
            observations=cols["observations"].reshape(n, k),
            key_min=cols["key_min"].reshape(n, k, -1).cpu(),
            key_max=cols["key_max"].reshape(n, k, -1).cpu(),
            queries=None if queries is None else queries.cpu(),
            scale=self.last_scale if self.last_scale is not None else self.head_dim**-0.5,
            flags=self.owner.annotations.block_flags(self.table.block_index, self.block_size),
            boost=self.owner.priorities.for_blocks(self.table.block_index)[0],
        )

    def compress(self, protect_from: int | None = None) -> bool:
        """Bring the layer under its budget and its modalities' policies: re-plan every block's format.

        Partially filled blocks, sinks, the recent window and blocks holding tokens at or after
        ``protect_from`` stay at full precision; blocks pinned by a question keep their format.
        Each block may only use its modality's formats and is capped at its ``preferred`` one;
        modalities with a byte ceiling are planned against it first. Returns whether anything changed.
        """
        if not self.is_initialized or len(self.table) == 0:
            return False
        budget = self.budget()
        protect_from = self.cumulative_length if protect_from is None else protect_from
        inputs = self.scoring_inputs()
        starts = inputs.block_start
        protected = self._protected_window(budget).protected(inputs)
        protected |= self.table.fill < self.block_size
        protected |= starts + self.block_size > protect_from
        _, pinned = self.owner.priorities.for_blocks(self.table.block_index)
        pinned = pinned & ~protected

        formats = [BlockFormat.FULL] + [BlockFormat.from_kind(k) for k in self.settings.warm_kinds]
        fidelity = self.settings.fidelity
        fidelity_of = torch.tensor([fidelity[BlockFormat(f).kind] for f in range(len(BlockFormat))])
        current_fidelity = fidelity_of[self.table.format]
        meta = self._row_metadata_bytes()
        format_bytes = torch.zeros(len(BlockFormat), dtype=torch.long)
        for f in formats:
            format_bytes[int(f)] = self.batch * self.pools[int(f)].slot_bytes + meta
        current_bytes = format_bytes[self.table.format]
        fixed = self.metadata_bytes() - meta * len(self.table)  # summary, queries, outlier index

        # Per-block options: the modality's formats (pinned blocks: only their current one).
        modality = self.owner.annotations.block_modality(self.table.block_index, self.block_size)
        allowed = torch.ones(len(self.table), len(formats), dtype=torch.bool)
        drop_ok = torch.full((len(self.table),), self.settings.allow_drop and self.owner.sparse_attention)
        cap = current_fidelity.clone()
        for name, policy in self.settings.modalities.items():
            rows = modality == int(Modality.parse(name))
            usable = policy.formats(self.settings.warm_kinds)
            allowed[rows] = torch.tensor([f.kind in usable for f in formats])
            drop_ok &= ~rows | policy.allow_drop
            if policy.preferred is not None:
                settled = rows & ~protected & ~pinned
                cap[settled] = torch.clamp(cap[settled], max=fidelity[policy.preferred])
        allowed[pinned] = torch.stack([self.table.format[pinned] == int(f) for f in formats], dim=1)
        drop_ok &= ~pinned

        ceilings = self.modality_budgets()
        over_ceiling = {code: int(current_bytes[modality == code].sum()) > limit for code, limit in ceilings.items()}
        needs_pass = self.kv_bytes() > budget or any(over_ceiling.values()) or bool((cap < current_fidelity - 1e-9).any())
        if not needs_pass:
            return False
        scores = self.scorer.block_scores(inputs)
        options = [TierOption(f.kind, int(format_bytes[int(f)]), fidelity[f.kind]) for f in formats]
        keep = 1.0 - self.settings.hysteresis

        def plan(rows: torch.Tensor, target: int, caps: torch.Tensor) -> torch.Tensor:
            """Option index (into ``formats``, DROP = -1) per row in ``rows``."""
            args = (scores[rows], options, target, protected[rows], caps[rows])
            may_drop = drop_ok[rows]
            if self.settings.drop_last_resort:
                quantize_only = plan_tiers(*args, allow_drop=False, allowed=allowed[rows])
                if not quantize_only.over_budget:
                    return quantize_only.level
                # Drop no more blocks than the budget forces, the lowest-scored ones.
                may_drop = fewest_drops(scores[rows], options, target, protected[rows], allowed[rows], may_drop)
            return plan_tiers(*args, allow_drop=may_drop, allowed=allowed[rows]).level

        for code, limit in ceilings.items():  # modalities with a ceiling first, against it alone
            if over_ceiling[code] or bool((cap[modality == code] < current_fidelity[modality == code] - 1e-9).any()):
                rows = modality == code
                level = plan(rows, int(limit * keep), cap)
                chosen_fid = torch.tensor([fidelity[formats[i].kind] if i != DROP else 0.0 for i in level.tolist()])
                cap[rows] = torch.minimum(cap[rows], chosen_fid)
        every = torch.ones(len(self.table), dtype=torch.bool)
        level = plan(every, int(budget * keep) - fixed, cap)
        new_format = torch.tensor([int(formats[i]) if i != DROP else -1 for i in level.tolist()], dtype=torch.long)
        changed = new_format != self.table.format
        if not bool(changed.any()):
            return False
        dropped = new_format < 0
        for fmt in formats:
            rows = torch.nonzero(changed & (new_format == int(fmt))).flatten()
            if rows.numel():
                self._convert_rows(rows, fmt)
        if bool(dropped.any()):
            self._drop_rows(torch.nonzero(dropped).flatten())
        self._maybe_compact_pools()
        return True

    def _convert_rows(self, rows: torch.Tensor, fmt: BlockFormat) -> None:
        """Re-store ``rows`` in pool ``fmt`` (quantizing from their current, dequantized content)."""
        keys, values = self._rows_dense(rows)  # [n, B, bs, H, D]
        n = int(rows.numel())
        pool = self.pools[fmt]
        slots = pool.alloc(n * self.batch).view(n, self.batch)
        flat_k = keys.reshape(n * self.batch, self.block_size, self.n_heads, self.head_dim)
        flat_v = values.reshape(n * self.batch, self.block_size, self.n_heads, self.value_dim)
        if fmt == BlockFormat.FULL:
            pool.write(slots, k=flat_k, v=flat_v)
        else:
            fields: dict[str, torch.Tensor] = {}
            for prefix, data, quantizers in (("k", flat_k, self.key_quantizers), ("v", flat_v, self.value_quantizers)):
                if self.settings.outlier_channels > 0 and self.outlier_idx[prefix] is None:
                    self.outlier_idx[prefix] = ops.select_outlier_channels(
                        data, self.settings.outlier_channels, head_axis=2
                    )
                idx = self.outlier_idx[prefix]
                qt = quantizers[fmt].quantize(data, None if idx is None else ops.outlier_index_for(idx, 4, 2))
                fields[f"{prefix}_data"] = qt.data
                fields[f"{prefix}_scale"] = qt.scale
                if qt.zero is not None:
                    fields[f"{prefix}_zero"] = qt.zero
                if qt.outlier_values is not None:
                    fields[f"{prefix}_outliers"] = qt.outlier_values
            pool.write(slots.flatten(), **fields)
        self._free_rows(rows)
        self.table.set_format(rows, fmt, slots)

    def _drop_rows(self, rows: torch.Tensor) -> None:
        """Fold the rows into the Global Summary and remove them from the page table.

        With a cold tier attached the rows' payloads go there too, and their key bounds and scores
        to the cold index, so a question can bring them back (:meth:`recall`).
        """
        if self.owner.cold_tier is not None:
            self._evict_to_cold(rows)
        self.summary = self.summary.absorb(*self._rows_as_tokens(rows))
        self._free_rows(rows)
        keep = torch.ones(len(self.table), dtype=torch.bool)
        keep[rows] = False
        self.table.keep(keep)

    def _rows_as_tokens(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows' K and V as token sequences ``[B, H, n * bs, D]`` plus the mask of filled slots
        ``[B, H, n * bs]``: what the Global Summary absorbs (dropped) or releases (recalled)."""
        keys, values = self._rows_dense(rows)  # [n, B, bs, H, D]
        valid = torch.arange(self.block_size).view(1, -1) < self.table.fill[rows].view(-1, 1)  # [n, bs]
        k = keys.permute(1, 3, 0, 2, 4).reshape(self.batch, self.n_heads, -1, self.head_dim)
        v = values.permute(1, 3, 0, 2, 4).reshape(self.batch, self.n_heads, -1, self.value_dim)
        mask = valid.flatten().to(self.device).view(1, 1, -1).expand(self.batch, self.n_heads, -1)
        return k, v, mask

    # ------------------------------------------------------------------------------------------
    # Cold tier (kvstore.cold)
    # ------------------------------------------------------------------------------------------

    def _evict_to_cold(self, rows: torch.Tensor) -> None:
        cold = self.owner.cold_tier
        table = self.table
        mass = table.columns["attention_mass"][rows].flatten(1).sum(-1)
        seen = table.columns["observations"][rows].flatten(1).sum(-1).clamp(min=1.0)
        modality = self.owner.annotations.block_modality(table.block_index[rows], self.block_size)
        kept = [row for i, row in enumerate(rows.tolist())
                if cold.evict(self.layer_idx, int(table.block_index[row]), int(table.format[row]),
                              self.block_payload(row), float(mass[i] / seen[i]), int(modality[i]))]
        evicted = table.subset(torch.isin(torch.arange(len(table)), torch.tensor(kept, dtype=torch.long)))
        evicted.slot.fill_(-1)
        self.cold.insert(evicted)

    def _forget_cold(self) -> None:
        if self.owner.cold_tier is None or not len(getattr(self, "cold", ())):
            return
        self.owner.cold_tier.placement.forget(self._cold_ids(torch.arange(len(self.cold))))

    def _cold_ids(self, rows: torch.Tensor) -> list[str]:
        tier = self.owner.cold_tier
        return [tier.block_id(self.layer_idx, int(self.cold.block_index[r]), int(self.cold.format[r]))
                for r in rows.tolist()]

    def recall(self, blocks: torch.Tensor) -> int:
        """Bring the cold blocks among ``blocks`` (logical indices) back into the pools; returns how many.

        Their tokens leave the Global Summary while they are back. Inside a checkpoint, rolling it
        back returns them to the cold tier (the cache is then exactly as before the question).
        """
        if self.owner.cold_tier is None or not self.is_initialized or not len(self.cold):
            return 0
        mask = torch.isin(self.cold.block_index, blocks.cpu().long())
        if not bool(mask.any()):
            return 0
        tier = self.owner.cold_tier
        room = self.owner.device_room()
        if room is not None:  # the hard cap: recall only the best-ranked blocks that fit
            fits = int(room // max(self.batch * self.pools[BlockFormat.FULL].slot_bytes + self._row_metadata_bytes(), 1))
            hits = torch.nonzero(mask).flatten()
            if fits < hits.numel():
                self.owner.refused_recalls += int(hits.numel()) - max(fits, 0)
                mask = torch.zeros_like(mask)
                mask[hits[:max(fits, 0)]] = True
                if not bool(mask.any()):
                    return 0
        back = self.cold.subset(mask)
        payloads = [tier.fetch(block_id) for block_id in self._cold_ids(torch.nonzero(mask).flatten())]
        for fmt in back.format.unique().tolist():
            where = torch.nonzero(back.format == fmt).flatten()
            pool = self.pools[fmt]
            new = pool.alloc(where.numel() * self.batch)
            pool.write(new, **{name: torch.stack([payloads[i][name] for i in where.tolist()]).to(self.device)
                               .flatten(0, 1) for name in pool.specs})
            back.slot[where] = new.view(-1, self.batch).cpu()
        self.cold.keep(~mask)
        self.table.insert(back)
        rows = torch.searchsorted(self.table.block_index, back.block_index)
        self.summary = self.summary.release(*self._rows_as_tokens(rows))
        if self.owner.compression_suspended:  # the table holds copies of back's rows: keep it as the record
            back.slot.fill_(-1)
            self._recalled.append(back)
        return int(back.block_index.numel())

    def _cold_ranking(self, query: torch.Tensor, n_past: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cold rows by Quest bound for the latest queries: ``(wanted, likely)``.

        ``wanted``: the (at most ``recall_top_k``) cold rows that rank among the layer's best blocks;
        ``likely``: the best ``2 x recall_top_k`` cold rows, what the next steps will probably want.
        """
        k = self.owner.cold_tier.recall_top_k
        last = query[:, :, -self.settings.observation_window:]

        def bounds(table: PageTable, n: int) -> torch.Tensor:
            kmin = table.columns["key_min"][:n].reshape(n * self.batch, self.n_heads, self.head_dim)
            kmax = table.columns["key_max"][:n].reshape(n * self.batch, self.n_heads, self.head_dim)
            rows = torch.arange(n).view(1, 1, -1).expand(self.batch, self.n_heads, n)
            pages = rows * self.batch + torch.arange(self.batch).view(-1, 1, 1)
            return ops.quest_scores(last, kmin, kmax, pages.to(self.device)).float().amax(dim=(0, 1)).cpu()

        cold_scores = bounds(self.cold, len(self.cold))
        likely = torch.topk(cold_scores, min(2 * k, cold_scores.numel())).indices
        wanted = likely[:k]
        # Compare with the blocks a decode step chooses among: not the sinks, the recent window or
        # the question's own tokens (always read anyway, and the query's own keys bound highest).
        starts = self.table.block_index[:n_past] * self.block_size
        meeting_end = self.owner.checkpoint_length()
        choosable = torch.nonzero((starts >= self.settings.sink_tokens)
                                  & (starts + self.block_size <= meeting_end - self.settings.recent_tokens)).flatten()
        if choosable.numel():
            resident = bounds(self.table, n_past)[choosable]
            threshold = torch.topk(resident, min(k, resident.numel())).values[-1]
            wanted = wanted[cold_scores[wanted] >= threshold]
        return wanted, likely

    def _recall_predicted(self, query: torch.Tensor, n_past: int) -> None:
        """Decode: recall the cold blocks this query ranks high; question prefill: stage them ahead.

        Not in the placement's fallback mode (L1/L2 only: a low hit rate or saturated transfers).
        """
        tier = self.owner.cold_tier
        if tier is None or not len(self.cold) or not self.owner.compression_suspended or tier.placement.mode == "fallback":
            return
        wanted, likely = self._cold_ranking(query, n_past)
        if query.shape[2] == 1 and wanted.numel():
            likely_blocks = self.cold.block_index[likely]
            self.recall(self.cold.block_index[wanted])
            likely = torch.nonzero(torch.isin(self.cold.block_index, likely_blocks)).flatten()
        # Stage what the next steps will probably want while this one computes.
        staged = [i for i in self._cold_ids(likely) if not self.owner.cold_tier.staged(i)]
        self.owner.cold_tier.request(staged)

    def _maybe_compact_pools(self) -> None:
        """Give memory back when a pool is mostly free (moves only blocks above the high-water mark)."""
        for fmt, pool in self.pools.items():
            if pool.allocator.free_count > max(8, pool.used_count):
                self.table.remap_slots(fmt, pool.compact())

    def compact_storage(self) -> None:
        """Shrink every pool to exactly its used blocks."""
        for fmt, pool in self.pools.items():
            self.table.remap_slots(fmt, pool.compact())

    # ------------------------------------------------------------------------------------------
    # Checkpoint / rollback
    # ------------------------------------------------------------------------------------------

    def snapshot(self) -> TieredLayerSnapshot | None:
        if not self.is_initialized:
            return None
        rows = len(self.table)
        cols = self.table.columns
        return TieredLayerSnapshot(
            rows=rows,
            seen=self.cumulative_length,
            tail_fill=int(self.table.fill[-1]) if rows else None,
            tail_key_min=cols["key_min"][-1].clone() if rows else None,
            tail_key_max=cols["key_max"][-1].clone() if rows else None,
            attention_mass=cols["attention_mass"].clone(),
            observations=cols["observations"].clone(),
            summary=self.summary.clone(),
            recent_queries=self.recent_queries,
            block_index=self.table.block_index.clone(),
            recalled=len(self._recalled),
        )

    def restore(self, snap: TieredLayerSnapshot | None) -> None:
        if snap is None:
            if self.is_initialized:
                self.reset()
            return
        # Rows added since the checkpoint: the question's tokens, and cold blocks recalled for it.
        present = torch.isin(self.table.block_index, snap.block_index)
        self._free_rows(torch.nonzero(~present).flatten())
        self.table.keep(present)
        for recalled in self._recalled[snap.recalled:]:
            self.cold.insert(recalled)
        del self._recalled[snap.recalled:]
        cols = self.table.columns
        if snap.rows:
            self.table.fill[-1] = snap.tail_fill
            cols["key_min"][-1] = snap.tail_key_min
            cols["key_max"][-1] = snap.tail_key_max
        cols["attention_mass"] = snap.attention_mass.clone()
        cols["observations"] = snap.observations.clone()
        self.summary = snap.summary.clone()
        self.recent_queries = snap.recent_queries
        self.cumulative_length = snap.seen

    def stats(self) -> dict[str, Any]:
        if not self.is_initialized:
            return {"tokens_seen": 0}
        per_format = {}
        for fmt, pool in self.pools.items():
            rows = int((self.table.format == fmt).sum())
            per_format[BlockFormat(fmt).kind] = {
                "blocks": rows,
                "used_bytes": pool.used_bytes(),
                "reserved_bytes": pool.reserved_bytes(),
            }
        return {
            "tokens_seen": self.cumulative_length,
            "tokens_kept": self.kept_tokens(),
            "tokens_summarised": float(self.summary.count.mean()) if self.summary.count.numel() else 0.0,
            "formats": per_format,
            "metadata_bytes": self.metadata_bytes(),
            "kv_bytes": self.kv_bytes(),
            "full_precision_bytes": self.full_precision_bytes(),
            "budget_bytes": self.budget(),
        }


    # ---- issue 5 (durable sessions): state_dict / block_payload / load_state_dict, begin ----
    def state_dict(self) -> dict[str, Any]:
        """Everything this layer holds except block payloads (:meth:`block_payload`), on the CPU."""
        if not self.is_initialized:
            return {"initialized": False, "cumulative_length": self.cumulative_length}

        def cpu(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.detach().cpu().clone()

        return {
            "initialized": True,
            "cumulative_length": self.cumulative_length,
            "dtype": str(self.dtype).removeprefix("torch."),
            "shape": [self.batch, self.n_heads, self.head_dim, self.value_dim],
            "block_index": cpu(self.table.block_index),
            "format": cpu(self.table.format),
            "fill": cpu(self.table.fill),
            "columns": {name: cpu(col) for name, col in self.table.columns.items()},
            "outlier_idx": {prefix: cpu(idx) for prefix, idx in self.outlier_idx.items()},
            "summary": {"key_sum": cpu(self.summary.key_sum), "value_sum": cpu(self.summary.value_sum),
                        "count": cpu(self.summary.count)},
            "recent_queries": cpu(self.recent_queries),
            "last_scale": self.last_scale,
            "chunk_start": self._chunk_start,
            "compression_pending": self._compression_pending,
            "cold": {"block_index": cpu(self.cold.block_index), "format": cpu(self.cold.format),
                     "fill": cpu(self.cold.fill), "columns": {n: cpu(c) for n, c in self.cold.columns.items()}},
        }

    def cold_payload(self, row: int) -> dict[str, torch.Tensor]:
        """The stored tensors of cold-index row ``row``, read from the cold tier (not counted as a recall)."""
        tier = self.owner.cold_tier
        tensors, _ = unpack_block(tier.placement.peek(self._cold_ids(torch.tensor([row]))[0]))
        return tensors

    def block_payload(self, row: int) -> dict[str, torch.Tensor]:
        """The stored tensors of page-table row ``row`` in its pool's format: ``[B, *slot shape]`` each."""
        pool = self.pools[int(self.table.format[row])]
        slots = self.table.slot[row]
        return {name: pool.read(name, slots).cpu() for name in pool.tensors}

    def load_state_dict(self, state: dict[str, Any], payloads: list[dict[str, torch.Tensor]],
                        device: torch.device | str = "cpu", cold_payloads: list[dict[str, torch.Tensor]] = ()) -> None:
        """Rebuild the layer from :meth:`state_dict` and one payload per row (pools come back packed).

        ``cold_payloads``: one per cold-index row; they go to the owner's cold tier, or without one the
        rows stay dropped (their tokens are in the summary either way).
        """
        self.cumulative_length = int(state["cumulative_length"])
        if not state["initialized"]:
            self.is_initialized = False
            return
        dtype = getattr(torch, state["dtype"])
        batch, n_heads, head_dim, value_dim = state["shape"]
        self.lazy_initialization(torch.zeros(batch, n_heads, 0, head_dim, dtype=dtype, device=device),
                                 torch.zeros(batch, n_heads, 0, value_dim, dtype=dtype, device=device))
        formats = state["format"].long()
        if len(payloads) != formats.numel():
            raise ValueError(f"layer {self.layer_idx}: {len(payloads)} block payloads for {formats.numel()} blocks")
        slots = torch.zeros(formats.numel(), batch, dtype=torch.long)
        for fmt in formats.unique().tolist():
            if fmt not in self.pools:
                raise ValueError(f"layer {self.layer_idx} was saved with {BlockFormat(fmt).kind} blocks, which this "
                                 f"cache's warm_kinds {self.settings.warm_kinds} do not include")
            rows = torch.nonzero(formats == fmt).flatten()
            pool = self.pools[fmt]
            new = pool.alloc(rows.numel() * batch)
            values = {name: torch.stack([payloads[r][name] for r in rows.tolist()]).to(device).flatten(0, 1)
                      for name in pool.specs}
            pool.write(new, **values)
            slots[rows] = new.view(-1, batch)
        table = self.table
        table.block_index = state["block_index"].long().clone()
        table.format = formats.clone()
        table.slot = slots
        table.fill = state["fill"].long().clone()
        for name, column in state["columns"].items():
            table.columns[name] = column.to(table.columns[name].device if name in table.columns else device)
        self.outlier_idx = {prefix: None if idx is None else idx.to(device) for prefix, idx in state["outlier_idx"].items()}
        summary = state["summary"]
        self.summary = GlobalSummary(summary["key_sum"].to(device), summary["value_sum"].to(device),
                                     summary["count"].to(device))
        queries = state["recent_queries"]
        self.recent_queries = None if queries is None else queries.to(device)
        self.last_scale = state["last_scale"]
        self._chunk_start = int(state["chunk_start"])
        self._chunk_blocks = None
        self._compression_pending = bool(state["compression_pending"])
        cold = state.get("cold")
        tier = self.owner.cold_tier
        if cold is not None and tier is not None and len(cold_payloads) == int(cold["block_index"].numel()):
            self.cold.block_index = cold["block_index"].long().clone()
            self.cold.format = cold["format"].long().clone()
            self.cold.fill = cold["fill"].long().clone()
            self.cold.slot = torch.full((len(self.cold.block_index), batch), -1, dtype=torch.long)
            self.cold.columns = {n: c.to(self.cold.columns[n].device) for n, c in cold["columns"].items()}
            modality = self.owner.annotations.block_modality(self.cold.block_index, self.block_size)
            for i, (block, fmt) in enumerate(zip(self.cold.block_index.tolist(), self.cold.format.tolist())):
                tier.evict(self.layer_idx, block, fmt, cold_payloads[i], 0.0, int(modality[i]))
    # ---- issue 5 (durable sessions): end ----


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
        return _tensor_bytes(self.keys, self.values) if self.is_initialized else 0

    def reserved_bytes(self) -> int:
        """Storage actually held: the window is a view into the last update's concatenation."""
        if not self.is_initialized:
            return 0
        return self.keys.untyped_storage().nbytes() + self.values.untyped_storage().nbytes()

    def stats(self) -> dict[str, Any]:
        return {"tokens_seen": self.cumulative_length, "kv_bytes": self.kv_bytes(), "sliding_window": self.sliding_window}
