"""KVCacheManager: block movement between tiers and storage-measured stats."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from kvstore.annotations import Modality
from kvstore.attention import MINUTIA_ATTENTION
from kvstore.blocks import BlockFormat
from kvstore.cache import TieredCache
from kvstore.manager import KVCacheManager
from kvstore.report import PrecisionTier as Tier

try:
    from kv_helpers import feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids


def _setup(attn: str = MINUTIA_ATTENTION):
    model = tiny_model("llama", attn=attn)
    cache = TieredCache(config=model.config, block_size=16)
    cache.annotations.set_modality(range(64, 128), Modality.AUDIO)
    feed(model, cache, token_ids(200), chunk=50)
    return model, cache, KVCacheManager(cache)


def test_demote_promote_free_and_stats() -> None:
    model, cache, manager = _setup()
    layer = cache.tiered_layers[0]
    full_block = layer.pools[BlockFormat.FULL].slot_bytes * layer.batch
    before = manager.report()
    assert before.per_tier[Tier.L1_HOT].blocks == 2 * 13 and before.per_tier[Tier.L1_HOT].tokens == 2 * 200
    assert before.per_modality[Modality.AUDIO].blocks == 2 * 4

    assert manager.demote(0, [1, 2, 3], BlockFormat.INT8) == 3
    assert manager.demote(0, [2, 3], BlockFormat.INT4) == 2
    assert manager.demote(0, [1], BlockFormat.INT8) == 0, "already there"
    assert manager.promote(0, [3]) == 1
    assert layer.table.format[:4].tolist() == [BlockFormat.FULL, BlockFormat.INT8, BlockFormat.INT4, BlockFormat.FULL]
    assert manager.free(0, [5, 6, 99]) == 2  # block 99 does not exist

    assert manager.report().prefetch_hit_rate is None, "no prefetch asked yet: n/a, not 100%"
    assert manager.prefetch(0, [4, 5, 6, 7]).tolist() == [True, False, False, True]

    stats = manager.report()
    layer0 = stats.per_layer[0]
    assert layer0[Tier.L1_HOT].blocks == 13 - 2 - 2
    assert layer0[Tier.L2_WARM].blocks == 2
    assert layer0[Tier.L3_COLD].tokens == 32
    assert layer0[Tier.L1_HOT].bytes == layer.pools[BlockFormat.FULL].used_count * layer.pools[BlockFormat.FULL].slot_bytes
    assert layer0[Tier.L2_WARM].bytes < 2 * full_block
    assert stats.prefetch_hit_rate == 0.5
    layer.table.check_invariants(layer.pools)
    # The model still runs on the managed cache.
    assert torch.isfinite(feed(model, cache, token_ids(3, seed=5))).all()
    assert manager.report().as_dict()["tiers"]["L2_WARM"]["blocks"] == 2


def test_alloc_pre_grows_and_guards() -> None:
    model, cache, manager = _setup()
    capacity = manager.alloc(0, 40)
    assert capacity >= 40 + cache.tiered_layers[0].pools[BlockFormat.FULL].used_count
    with pytest.raises(ValueError):
        manager.demote(0, [12], BlockFormat.INT8)  # the partial tail block
    with pytest.raises(ValueError):
        manager.demote(0, [1], BlockFormat.FULL)
    cp = cache.checkpoint()
    with pytest.raises(RuntimeError):
        manager.demote(0, [1], BlockFormat.INT8)
    cache.rollback(cp)


def test_free_needs_the_minutia_attention() -> None:
    _, _, manager = _setup(attn="sdpa")
    with pytest.raises(RuntimeError):
        manager.free(0, [1])


def test_promoted_blocks_read_like_before() -> None:
    """Demote to INT8 then promote: the cache returns the INT8-rounded values, at full precision storage."""
    model, cache, manager = _setup(attn="sdpa")
    manager.demote(0, [2], BlockFormat.INT8)
    k_int8, _ = cache.tiered_layers[0].dense_kv()
    manager.promote(0, [2])
    k_back, _ = cache.tiered_layers[0].dense_kv()
    assert torch.equal(k_int8, k_back)
    reference = DynamicCache(config=model.config)
    feed(model, reference, token_ids(200), chunk=50)
    assert (k_back - reference.layers[0].keys).abs().max() > 0  # precision was lost, as documented


def test_one_report_for_cache_manager_and_dashboards() -> None:
    """The cache's stats, the manager's report and the per-layer entries are one account."""
    model, cache, manager = _setup()
    manager.demote(0, [1, 2], BlockFormat.INT4)
    report = manager.report()
    stats = cache.stats()
    assert stats == {**report.as_dict(), "prefetch_hit_rate": stats["prefetch_hit_rate"]}
    by_tier = stats["bytes_by_tier"]
    assert by_tier["L1"] == report.per_tier[Tier.L1_HOT].bytes and by_tier["L2"] == report.per_tier[Tier.L2_WARM].bytes
    assert sum(entry["kv_bytes"] for entry in stats["layers"]) == stats["kv_bytes"] == cache.kv_bytes()
    assert stats["layers"][0]["formats"]["int4"]["blocks"] == 2
    assert report.prefetch_hit_rate is None


def test_prefetch_hands_cold_blocks_to_the_cold_tier(tmp_path) -> None:
    """Blocks waiting in the cold tier are staged by its prefetcher; a recall then reads them from there."""
    from kvstore.cold import ColdTier
    from kvstore.placement import PlacementPolicy, Tier as Location, TierPlacement
    from kvstore.tier_guards import WatermarkController
    from kvstore.stores.memory import MemoryStore

    model = tiny_model("llama", attn=MINUTIA_ATTENTION)
    cache = TieredCache(config=model.config, block_size=16)
    placement = TierPlacement({Location.DEVICE: MemoryStore("cpu", tier="device"), Location.HOST: MemoryStore("cpu", tier="host")},
                              "s", WatermarkController(1 << 30, target=0.8, band=0.1), PlacementPolicy(host_bytes=1 << 30))
    cache.attach_cold_tier(ColdTier(placement, recall_top_k=4))
    feed(model, cache, token_ids(200), chunk=50)
    manager = KVCacheManager(cache)
    assert manager.free(0, [2, 3]) == 2 and len(cache.layers[0].cold) == 2
    found = manager.prefetch(0, [1, 2, 3])
    assert found.tolist() == [True, False, False]
    cache.cold_tier.wait()
    assert cache.cold_tier.stats()["requested"] == 2
    assert manager.recall(0, [2, 3]) == 2 and manager.prefetch(0, [2, 3]).all()
    report = manager.report()
    assert (report.prefetch_requests, report.prefetch_hits) == (5, 3)
