"""Exact copies: quantized blocks a question wants are read at full precision, and put back after."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from kvstore.attention import MINUTIA_ATTENTION
from kvstore.blocks import BlockFormat
from kvstore.cache import TieredCache
from kvstore.cold import ColdTier
from kvstore.placement import Tier, TierPlacement
from kvstore.tier_guards import WatermarkController
from kvstore.stores.memory import MemoryStore

try:
    from kv_helpers import feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids

# INT2 only and no drops: every settled block outside the sinks and the recent window is quantized.
SETTINGS = dict(block_size=8, compress=True, budget_ratio=0.3, warm_kinds=("int2",), sink_tokens=4,
                recent_tokens=16, allow_drop=False)
LENGTH = 320


def _tier(exact: bool, max_blocks: int) -> ColdTier:
    tiers = {Tier.DEVICE: MemoryStore("cpu", tier="device"), Tier.HOST: MemoryStore("cpu", tier="host")}
    return ColdTier(TierPlacement(tiers, "meeting", WatermarkController(1 << 20)), recall_top_k=4, exact_copies=exact,
                    exact_max_blocks=max_blocks)


def _meeting(exact: bool = True, max_blocks: int = 16):
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    cache = TieredCache(config=model.config, **SETTINGS)
    tier = _tier(exact, max_blocks)
    cache.attach_cold_tier(tier)
    feed(model, cache, token_ids(LENGTH), chunk=32)
    return model, cache, tier


def _state(cache: TieredCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.table.format.clone(), layer.table.slot.clone()) for layer in cache.tiered_layers]


def test_a_block_leaving_full_precision_leaves_its_exact_payload_in_the_cold_tier() -> None:
    model, cache, tier = _meeting()
    full = DynamicCache(config=model.config)
    feed(model, full, token_ids(LENGTH), chunk=32)
    checked = 0
    for layer in cache.tiered_layers:
        quantized = layer.table.block_index[layer.table.format != BlockFormat.FULL].tolist()
        assert quantized, "the budget must have quantized blocks"
        assert set(quantized) <= layer.exact_copies.blocks
        if layer.layer_idx != cache.tiered_layers[0].layer_idx:
            continue  # deeper layers' keys depend on what the layers below kept (compressed)
        keys = full.layers[layer.layer_idx].keys  # [B, H, T, D]: the first layer's keys are the embeddings'
        for block in quantized[:3]:
            copy = tier.read_copy(layer.layer_idx, block)
            start = block * layer.block_size
            want = keys[:, :, start:start + layer.block_size].transpose(1, 2)  # [B, bs, H, D]
            assert torch.equal(copy["k"].reshape(want.shape), want)
            checked += 1
    assert checked and tier.stats()["copies"] == sum(len(layer.exact_copies.blocks) for layer in cache.tiered_layers)


def test_a_question_reads_the_blocks_it_wants_from_their_copies_and_rollback_puts_the_low_bit_rows_back() -> None:
    model, cache, tier = _meeting()
    _, plain, _ = _meeting(exact=False)
    full = DynamicCache(config=model.config)
    feed(model, full, token_ids(LENGTH), chunk=32)
    probe = token_ids(6, seed=7)
    reference = feed(model, full, probe)[0, -1].float()
    before = _state(cache)
    bytes_before = cache.kv_bytes()

    checkpoint = plain.checkpoint()
    low_bit = feed(model, plain, probe)[0, -1].float()
    plain.rollback(checkpoint)
    checkpoint = cache.checkpoint()
    exact = feed(model, cache, probe)[0, -1].float()
    upgraded = sum(len(layer.exact_copies.upgraded) for layer in cache.tiered_layers)
    for layer in cache.tiered_layers:
        for up in layer.exact_copies.upgraded:
            row = int(torch.nonzero(layer.table.block_index == up.block)[0])
            assert int(layer.table.format[row]) == BlockFormat.FULL and up.format == BlockFormat.INT2
        layer.table.check_invariants()  # (the pools also hold the upgraded rows' low-bit slots until then)
    cache.rollback(checkpoint)

    assert upgraded > 0 and tier.stats()["exact_reads"] == upgraded
    assert (exact - reference).abs().max() < (low_bit - reference).abs().max()
    for layer, (fmt, slot) in zip(cache.tiered_layers, before):
        assert torch.equal(layer.table.format, fmt) and torch.equal(layer.table.slot, slot)
        assert layer.exact_copies.upgraded == []
        layer.table.check_invariants(layer.pools)
    assert cache.kv_bytes() == bytes_before
    # outside a question nothing is read from the copies: the meeting's own prefill stays low-bit
    feed(model, cache, token_ids(8, seed=3))
    assert tier.stats()["exact_reads"] == upgraded


def test_a_released_question_keeps_its_upgraded_rows_at_full_precision() -> None:
    model, cache, _ = _meeting()
    checkpoint = cache.checkpoint()
    feed(model, cache, token_ids(6, seed=7))
    kept = {layer.layer_idx: [up.block for up in layer.exact_copies.upgraded] for layer in cache.tiered_layers}
    cache.release(checkpoint)
    assert any(kept.values())
    for layer in cache.tiered_layers:
        assert layer.exact_copies.upgraded == []
        for block in kept[layer.layer_idx]:
            row = int(torch.nonzero(layer.table.block_index == block)[0])
            assert int(layer.table.format[row]) == BlockFormat.FULL
        layer.table.check_invariants(layer.pools)


def test_a_copy_that_cannot_be_read_leaves_the_block_quantized_and_the_question_answered() -> None:
    model, cache, tier = _meeting()
    _, plain, _ = _meeting(exact=False)
    probe = token_ids(6, seed=7)
    listed = sum(len(layer.exact_copies.blocks) for layer in cache.tiered_layers)
    for layer in cache.tiered_layers:  # e.g. crypto-shredded under the question
        tier.placement.forget([tier.copy_id(layer.layer_idx, b) for b in layer.exact_copies.blocks])
    checkpoint, twin = cache.checkpoint(), plain.checkpoint()
    got, want = feed(model, cache, probe)[0, -1], feed(model, plain, probe)[0, -1]
    cache.rollback(checkpoint)
    plain.rollback(twin)
    assert torch.equal(got, want) and tier.stats()["exact_reads"] == 0
    assert sum(len(layer.exact_copies.blocks) for layer in cache.tiered_layers) < listed  # not tried again


def test_the_lines_a_question_retrieved_are_read_from_their_copies() -> None:
    from kvstore.manager import KVCacheManager

    _, cache, _ = _meeting()
    before = _state(cache)
    checkpoint = cache.checkpoint()
    report = KVCacheManager(cache).recall_tokens([(96, 160)])  # blocks 12-19
    for layer in cache.tiered_layers:
        focus = (layer.table.block_index >= 12) & (layer.table.block_index < 20)
        assert bool((layer.table.format[focus] == BlockFormat.FULL).all())
        assert int((layer.table.format[~focus] != BlockFormat.FULL).sum()) > 0, "the rest stays quantized"
    assert report.full == report.blocks * cache.num_tiered_layers
    cache.rollback(checkpoint)
    for layer, (fmt, slot) in zip(cache.tiered_layers, before):
        assert torch.equal(layer.table.format, fmt) and torch.equal(layer.table.slot, slot)
        layer.table.check_invariants(layer.pools)


def test_a_question_reads_at_most_exact_max_blocks_per_layer_from_the_copies() -> None:
    model, cache, tier = _meeting(max_blocks=2)
    checkpoint = cache.checkpoint()
    feed(model, cache, token_ids(6, seed=7))
    for _ in range(4):  # decode steps want other blocks too
        feed(model, cache, token_ids(1, seed=11))
    assert [len(layer.exact_copies.upgraded) for layer in cache.tiered_layers] == [2] * cache.num_tiered_layers
    cache.rollback(checkpoint)
    assert tier.stats()["exact_reads"] == 2 * cache.num_tiered_layers
