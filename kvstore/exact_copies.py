"""Exact copies: a low-bit block read at full precision while a question's queries point at it.

Quantized to INT2 or INT4, a block still tells the model *that* a code, an amount or a name was said
there, but its digits and names come back wrong (issue 21: needles 0.51 of the full cache's at 25% of
the bytes, with the needles' tokens still kept). ShadowKV and InfiniGen keep the full KV off the device
and read the few blocks a query needs. Here, with ``ColdTier(exact_copies=True)``: when a block first
leaves full precision its full payload goes to the cold tier as well (host memory first, sealed where
the tier is encrypted); while a checkpoint is open (a question and its answer), the quantized blocks
the current queries rank highest (Quest bound, as the cold recall) are read from that copy instead.
Rolling the checkpoint back puts the low-bit rows back, so the cache after an answer is exactly what it
was before. The device budget is unchanged; the copies cost host memory (the full cache's size at
most) and a read per block a question wants.

One job: the copies of one tiered layer and the rows upgraded from them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from kvstore.block_storage import BlockStorage
from kvstore.blocks import BlockFormat
from kvstore.cold_index import full_blocks_that_fit, question_rows
from kvstore.config import TieredCacheConfig
from kvstore.layer_attention import quest_bounds
from kvstore.layer_context import LayerContext
from kvstore.stores.base import StoreError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Upgrade:
    """A row read from its exact copy: what to put back when the checkpoint is rolled back."""

    block: int  # logical block index
    format: int  # its low-bit format
    slot: torch.Tensor  # its low-bit slots ``[B]`` (kept allocated while the upgrade lasts)


class ExactCopies:
    """Full-precision copies of one layer's quantized blocks in the cold tier, and the rows read from them."""

    def __init__(self, layer_idx: int, storage: BlockStorage, settings: TieredCacheConfig, ctx: LayerContext) -> None:
        self.layer_idx = layer_idx
        self.storage = storage
        self.settings = settings
        self.ctx = ctx
        self.blocks: set[int] = set()  # logical blocks with a copy in the cold tier
        self.upgraded: list[Upgrade] = []  # rows read from their copy while a checkpoint is open

    @property
    def enabled(self) -> bool:
        tier = self.ctx.cold_tier
        return tier is not None and tier.exact_copies

    def keep(self, rows: torch.Tensor, new_format: torch.Tensor) -> None:
        """Copy the full-precision rows among ``rows`` that are about to become ``new_format`` (quantized)
        to the cold tier (before the conversion; blocks holding personal data are not copied)."""
        if not self.enabled or rows.numel() == 0:
            return
        table, tier = self.storage.table, self.ctx.cold_tier
        leaving = rows[(table.format[rows] == BlockFormat.FULL) & (new_format > int(BlockFormat.FULL))]
        if leaving.numel() == 0:
            return
        modality = self.ctx.annotations.block_modality(table.block_index[leaving], self.storage.block_size)
        for i, row in enumerate(leaving.tolist()):
            block = int(table.block_index[row])
            if block in self.blocks:
                continue
            if tier.keep_copy(self.layer_idx, block, self.storage.block_payload(row), int(modality[i])):
                self.blocks.add(block)

    def upgrade(self, query: torch.Tensor, n_past: int) -> int:
        """While a checkpoint is open: read the quantized blocks among the ``recall_top_k`` best-bounded
        past rows (the meeting's, not sinks or the recent window) from their copies, up to the tier's
        ``exact_max_blocks`` per layer for the question. Returns how many."""
        if not self.enabled or not self.blocks or not self.ctx.compression_suspended or n_past == 0:
            return 0
        storage = self.storage
        choosable = question_rows(storage, self.settings, self.ctx, n_past)
        if choosable.numel() == 0:
            return 0
        last = query[:, :, -self.settings.observation_window:]
        bounds = quest_bounds(storage, storage.table, n_past, last)[0].float().amax(dim=(0, 1)).cpu()[choosable]
        best = choosable[torch.topk(bounds, min(self.ctx.cold_tier.recall_top_k, choosable.numel())).indices]
        return self._read_exact(best)

    def upgrade_blocks(self, blocks: torch.Tensor) -> int:
        """While a checkpoint is open: read the quantized rows of ``blocks`` (logical indices: the lines a
        question retrieved) from their copies. Returns how many."""
        if not self.enabled or not self.blocks or not self.ctx.compression_suspended:
            return 0
        return self._read_exact(torch.nonzero(torch.isin(self.storage.table.block_index, blocks.cpu().long())).flatten())

    def _read_exact(self, rows: torch.Tensor) -> int:
        """Point the quantized ``rows`` (best first) that have copies at full-precision slots holding them."""
        storage, table, tier = self.storage, self.storage.table, self.ctx.cold_tier
        wanted = [int(r) for r in rows.tolist() if int(table.format[r]) != BlockFormat.FULL
                  and int(table.block_index[r]) in self.blocks]
        wanted = wanted[:max(tier.exact_max_blocks - len(self.upgraded), 0)]  # the first ones a question wants
        wanted = wanted[:full_blocks_that_fit(self.ctx, storage, len(wanted))]  # the device cap, best first
        upgraded = 0
        for row in wanted:
            block = int(table.block_index[row])
            try:
                payload = tier.read_copy(self.layer_idx, block)
            except StoreError as exc:  # shredded, tampered with, a tier gone: the low-bit row still answers
                log.warning("layer %d block %d: exact copy unreadable, read quantized (%s)", self.layer_idx, block, exc)
                self.blocks.discard(block)
                continue
            slot = storage.store_payloads(torch.tensor([int(BlockFormat.FULL)]), [payload])[0]
            self.upgraded.append(Upgrade(block, int(table.format[row]), table.slot[row].clone()))
            table.set_format(torch.tensor([row]), BlockFormat.FULL, slot)
            upgraded += 1
        return upgraded

    def undo(self, since: int) -> None:
        """A rollback: rows upgraded after the ``since``-th upgrade go back to their low-bit slots."""
        table = self.storage.table
        for up in reversed(self.upgraded[since:]):
            row = torch.nonzero(table.block_index == up.block).flatten()
            if row.numel():
                r = int(row[0])
                self.storage.pools[int(BlockFormat.FULL)].free(table.slot[r])
                table.set_format(torch.tensor([r]), up.format, up.slot)
            else:  # the row left meanwhile (not while compression is suspended): free what it held
                self.storage.pools[up.format].free(up.slot)
        del self.upgraded[since:]

    def keep_upgrades(self, since: int) -> None:
        """A release: rows upgraded after the ``since``-th upgrade stay at full precision (the low-bit
        slots are freed; the next compression pass plans them like any other full block)."""
        for up in self.upgraded[since:]:
            self.storage.pools[up.format].free(up.slot)
        del self.upgraded[since:]

    def keep_before(self, max_length: int) -> None:
        """Forget the copies of blocks from ``max_length`` on (a crop; their payloads stay until :meth:`forget`)."""
        self.blocks = {b for b in self.blocks if b * self.storage.block_size < max_length}

    def forget(self) -> None:
        """Remove this layer's copies from the cold tier (the layer starts over)."""
        if self.enabled and self.blocks:
            tier = self.ctx.cold_tier
            tier.placement.forget([tier.copy_id(self.layer_idx, b) for b in sorted(self.blocks)])
        self.blocks.clear()
