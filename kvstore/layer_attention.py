"""Attention of one tiered layer over its stored blocks (the ``minutia_sparse`` path).

One job: read. The chunk's queries attend over the kept past blocks (full precision and quantized
pools in one launch), the Global Summary of dropped tokens and the chunk itself; at decode a Quest
bound picks the blocks worth reading. The attention mass each block receives is written back into
the page table, where the compression policy's scores read it; the last queries are remembered for
the query-aware score.
"""

from __future__ import annotations

import torch

from kernels import dispatch as ops  # Triton on CUDA, the torch reference elsewhere
from kernels.reference import PagedSource
from kvstore.block_storage import BlockStorage
from kvstore.blocks import BlockFormat, PageTable
from kvstore.config import TieredCacheConfig
from kvstore.layer_context import LayerContext


def quest_bounds(storage: BlockStorage, table: PageTable, n: int, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quest upper bounds of ``query`` over the first ``n`` rows of ``table`` (the storage's page table or
    one with its columns, e.g. the cold index's), ``[B, Hkv, n]`` on the storage's device, and the rows
    they are for, ``[B, Hkv, n]``; each batch row reads its own page of a block."""
    kmin = table.columns["key_min"][:n].reshape(n * storage.batch, storage.n_heads, storage.head_dim)
    kmax = table.columns["key_max"][:n].reshape(n * storage.batch, storage.n_heads, storage.head_dim)
    rows = torch.arange(n).view(1, 1, -1).expand(storage.batch, storage.n_heads, n)
    pages = rows * storage.batch + torch.arange(storage.batch).view(-1, 1, 1)
    return ops.quest_scores(query, kmin, kmax, pages.to(storage.device)), rows


class BlockAttention:
    """Query-side state of one layer: the chunk being attended, the last scale and recent queries."""

    def __init__(self, settings: TieredCacheConfig, ctx: LayerContext) -> None:
        self.settings = settings
        self.ctx = ctx
        self.last_scale: float | None = None
        self.recent_queries: torch.Tensor | None = None
        self.chunk_start = 0  # first position of the tokens of the current update
        self.chunk_blocks: torch.Tensor | None = None  # their logical blocks

    def begin_chunk(self, start: int, blocks: torch.Tensor | None) -> None:
        self.chunk_start, self.chunk_blocks = start, blocks

    def past_rows(self, storage: BlockStorage) -> int:
        """Page-table rows holding tokens before the current chunk."""
        return int((storage.table.block_index * storage.block_size < self.chunk_start).sum())

    def attend(self, storage: BlockStorage, query: torch.Tensor, key_chunk: torch.Tensor, value_chunk: torch.Tensor,
               scale: float, softcap: float | None, seq_len: int) -> torch.Tensor:
        """Attention of the chunk's queries ``[B, Hq, Q, D]`` over kept past blocks + summary + the chunk.

        The past (tokens before the chunk) is visible to every query; the chunk is causal. At decode
        (``Q == 1``) with ``decode_top_k_blocks`` only the best Quest-scored blocks are read (sinks,
        recent window and the tail always). Attention mass is accumulated into the block scores.
        """
        table, bs = storage.table, storage.block_size
        chunk_start = self.chunk_start
        n_queries = query.shape[2]
        self.last_scale = scale
        starts = table.block_index * bs
        n_past = int((starts < chunk_start).sum())
        groups = query.shape[1] // storage.n_heads
        batch_idx = torch.arange(storage.batch).view(-1, 1, 1)

        chosen = torch.arange(n_past).view(1, 1, -1).expand(storage.batch, storage.n_heads, n_past)
        top_k = self.settings.decode_top_k_blocks
        if n_queries == 1 and top_k is not None and n_past > top_k:
            chosen = self.select_blocks(storage, query, n_past, top_k, seq_len)

        sources: list[PagedSource] = []
        source_rows: list[torch.Tensor] = []
        past_formats = table.format[:n_past]
        boundary_valid = None
        if n_past and int(starts[n_past - 1]) + int(table.fill[n_past - 1]) > chunk_start:
            boundary_valid = chunk_start - int(starts[n_past - 1])  # tail block shared with the chunk
            if int(past_formats[n_past - 1]) != BlockFormat.FULL:
                raise RuntimeError("the block shared by the past and the chunk must be full precision")
        for fmt in past_formats.unique().tolist():
            safe = chosen.clamp(min=0)
            in_fmt = (chosen >= 0) & (past_formats[safe] == fmt)
            rows, count = ops.compact_block_table(torch.where(in_fmt, chosen, torch.full_like(chosen, -1)))
            width = int(count.max()) if count.numel() else 0
            rows = rows[..., :width]
            physical = table.slot[rows.clamp(min=0), batch_idx.expand_as(rows)]
            physical = torch.where(rows >= 0, physical, torch.full_like(physical, -1))
            seq_lens = count * bs
            if fmt == BlockFormat.FULL and boundary_valid is not None:
                has_boundary = (rows == n_past - 1).any(dim=-1)
                seq_lens = seq_lens - has_boundary.long() * (bs - boundary_valid)
            if fmt == BlockFormat.FULL:
                k_src = storage.pools[fmt].tensors["k"]
                v_src = storage.pools[fmt].tensors["v"]
            else:
                k_src = storage.paged_quantized(fmt, "k")
                v_src = storage.paged_quantized(fmt, "v")
            sources.append(PagedSource(k_src, v_src, physical.to(storage.device), seq_lens.to(storage.device)))
            source_rows.append(rows)

        chunk_partial, chunk_probs = ops.dense_attention_partial(
            query, key_chunk, value_chunk, scale, causal=True, softcap=softcap, return_probs=True
        )
        summary = storage.summary if bool((storage.summary.count > 0).any()) else None
        merged, masses = ops.mixed_sparse_attention(
            query, sources, scale, summary=summary, softcap=softcap, extra=[chunk_partial]
        )
        self._accumulate(storage, source_rows, masses, groups * n_queries)
        self._accumulate_chunk(storage, ops.renormalised_mass(chunk_probs, chunk_partial, merged), groups, n_queries)
        self.remember_queries(query, storage.dtype)
        return merged.out.to(query.dtype)

    def exact_dense_path(self, storage: BlockStorage, n_queries: int, attention_mask: torch.Tensor | None,
                         seq_len: int) -> bool:
        """Whether the minutia attention should hand this call to SDPA over the dense kept K/V.

        True when compression is off and the read set is every token at full precision (nothing
        quantized or dropped, no decode top-k): attention is then exactly DynamicCache's, so the
        stock kernel gives the same logits bit for bit (and faster on CPU). No attention mass is
        accumulated on this path (it only feeds compression, which is off).
        """
        if self.settings.compress:
            return False
        self.check_no_padding(attention_mask, seq_len)
        if bool((storage.table.format != BlockFormat.FULL).any()) or bool((storage.summary.count > 0).any()):
            return False
        top_k = self.settings.decode_top_k_blocks
        if n_queries == 1 and top_k is not None and self.past_rows(storage) > top_k:
            return False
        # transformers builds one mask for all full-attention layers, sized by the first one; another
        # tiered layer may have dropped blocks (KVCacheManager.free), so the mask must fit this layer.
        kv_len = storage.kept_tokens()
        if attention_mask is None:
            return n_queries in (1, kv_len)
        return attention_mask.shape[-1] == kv_len

    def check_no_padding(self, attention_mask: torch.Tensor | None, seq_len: int) -> None:
        """The tiered path has no padding support: refuse masks that hide part of the kept past."""
        if attention_mask is None or attention_mask.dtype != torch.bool or attention_mask.ndim != 4:
            return
        # The mask is sized for the first tiered layer: its past columns come before the chunk's.
        past = attention_mask.shape[-1] - (seq_len - self.chunk_start)
        if past > 0 and not bool(attention_mask[..., :past].all()):
            raise NotImplementedError("minutia_sparse attention does not support padded batches")

    def select_blocks(self, storage: BlockStorage, query: torch.Tensor, n_past: int, top_k: int,
                      seq_len: int) -> torch.Tensor:
        """Per (batch, KV head): the ``top_k`` past rows with the best Quest bound, plus forced rows."""
        table, bs = storage.table, storage.block_size
        scores, rows = quest_bounds(storage, table, n_past, query)
        scores = scores.cpu()
        starts = table.block_index[:n_past] * bs
        ends = starts + table.fill[:n_past]
        forced = (starts < self.settings.sink_tokens) | (ends > seq_len - self.settings.recent_tokens)
        forced[-1] = True  # the block shared with the chunk (or the newest past block)
        forced |= self.ctx.priorities.for_blocks(table.block_index[:n_past])[1]  # promoted by a question
        forced = forced.view(1, 1, -1).expand_as(rows)
        return ops.select_top_k_blocks(scores, rows.contiguous(), top_k + int(forced[0, 0].sum()), forced)

    def _accumulate(self, storage: BlockStorage, source_rows: list[torch.Tensor], masses: list[torch.Tensor],
                    observations: int) -> None:
        mass_col = storage.table.columns["attention_mass"]
        obs_col = storage.table.columns["observations"]
        for rows, mass in zip(source_rows, masses):
            present = rows >= 0
            if not bool(present.any()):
                continue
            b_idx = torch.arange(storage.batch).view(-1, 1, 1).expand_as(rows)[present]
            h_idx = torch.arange(storage.n_heads).view(1, -1, 1).expand_as(rows)[present]
            r_idx = rows[present]
            mass_col.index_put_((r_idx, b_idx, h_idx), mass.cpu()[present].float(), accumulate=True)
            obs_col.index_put_((r_idx, b_idx, h_idx), torch.full_like(r_idx, observations, dtype=torch.float32),
                               accumulate=True)

    def _accumulate_chunk(self, storage: BlockStorage, token_mass: torch.Tensor, groups: int, n_queries: int) -> None:
        """Mass the chunk's own tokens received ([B, H, T]) goes to their blocks' scores."""
        blocks = self.chunk_blocks
        if blocks is None or blocks.numel() != token_mass.shape[-1]:
            return
        table = storage.table
        rows = torch.searchsorted(table.block_index, blocks)
        mass = token_mass.cpu().float().permute(2, 0, 1)  # [T, B, H]
        table.columns["attention_mass"].index_add_(0, rows, mass)
        # Query i (position chunk_start + i) observed every chunk token at or before it, so a block
        # was observed by the queries from its first chunk token on (times the group's heads).
        unique_rows = torch.unique_consecutive(rows)
        row_first = torch.clamp(table.block_index[unique_rows] * storage.block_size, min=self.chunk_start)
        seen_by = (self.chunk_start + n_queries - row_first).clamp(min=0).float() * groups
        table.columns["observations"][unique_rows] += seen_by.view(-1, 1, 1)

    def remember_queries(self, query: torch.Tensor, dtype: torch.dtype) -> None:
        """Keep the last ``observation_window`` queries, in the KV's ``dtype`` (the query-aware score reads them)."""
        window = self.settings.observation_window
        recent = query.detach()[:, :, -window:]
        if self.recent_queries is not None and recent.shape[2] < window:
            recent = torch.cat([self.recent_queries, recent], dim=2)[:, :, -window:]
        # A copy, not a view: a view would keep the whole chunk's query tensor alive.
        self.recent_queries = recent.to(dtype).clone()
