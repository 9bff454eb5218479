"""What a tiered layer's parts may see of the cache that owns them (a narrow view, not the cache).

The parts of :class:`~kvstore.layers.TieredLayer` (block storage, compression policy, cold index,
attention) need a few facts shared by every layer of one cache: the token annotations and block
priorities, whether the minutia attention reads the blocks, whether a checkpoint holds compression
back, the device cap and the cold tier. :class:`~kvstore.cache.TieredCache` provides them; typing
the parts against this protocol keeps them from reaching into the rest of the cache (and kvstore's
layer modules from importing cache.py back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kvstore.annotations import BlockPriorities, TokenAnnotations
    from kvstore.cold import ColdTier


class LayerContext(Protocol):
    annotations: "TokenAnnotations"  # flags and modality per token position
    priorities: "BlockPriorities"  # blocks a question promoted or pinned
    cold_tier: "ColdTier | None"  # where evicted blocks wait for a question (None: they are dropped)

    @property
    def sparse_attention(self) -> bool:
        """Whether the minutia attention reads the blocks itself (dropping needs its summary term)."""

    @property
    def compression_suspended(self) -> bool:
        """True while a checkpoint is open: nothing older than it may change format."""

    @property
    def num_tiered_layers(self) -> int:
        """How many layers share the cache-wide byte budgets."""

    def watermark_budget_per_layer(self) -> int | None:
        """This layer's share of the device cap's watermark (None without a cap)."""

    def device_room(self) -> int | None:
        """Bytes recalled blocks may still take on the device (None without a cap)."""

    def checkpoint_length(self) -> int:
        """Tokens before the first open checkpoint (the meeting, without a question's tokens)."""

    def note_refused_recalls(self, count: int) -> None:
        """Count cold blocks a question wanted but the device cap had no room for."""
