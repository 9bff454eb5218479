"""TieredCache.erase_tokens on tiny random models: personal data's tokens leave nothing in the KV.

Their K/V rows are zero in every layer (sliding windows too), no other token's output depends on them,
their blocks score 0 and a cold block holding one is not recalled (issue 18, zero-in-kv).
"""

from __future__ import annotations

from pathlib import Path

import torch

from kvstore.attention import MINUTIA_ATTENTION
from kvstore.cache import TieredCache
from kvstore.manager import KVCacheManager
from kvstore.layers import TieredLayer

try:
    from kv_helpers import feed, tiny_model, token_ids
    from test_kv_cold import SETTINGS, _cold_tier
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids
    from tests.test_kv_cold import SETTINGS, _cold_tier

ERASED = [5, 6, 40, 58, 59]  # 58, 59: inside Gemma 3's last sliding window (16 tokens) after 64


def _rows(layer, positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V ``[B, H, n, D]`` of absolute ``positions`` that the layer still holds."""
    if isinstance(layer, TieredLayer):
        keys, values = layer.dense_kv()
        first = 0
    else:  # a sliding window: the last tokens only
        keys, values = layer.keys, layer.values
        first = layer.cumulative_length - keys.shape[2]
    index = torch.tensor([p - first for p in positions if p >= first])
    return keys[:, :, index], values[:, :, index]


def test_erased_tokens_hold_zero_kv_in_every_layer_and_nothing_reads_them() -> None:
    model = tiny_model("gemma3", attn=MINUTIA_ATTENTION, sharpen=4.0)
    ids = token_ids(64)
    other = ids.clone()
    other[0, ERASED] = (other[0, ERASED] + 1) % 1000  # different personal data at the same places
    logits = []
    caches = []
    for tokens in (ids, other):
        cache = TieredCache(config=model.config, block_size=8)
        cache.erase_tokens(ERASED)
        with torch.no_grad():  # in chunks: later chunks read the erased rows from the cache
            logits.append(torch.cat([model(tokens[:, i:i + 24], past_key_values=cache, use_cache=True).logits[0]
                                     for i in range(0, 64, 24)]))
        caches.append(cache)
    cache = caches[0]
    for layer in cache.layers:
        keys, values = _rows(layer, ERASED)
        assert keys.numel() and not keys.any() and not values.any()
        kept = [p for p in range(64) if p not in ERASED and p >= 64 - 15]
        keys, _ = _rows(layer, kept)
        assert (keys != 0).any(dim=-1).all(), "only the erased rows are zero"
    # Every other token's K/V and logits are the same whatever the erased tokens were.
    for a, b in zip(cache.layers, caches[1].layers):
        assert torch.equal(_rows(a, list(range(64)))[0], _rows(b, list(range(64)))[0])
    others = [p for p in range(64) if p not in ERASED]
    assert torch.equal(logits[0][others], logits[1][others])


def test_blocks_with_erased_tokens_score_zero_and_are_not_recalled(tmp_path: Path) -> None:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    kept = TieredCache(config=model.config, block_size=8)  # nothing leaves: every block is scored
    kept.erase_tokens([100, 101])
    feed(model, kept, token_ids(320), chunk=32)
    for layer in kept.tiered_layers:
        scores = layer.policy.scorer.block_scores(layer.scoring_inputs())
        assert scores[12] == 0 and (scores[torch.arange(len(scores)) != 12] > 0).all()

    cache = TieredCache(config=model.config, **SETTINGS)
    cache.attach_cold_tier(_cold_tier(tmp_path))
    cache.erase_tokens([100, 101])  # block 12 (block_size 8)
    feed(model, cache, token_ids(320), chunk=32)
    for layer in cache.tiered_layers:
        inputs = layer.scoring_inputs()
        scores = layer.policy.scorer.block_scores(inputs)
        blocks = layer.table.block_index.tolist()
        assert 12 not in blocks, "a zero score leaves the device first"
        assert 12 in layer.cold.block_index.tolist()
        assert (scores > 0).all()  # kept ones: none of them held personal data
    checkpoint = cache.checkpoint()
    report = KVCacheManager(cache).recall_tokens([(96, 104)])
    assert report.cold == report.blocks * cache.num_tiered_layers, "the erased block stays cold"
    cache.rollback(checkpoint)
    checkpoint = cache.checkpoint()
    neighbour = next(int(b) for b in cache.tiered_layers[0].cold.block_index if int(b) != 12)
    assert KVCacheManager(cache).recall_tokens([(neighbour * 8, neighbour * 8 + 8)]).cold < cache.num_tiered_layers
    cache.rollback(checkpoint)


def test_positions_already_in_the_cache_cannot_be_erased() -> None:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION)
    cache = TieredCache(config=model.config, block_size=8)
    feed(model, cache, token_ids(16))
    try:
        cache.erase_tokens([3])
    except ValueError as exc:
        assert "upcoming" in str(exc)
    else:
        raise AssertionError("erasing a stored token must be refused")
