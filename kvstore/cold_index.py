"""The blocks of one tiered layer that wait in the cache's cold tier, and bringing them back.

One job: the cold index. Blocks the budget evicts keep their page-table row here (key bounds and
scores, no slots) while their payload goes to the cold tier (kvstore.cold); a question's queries are
ranked against those bounds and the blocks they need come back into the layer's storage.
"""

from __future__ import annotations

import torch

from kvstore.block_storage import BlockStorage
from kvstore.blocks import BlockFormat, PageTable
from kvstore.config import TieredCacheConfig
from kvstore.layer_attention import quest_bounds
from kvstore.layer_context import LayerContext
from kvstore.stores.base import unpack_block


def question_rows(storage: BlockStorage, settings: TieredCacheConfig, ctx: LayerContext, n_past: int) -> torch.Tensor:
    """Past rows a decode step chooses among: not the sinks, the recent window or the question's own tokens
    (always read anyway, and the query's own keys bound highest)."""
    starts = storage.table.block_index[:n_past] * storage.block_size
    meeting_end = ctx.checkpoint_length()
    return torch.nonzero((starts >= settings.sink_tokens)
                         & (starts + storage.block_size <= meeting_end - settings.recent_tokens)).flatten()


def full_blocks_that_fit(ctx: LayerContext, storage: BlockStorage, wanted: int) -> int:
    """How many of ``wanted`` full-precision blocks the device cap has room for (all without a cap); the
    rest are counted as refused recalls."""
    room = ctx.device_room()
    if room is None:
        return wanted
    fits = max(int(room // max(storage.block_bytes(BlockFormat.FULL), 1)), 0)
    if fits < wanted:
        ctx.note_refused_recalls(wanted - fits)
    return min(fits, wanted)


class ColdIndex:
    """Rows of one layer's blocks in the cold tier, and the rows recalled while a checkpoint is open."""

    def __init__(self, layer_idx: int, storage: BlockStorage, settings: TieredCacheConfig, ctx: LayerContext) -> None:
        self.layer_idx = layer_idx
        self.storage = storage
        self.settings = settings
        self.ctx = ctx
        self.table: PageTable = storage.new_table()  # same columns as the storage's table, slots unused
        self.recalled: list[PageTable] = []  # cold rows brought back while a checkpoint is open

    def __len__(self) -> int:
        return len(self.table)

    @property
    def attached(self) -> bool:
        return self.ctx.cold_tier is not None

    def ids(self, rows: torch.Tensor) -> list[str]:
        """The cold tier's block ids of cold-index rows ``rows``."""
        tier = self.ctx.cold_tier
        return [tier.block_id(self.layer_idx, int(self.table.block_index[r]), int(self.table.format[r]))
                for r in rows.tolist()]

    def evict(self, rows: torch.Tensor) -> None:
        """Hand the storage rows' payloads to the cold tier and keep their rows here (before they are
        removed from the storage); rows the tier refuses are simply dropped."""
        cold, table = self.ctx.cold_tier, self.storage.table
        mass = table.columns["attention_mass"][rows].flatten(1).sum(-1)
        seen = table.columns["observations"][rows].flatten(1).sum(-1).clamp(min=1.0)
        modality = self.ctx.annotations.block_modality(table.block_index[rows], self.storage.block_size)
        kept = [row for i, row in enumerate(rows.tolist())
                if cold.evict(self.layer_idx, int(table.block_index[row]), int(table.format[row]),
                              self.storage.block_payload(row), float(mass[i] / seen[i]), int(modality[i]))]
        evicted = table.subset(torch.isin(torch.arange(len(table)), torch.tensor(kept, dtype=torch.long)))
        evicted.slot.fill_(-1)
        self.table.insert(evicted)

    def forget(self) -> None:
        """Remove this layer's blocks from the cold tier (the layer starts over)."""
        if self.attached and len(self.table):
            self.ctx.cold_tier.placement.forget(self.ids(torch.arange(len(self.table))))

    def keep_before(self, max_length: int) -> None:
        """Forget cold rows of tokens from ``max_length`` on (a crop)."""
        if len(self.table):
            self.table.keep(self.table.block_index * self.storage.block_size < max_length)

    def payload(self, row: int) -> dict[str, torch.Tensor]:
        """The stored tensors of cold-index row ``row``, read from the cold tier (not counted as a recall)."""
        tensors, _ = unpack_block(self.ctx.cold_tier.placement.peek(self.ids(torch.tensor([row]))[0]))
        return tensors

    def recall(self, blocks: torch.Tensor) -> int:
        """Bring the cold blocks among ``blocks`` (logical indices) back into the storage; returns how many.

        Their tokens leave the Global Summary while they are back. Inside a checkpoint, rolling it
        back returns them to the cold tier (the cache is then exactly as before the question).
        """
        if not self.attached or not len(self.table):
            return 0
        mask = torch.isin(self.table.block_index, blocks.cpu().long())
        if not bool(mask.any()):
            return 0
        hits = torch.nonzero(mask).flatten()
        fits = full_blocks_that_fit(self.ctx, self.storage, int(hits.numel()))
        if fits < hits.numel():  # the hard cap: recall only the best-ranked blocks that fit
            mask = torch.zeros_like(mask)
            mask[hits[:fits]] = True
            if not bool(mask.any()):
                return 0
        back = self.table.subset(mask)
        payloads = [self.ctx.cold_tier.fetch(block_id) for block_id in self.ids(torch.nonzero(mask).flatten())]
        self.table.keep(~mask)
        self.storage.take_back(back, payloads)
        if self.ctx.compression_suspended:  # the table holds copies of back's rows: keep it as the record
            back.slot.fill_(-1)
            self.recalled.append(back)
        return int(back.block_index.numel())

    def undo_recalls(self, since: int) -> None:
        """A rollback: rows recalled after the ``since``-th recall go back to the index (their payloads
        never left the cold tier; the storage's rows are removed by the caller)."""
        for recalled in self.recalled[since:]:
            self.table.insert(recalled)
        del self.recalled[since:]

    def keep_recalls(self, since: int) -> None:
        """A release: rows recalled after the ``since``-th recall stay resident for good."""
        del self.recalled[since:]

    # ------------------------------------------------------------------------------------------
    # Which cold blocks a query wants
    # ------------------------------------------------------------------------------------------

    def ranking(self, query: torch.Tensor, n_past: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cold rows by Quest bound for the latest queries: ``(wanted, likely)``.

        ``wanted``: the (at most ``recall_top_k``) cold rows that rank among the layer's best blocks;
        ``likely``: the best ``2 x recall_top_k`` cold rows, what the next steps will probably want.
        """
        storage = self.storage
        k = self.ctx.cold_tier.recall_top_k
        last = query[:, :, -self.settings.observation_window:]

        def bounds(table: PageTable, n: int) -> torch.Tensor:
            return quest_bounds(storage, table, n, last)[0].float().amax(dim=(0, 1)).cpu()

        cold_scores = bounds(self.table, len(self.table))
        likely = torch.topk(cold_scores, min(2 * k, cold_scores.numel())).indices
        wanted = likely[:k]
        # Compare with the blocks a decode step chooses among.
        choosable = question_rows(storage, self.settings, self.ctx, n_past)
        if choosable.numel():
            resident = bounds(storage.table, n_past)[choosable]
            threshold = torch.topk(resident, min(k, resident.numel())).values[-1]
            wanted = wanted[cold_scores[wanted] >= threshold]
        return wanted, likely

    def recall_predicted(self, query: torch.Tensor, n_past: int) -> None:
        """Decode: recall the cold blocks this query ranks high; question prefill: stage them ahead.

        Not in the placement's fallback mode (L1/L2 only: a low hit rate or saturated transfers).
        """
        tier = self.ctx.cold_tier
        if tier is None or not len(self.table) or not self.ctx.compression_suspended or tier.placement.mode == "fallback":
            return
        wanted, likely = self.ranking(query, n_past)
        if query.shape[2] == 1 and wanted.numel():
            likely_blocks = self.table.block_index[likely]
            self.recall(self.table.block_index[wanted])
            likely = torch.nonzero(torch.isin(self.table.block_index, likely_blocks)).flatten()
        # Stage what the next steps will probably want while this one computes.
        staged = [i for i in self.ids(likely) if not tier.staged(i)]
        tier.request(staged)
