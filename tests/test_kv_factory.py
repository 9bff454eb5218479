"""kvstore.factory.build_cache is the one way a cache is made (batch, live, resume, benches): the KV store off
gives the model's own cache; on, a TieredCache with the cold tier attached before the first token."""

from __future__ import annotations

import pytest
from transformers import DynamicCache

from app.platform.config import KVSettings, kv_cache
from kvstore.attention import MINUTIA_ATTENTION
from kvstore.cache import TieredCache
from kvstore.cold import ColdTier
from kvstore.config import TieredCacheConfig
from kvstore.factory import build_cache
from kvstore.placement import Tier, TierPlacement
from kvstore.tier_guards import WatermarkController
from kvstore.stores.memory import MemoryStore

try:
    from kv_helpers import feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids


def _cold() -> ColdTier:
    tiers = {Tier.DEVICE: MemoryStore("cpu", tier="device"), Tier.HOST: MemoryStore("cpu", tier="host")}
    return ColdTier(TierPlacement(tiers, "meeting", WatermarkController(1 << 20)), recall_top_k=4)


def test_off_is_the_models_own_cache_and_refuses_a_cold_tier():
    model = tiny_model("llama")
    assert type(build_cache(model.config, None)) is DynamicCache
    with pytest.raises(ValueError, match="cold tier needs the KV store"):
        build_cache(model.config, None, _cold())


def test_on_evicts_to_the_cold_tier_from_the_first_token():
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    settings = TieredCacheConfig(block_size=8, compress=True, budget_ratio=0.3, warm_kinds=("int4",), sink_tokens=4,
                                 recent_tokens=16, allow_drop=True)
    cache = build_cache(model.config, settings, _cold())
    assert isinstance(cache, TieredCache) and cache.cold_tier is not None
    feed(model, cache, token_ids(320), chunk=32)
    assert cache.cold_tier.stats()["cold_blocks"] > 0  # what the budget could not hold went to the cold tier, not away


def test_the_apps_settings_pick_the_kind():
    model = tiny_model("llama")
    assert type(kv_cache(KVSettings(enabled=False), model.config)) is DynamicCache
    on = kv_cache(KVSettings(), model.config, budget_bytes=1 << 16)
    assert isinstance(on, TieredCache) and on.settings.budget_bytes == 1 << 16
