"""Tier placement: budgets and scores, watermark control, prefetch hit rate and fallback, manager stats."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from kvstore.annotations import Modality
from kvstore.cache import TieredCache
from kvstore.crypto import EncryptedStore, MasterKey
from kvstore.manager import KVCacheManager
from kvstore.placement import Tier, TierPlacement
from kvstore.prefetch import Prefetcher
from kvstore.tier_guards import HitRateWindow, WatermarkController
from kvstore.stores.disk import DiskStore
from kvstore.stores.memory import MemoryStore

try:
    from kv_helpers import feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids

BLOCK = 1000


def _placement(tmp_path: Path, cap_blocks: int = 10, window: HitRateWindow | None = None) -> TierPlacement:
    tiers = {
        Tier.DEVICE: MemoryStore("cpu", tier="device"),
        Tier.HOST: MemoryStore("cpu", tier="host"),
        Tier.DISK: EncryptedStore(DiskStore(tmp_path / "disk"), MasterKey(b"m" * 32)),
    }
    from kvstore.placement import PlacementPolicy

    return TierPlacement(tiers, "s", WatermarkController(cap_blocks * BLOCK, target=0.8, band=0.1),
                         PlacementPolicy(host_bytes=10 * BLOCK), window)


def test_hit_rate_is_not_applicable_before_any_read(tmp_path: Path) -> None:
    placement = _placement(tmp_path)
    placement.put("b0", b"x" * BLOCK, score=1.0)
    assert placement.stats()["prefetch_hit_rate"] is None and placement.stats()["window_hit_rate"] is None
    placement.read("b0")
    assert placement.stats()["prefetch_hit_rate"] in (0.0, 1.0)


def test_plan_follows_scores_modality_and_budgets(tmp_path: Path) -> None:
    placement = _placement(tmp_path)
    for i in range(30):
        placement.put(f"b{i}", bytes([i]) * BLOCK, score=float(i), modality=int(Modality.TEXT))
    placement.update_scores({"b29": 100.0})
    placement.blocks["b28"].modality = int(Modality.VIDEO)  # video counts less: 28 * 0.8 < 27
    plan = placement.plan(device_budget=3 * BLOCK)
    assert sorted(b for b, t in plan.items() if t == Tier.DEVICE) == ["b26", "b27", "b29"]
    assert sum(t == Tier.HOST for t in plan.values()) == 10 and plan["b0"] == Tier.DISK
    placement.rebalance()
    sealed = EncryptedStore.sealed_size(BLOCK, "s")  # the encrypted disk tier counts what it holds
    assert sealed > BLOCK
    assert placement.tier_bytes() == {"device": 8 * BLOCK, "host": 10 * BLOCK, "disk": 12 * sealed, "redis": 0}
    assert placement.read("b0") == bytes([0]) * BLOCK  # from the encrypted disk tier
    assert placement.read("b29") == bytes([29]) * BLOCK


def test_watermark_hysteresis_and_hard_cap(tmp_path: Path) -> None:
    placement = _placement(tmp_path, cap_blocks=10)  # target 8 blocks, band 7..9
    for i in range(40):
        placement.put(f"b{i}", b"x" * BLOCK, score=random.random())
        placement.rebalance()
        assert placement.tier_bytes()["device"] <= 10 * BLOCK
    assert placement.tier_bytes()["device"] == 8 * BLOCK
    assert placement.controller.peak_bytes <= placement.controller.cap_bytes
    before = {b: i.tier for b, i in placement.blocks.items()}
    placement.update_scores({b: random.random() for b in placement.blocks})
    placement.rebalance()  # inside the band: the device set stays (host/disk may reshuffle by score)
    assert {b for b, t in before.items() if t == Tier.DEVICE} == \
        {b for b, i in placement.blocks.items() if i.tier == Tier.DEVICE}
    before = {b: i.tier for b, i in placement.blocks.items()}
    assert not placement.move(next(b for b, t in before.items() if t == Tier.HOST), Tier.DEVICE) or \
        placement.tier_bytes()["device"] <= 10 * BLOCK
    for b in [b for b, t in before.items() if t != Tier.DEVICE][:5]:
        placement.move(b, Tier.DEVICE)
    assert placement.tier_bytes()["device"] == 10 * BLOCK  # the cap refused the rest


def test_prefetch_hits_when_predictions_are_right(tmp_path: Path) -> None:
    placement = _placement(tmp_path, cap_blocks=6)
    for i in range(40):
        placement.put(f"b{i}", bytes([i]) * BLOCK, score=0.0)
    placement.rebalance()
    prefetcher = Prefetcher(placement, top_k=4)
    rng = random.Random(0)
    for step in range(30):
        wanted = [f"b{j}" for j in rng.sample(range(40), 4)]
        scores = {b: (1.0 if b in wanted else 0.0) for b in placement.blocks}  # the query's block scores
        prefetcher.request(prefetcher.predict(scores))
        prefetcher.wait()  # the decode step reads after its prefetch finished
        for block_id in wanted:
            assert placement.read(block_id) == bytes([int(block_id[1:])]) * BLOCK
        assert placement.tier_bytes()["device"] <= 6 * BLOCK
    prefetcher.close()
    stats = placement.stats()
    assert stats["prefetch_hit_rate"] == 1.0 and stats["mode"] == "normal"
    assert stats["transfer_gbps"]["disk->device"] > 0 and not prefetcher.errors


def test_low_hit_rate_falls_back_to_l1_l2_only(tmp_path: Path, caplog) -> None:
    placement = _placement(tmp_path, cap_blocks=4, window=HitRateWindow(window=20, threshold=0.5, cooldown=50))
    for i in range(24):
        placement.put(f"b{i}", b"y" * BLOCK, score=float(i))
    placement.rebalance()
    assert placement.tier_bytes()["disk"] > 0
    with caplog.at_level(logging.WARNING, logger="kvstore.placement"):
        for i in range(20):  # reads of cold blocks, nothing predicted
            placement.read(f"b{i % 8}")
    assert placement.mode == "fallback" and "fallback mode" in caplog.text
    assert placement.tier_bytes()["disk"] == 0  # L1/L2-only: nothing below the host tier
    for _ in range(50):
        placement.read("b0")
    assert placement.mode == "normal"  # retried after the cool-down


def test_manager_stats_report_tiers(tmp_path: Path) -> None:
    model = tiny_model("llama")
    cache = TieredCache(config=model.config, block_size=8)
    feed(model, cache, token_ids(100))
    placement = _placement(tmp_path, cap_blocks=10)
    manager = KVCacheManager(cache, placement)
    assert manager.spill(0) == 13 and manager.spill(1, [0, 1, 2], score=5.0) == 3
    block_bytes = len(placement.read("L0.b0"))
    placement.controller.cap_bytes = 4 * block_bytes
    placement.rebalance()
    summary = manager.report().as_dict()
    tiers = summary["bytes_per_location"]
    assert set(tiers) == {"device", "host", "disk", "redis"} and sum(tiers.values()) > 0
    assert 0 < tiers["device"] <= 4 * block_bytes
    assert summary["mode"] == "normal" and summary["transfer_gbps"]
    assert 0.0 <= summary["prefetch_hit_rate"] <= 1.0
    with pytest.raises(RuntimeError, match="no TierPlacement"):
        KVCacheManager(cache).spill(0)
