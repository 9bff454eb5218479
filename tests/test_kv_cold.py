"""The cold tier: evicted blocks kept on host / disk (encrypted), recalled for a question, rolled back after."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

from kvstore.attention import MINUTIA_ATTENTION
from kvstore.cache import TieredCache
from kvstore.manager import KVCacheManager
from kvstore.cold import ColdTier
from kvstore.crypto import EncryptedStore, MasterKey, TamperedBlock
from kvstore.placement import PlacementPolicy, Tier, TierPlacement
from kvstore.tier_guards import WatermarkController
from kvstore.stores.base import pack_block
from kvstore.stores.disk import DiskStore
from kvstore.stores.memory import MemoryStore

try:
    from kv_helpers import feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids

SETTINGS = dict(block_size=8, compress=True, budget_ratio=0.3, warm_kinds=("int4",), sink_tokens=4,
                recent_tokens=16, allow_drop=True)


def _cold_tier(tmp_path: Path, host_bytes: int | None = None, staging_bytes: int = 1 << 20) -> ColdTier:
    tiers = {Tier.DEVICE: MemoryStore("cpu", tier="device"), Tier.HOST: MemoryStore("cpu", tier="host"),
             Tier.DISK: EncryptedStore(DiskStore(tmp_path / "cold"), MasterKey.generate(tmp_path / "master.key"))}
    placement = TierPlacement(tiers, "meeting", WatermarkController(staging_bytes),
                              PlacementPolicy(host_bytes=host_bytes))
    return ColdTier(placement, recall_top_k=4)


def _meeting(tmp_path: Path, arch: str = "llama", cold: bool = True, length: int = 320):
    model = tiny_model(arch, attn=MINUTIA_ATTENTION, sharpen=4.0)
    cache = TieredCache(config=model.config, **SETTINGS)
    tier = _cold_tier(tmp_path) if cold else None
    cache.attach_cold_tier(tier)
    feed(model, cache, token_ids(length), chunk=32)
    return model, cache, tier


def _probe(model, cache, ids: torch.Tensor) -> torch.Tensor:
    checkpoint = cache.checkpoint()
    try:
        return feed(model, cache, ids)[0, -1].float().cpu()
    finally:
        cache.rollback(checkpoint)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_evicted_blocks_go_to_the_cold_tier_with_their_payload(tmp_path: Path, arch: str) -> None:
    _, cache, tier = _meeting(tmp_path, arch)
    plain_model, plain, _ = _meeting(tmp_path / "plain", arch, cold=False)
    for layer, twin in zip(cache.tiered_layers, plain.tiered_layers):
        assert len(layer.cold) > 0, "the budget must have evicted blocks"
        # Same decisions as without a cold tier: the cold index holds exactly what the twin dropped.
        assert torch.equal(layer.table.block_index, twin.table.block_index)
        assert torch.equal(layer.summary.count, twin.summary.count)
        assert torch.isin(layer.cold.block_index, layer.table.block_index).sum() == 0
        for block, fmt in zip(layer.cold.block_index.tolist(), layer.cold.format.tolist()):
            assert tier.placement.tier_of(ColdTier.block_id(layer.layer_idx, block, fmt)) is not None
    stats = tier.stats()
    assert stats["cold_blocks"] == sum(len(layer.cold) for layer in cache.tiered_layers)
    assert stats["bytes_per_tier"]["host"] > 0


def test_recall_then_rollback_leaves_the_cache_exactly_as_before(tmp_path: Path) -> None:
    model, cache, tier = _meeting(tmp_path)
    probe = token_ids(5, seed=7)
    before = _probe(model, cache, probe)
    sizes = [(len(layer.table), len(layer.cold), layer.summary.count.clone()) for layer in cache.tiered_layers]

    checkpoint = cache.checkpoint()
    report = KVCacheManager(cache).recall_tokens([(0, cache.get_seq_length())])
    assert report.cold == 0 and report.full + report.quantized == report.blocks * cache.num_tiered_layers - report.dropped
    for layer in cache.tiered_layers:
        assert len(layer.cold) == 0
        assert float(layer.summary.count.max()) == 0.0, "recalled tokens leave the summary"
        layer.table.check_invariants(layer.pools)
    feed(model, cache, probe)
    cache.rollback(checkpoint)

    after = _probe(model, cache, probe)
    assert (before - after).abs().max().item() <= 1e-6
    for layer, (rows, cold, count) in zip(cache.tiered_layers, sizes):
        assert (len(layer.table), len(layer.cold)) == (rows, cold)
        assert torch.equal(layer.summary.count, count)
        layer.table.check_invariants(layer.pools)



def test_recall_goes_through_the_managers_prefetch_which_counts_resident_blocks_as_hits(tmp_path: Path) -> None:
    _, cache, _ = _meeting(tmp_path)
    manager = KVCacheManager(cache)
    cold = sum(len(layer.cold) for layer in cache.tiered_layers)
    assert cold > 0 and manager.report().prefetch_requests == 0
    checkpoint = cache.checkpoint()
    manager.recall_tokens([(0, cache.get_seq_length())])
    report = manager.report()
    cache.rollback(checkpoint)
    blocks = -(-cache.get_seq_length() // cache.settings.block_size)
    assert report.prefetch_requests == blocks * cache.num_tiered_layers
    resident = sum(len(layer.table) for layer in cache.tiered_layers)
    assert report.prefetch_hits == resident  # the cold (and dropped) blocks were the misses

def test_recalled_blocks_bring_the_logits_back_towards_the_full_cache(tmp_path: Path) -> None:
    model, cache, _ = _meeting(tmp_path)
    ids = token_ids(320)
    probe = token_ids(5, seed=7)
    full = DynamicCache(config=model.config)
    feed(model, full, ids, chunk=32)
    reference = feed(model, full, probe)[0, -1].float()

    compressed = _probe(model, cache, probe)
    checkpoint = cache.checkpoint()
    KVCacheManager(cache).recall_tokens([(0, cache.get_seq_length())])
    recalled = feed(model, cache, probe)[0, -1].float()
    cache.rollback(checkpoint)
    assert (recalled - reference).abs().max() < 0.5 * (compressed - reference).abs().max()


def test_decode_recalls_what_the_query_ranks_high_and_prefill_stages_it(tmp_path: Path) -> None:
    model, cache, tier = _meeting(tmp_path)
    placement = tier.placement
    checkpoint = cache.checkpoint()
    feed(model, cache, token_ids(6, seed=3))  # the question: stages the cold blocks it ranks high
    tier.wait()
    staged = [b for b, info in placement.blocks.items() if info.tier == Tier.DEVICE]
    assert staged and tier.counts.requested >= len(staged)
    reads_before = placement.hits.total_reads
    for step in range(4):  # decoding: recalled, counted as hits when they were staged
        feed(model, cache, token_ids(1, seed=20 + step))
    assert tier.counts.recalled > 0
    assert placement.hits.total_reads - reads_before == tier.counts.recalled
    assert placement.hits.total_hits > 0
    cold_during = sum(len(layer.cold) for layer in cache.tiered_layers)
    cache.rollback(checkpoint)
    assert sum(len(layer.cold) for layer in cache.tiered_layers) > cold_during, "rollback returns them"
    assert placement.stats()["prefetch_hit_rate"] > 0


def test_blocks_past_the_host_budget_go_to_disk_encrypted_and_tampering_is_refused(tmp_path: Path) -> None:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    cache = TieredCache(config=model.config, **SETTINGS)
    tier = _cold_tier(tmp_path, host_bytes=0)
    cache.attach_cold_tier(tier)
    feed(model, cache, token_ids(320), chunk=32)
    placement = tier.placement
    assert placement.tier_bytes()["disk"] > 0 and placement.tier_bytes()["host"] == 0
    disk = placement.tiers[Tier.DISK]
    disk.flush()
    layer = cache.tiered_layers[0]
    block, fmt = int(layer.cold.block_index[0]), int(layer.cold.format[0])
    block_id = ColdTier.block_id(layer.layer_idx, block, fmt)
    path = disk.inner._path("meeting", block_id)
    assert path.is_file(), "the block is a file on disk"
    raw = path.read_bytes()
    row = layer.cold.block_index.tolist().index(block)
    assert pack_block({"probe": torch.zeros(1)})[:4] not in raw, "the payload is not stored in clear"
    # Flip one ciphertext byte and fix the file's own checksum, so only the AEAD tag can catch it.
    edited = disk.inner.get("meeting", block_id)
    disk.inner.put("meeting", block_id, edited[:-1] + bytes([edited[-1] ^ 1]))
    disk.inner.flush()
    checkpoint = cache.checkpoint()
    with pytest.raises(TamperedBlock):
        KVCacheManager(cache).recall_tokens([(block * 8, block * 8 + 8)])
    cache.rollback(checkpoint)
    assert int(layer.cold.block_index[row]) == block, "a failed recall loses nothing"


def test_the_watermark_moves_the_budget_under_a_device_cap_that_is_never_crossed(tmp_path: Path) -> None:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    probe = TieredCache(config=model.config, block_size=8)
    feed(model, probe, token_ids(640), chunk=32)
    full = probe.kv_bytes()
    cap = int(0.4 * full)
    cache = TieredCache(config=model.config, **{**SETTINGS, "budget_ratio": 1.0, "device_cap_bytes": cap})
    tier = _cold_tier(tmp_path, staging_bytes=4096)
    cache.attach_cold_tier(tier)
    feed(model, cache, token_ids(640), chunk=32)
    assert cache.peak_device_bytes <= cap, "the hard cap holds while prefilling"
    assert cache.device_bytes() <= 0.85 * cap + 4096, "compression brought the KV under the watermark"
    assert sum(len(layer.cold) for layer in cache.tiered_layers) > 0
    checkpoint = cache.checkpoint()
    KVCacheManager(cache).recall_tokens([(0, cache.get_seq_length())])  # wants everything back: only what fits comes
    assert cache.device_bytes() <= cap and cache.refused_recalls > 0
    feed(model, cache, token_ids(4, seed=5))
    cache.rollback(checkpoint)
    assert cache.peak_device_bytes <= cap and cache.stats()["device_cap_bytes"] == cap


def test_saturated_transfers_fall_back_to_l1_l2_only_and_stop_recalls(tmp_path: Path) -> None:
    model, cache, tier = _meeting(tmp_path)
    placement = tier.placement
    tier.prefetcher.max_backlog = 1
    with placement._lock:  # the prefetch worker cannot move anything: requests pile up
        tier.request(["L0.b0.f0"])
        tier.request(["L0.b1.f0"])
        assert placement.mode == "fallback" and "saturated" in placement.stats()["fallback_reason"]
    tier.wait()
    checkpoint = cache.checkpoint()
    recalled = tier.counts.recalled
    for step in range(3):
        feed(model, cache, token_ids(1, seed=30 + step))
    assert tier.counts.recalled == recalled, "no recalls from the cold tier in fallback mode"
    cache.rollback(checkpoint)


def test_a_saved_meeting_keeps_its_cold_blocks_and_a_resumed_one_recalls_them(tmp_path: Path) -> None:
    from kvstore.persist import load_session, save_session

    model, cache, tier = _meeting(tmp_path)
    store = EncryptedStore(DiskStore(tmp_path / "sessions"), MasterKey.generate(tmp_path / "sessions.key"))
    save_session(store, "standup", cache)
    probe = token_ids(5, seed=7)

    def recalled_logits(c) -> torch.Tensor:
        checkpoint = c.checkpoint()
        KVCacheManager(c).recall_tokens([(0, c.get_seq_length())])
        out = feed(model, c, probe)[0, -1].float()
        c.rollback(checkpoint)
        return out

    before, plain_before = recalled_logits(cache), _probe(model, cache, probe)
    fresh = _cold_tier(tmp_path / "second")
    resumed, _ = load_session(store, "standup", model.config, settings=cache.settings, cold_tier=fresh)
    for layer, twin in zip(resumed.tiered_layers, cache.tiered_layers):
        assert torch.equal(layer.cold.block_index, twin.cold.block_index) and len(layer.cold) > 0
    assert fresh.stats()["cold_blocks"] == tier.stats()["cold_blocks"]
    assert (_probe(model, resumed, probe) - plain_before).abs().max().item() <= 1e-5
    assert (recalled_logits(resumed) - before).abs().max().item() <= 1e-5
    dropped, _ = load_session(store, "standup", model.config, settings=cache.settings)  # no cold tier: dropped
    assert all(len(layer.cold) == 0 for layer in dropped.tiered_layers)
    assert (_probe(model, dropped, probe) - plain_before).abs().max().item() <= 1e-5
