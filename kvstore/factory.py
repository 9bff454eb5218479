"""The one way a KV cache is made, for batch prompts, live meetings, a resumed meeting and the benches.

A cache is the model's own ``DynamicCache`` when the KV store is off (``settings`` None), else a
:class:`~kvstore.cache.TieredCache` with the cold tier, if any, attached before the first token: blocks evicted
from then on go to it, not away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedConfig
    from transformers.cache_utils import Cache

    from kvstore.cold import ColdTier
    from kvstore.config import TieredCacheConfig


def build_cache(model_config: "PreTrainedConfig", settings: "TieredCacheConfig | None",
                cold_tier: "ColdTier | None" = None) -> "Cache":
    """A fresh cache for ``model_config``'s layers (sliding-window layers keep a window, the rest are tiered)."""
    if settings is None:
        if cold_tier is not None:
            raise ValueError("a cold tier needs the KV store: a DynamicCache evicts nothing")
        from transformers import DynamicCache

        return DynamicCache(config=model_config)
    from kvstore.cache import TieredCache

    cache = TieredCache(config=model_config, settings=settings)
    if cold_tier is not None:
        cache.attach_cold_tier(cold_tier)
    return cache
