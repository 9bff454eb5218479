"""Per-modality tier policies, query-aware promotion and the open-ended (live) budget of TieredCache."""

from __future__ import annotations

import pytest
import torch

from kvstore.attention import MINUTIA_ATTENTION
from kvstore.blocks import BlockFormat
from kvstore.cache import TieredCache
from kvstore.config import ModalityPolicy, TieredCacheConfig
from kvstore.timeline import TimelineIndex

try:
    from kv_helpers import feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids

BS = 8
POLICIES = {
    "text": ModalityPolicy(warm_kinds=(), allow_drop=False),  # prompts stay exact
    "audio": ModalityPolicy(preferred="int8"),
    "video": ModalityPolicy(preferred="int4"),
}


def _live_feed(model, cache: TieredCache, plan: list[tuple[str, int]], seed: int = 3) -> TimelineIndex:
    """Prefill segments as a live session does: mark modality, prefill the chunk, add it to the timeline."""
    timeline = TimelineIndex()
    t = 0.0
    for i, (modality, n) in enumerate(plan):
        start = cache.get_seq_length()
        cache.mark_modality((start, start + n), modality)
        feed(model, cache, token_ids(n, seed=seed + i))
        timeline.add(modality, t, t + n / 4, start, start + n)
        t += n / 4
    return timeline


def _formats_by_modality(cache: TieredCache) -> dict[str, set[str]]:
    return {name: set(entry["bytes_by_format"]) for name, entry in cache.stats()["modalities"].items()
            if entry["bytes"]}


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_each_modality_lands_in_its_tier(arch: str) -> None:
    """Text, audio and video tokens (block-aligned here) end in full, int8 and int4 blocks."""
    model = tiny_model(arch, attn=MINUTIA_ATTENTION)
    settings = TieredCacheConfig(compress=True, budget_ratio=10.0, block_size=BS, sink_tokens=0, recent_tokens=16,
                                 warm_kinds=("int8", "int4"), modalities=POLICIES)
    cache = TieredCache(config=model.config, settings=settings)
    _live_feed(model, cache, [("text", 24), ("audio", 40), ("video", 16), ("audio", 24), ("video", 24),
                              ("text", 16), ("audio", 32)])
    stats = cache.stats()
    formats = _formats_by_modality(cache)
    assert formats["text"] == {"full"}
    assert formats["audio"] == {"int8", "full"}  # full = the last blocks, in the recent window
    assert formats["video"] == {"int4"}
    assert stats["modalities"]["video"]["tokens_seen"] == 40
    assert stats["modalities"]["audio"]["tokens_seen"] == 96
    assert sum(stats["bytes_by_modality"].values()) == stats["bytes_by_tier"]["L1"] + stats["bytes_by_tier"]["L2"]
    assert stats["compression_ratio"] == pytest.approx(stats["full_precision_bytes"] / stats["tiered_kv_bytes"])
    layer = cache.tiered_layers[0]
    modality = cache.annotations.block_modality(layer.table.block_index, BS)
    settled = layer.table.block_index * BS + BS <= layer.cumulative_length - 16
    assert (layer.table.format[settled & (modality == 2)] == BlockFormat.INT4).all()
    assert (layer.table.format[settled & (modality == 1)] == BlockFormat.INT8).all()


def test_modality_ceiling_and_no_drop_policy() -> None:
    """A tight video ceiling squeezes (drops) video blocks while text, which may not drop, stays whole."""
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    policies = {"text": ModalityPolicy(allow_drop=False, warm_kinds=("int8",)),
                "video": ModalityPolicy(budget_share=0.05)}
    settings = TieredCacheConfig(compress=True, budget_ratio=0.4, block_size=BS, sink_tokens=4, recent_tokens=16,
                                 modalities=policies)
    cache = TieredCache(config=model.config, settings=settings)
    _live_feed(model, cache, [("text", 64), ("video", 64), ("audio", 64), ("video", 64), ("audio", 48)])
    stats = cache.stats()
    for layer in cache.tiered_layers:
        video_rows = cache.annotations.block_modality(layer.table.block_index, BS) == 2
        assert int(video_rows.sum()) * BS < 128  # video lost blocks to its ceiling
        assert layer.kv_bytes() <= layer.budget()
    assert stats["modalities"]["text"]["tokens_kept"] == 64  # never dropped (int8 at worst)
    assert set(stats["modalities"]["text"]["bytes_by_format"]) <= {"full", "int8"}
    assert stats["modalities"]["video"]["tokens_kept"] < stats["modalities"]["video"]["tokens_seen"]


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ValueError, match="modality"):
        TieredCacheConfig(modalities={"smell": ModalityPolicy()})
    with pytest.raises(ValueError, match="fp8"):
        TieredCacheConfig(warm_kinds=("int8",), modalities={"video": ModalityPolicy(warm_kinds=("fp8",))})
    with pytest.raises(ValueError, match="preferred"):
        TieredCacheConfig(modalities={"audio": ModalityPolicy(warm_kinds=("int8",), preferred="int4")})
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="modality"):
        TieredCache(config=model.config).mark_modality([0], "smell")


def test_promoted_window_is_kept_and_read() -> None:
    """Blocks of a question's time window keep their format under pressure and are read at decode."""
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    settings = TieredCacheConfig(compress=True, budget_ratio=None, block_size=BS, sink_tokens=4, recent_tokens=16,
                                 decode_top_k_blocks=2)
    plan = [("audio", 64)] * 6
    base = TieredCache(config=model.config, settings=settings)
    timeline = _live_feed(model, base, plan)
    budget = int(0.4 * base.full_precision_bytes())  # the first 128 tokens fit, 384 need compression
    window = (17.0, 31.0)  # inside segment 1: tokens 64..128

    def run(promote: bool):
        cache = TieredCache(config=model.config, settings=settings.__class__(**{**vars(settings),
                                                                              "budget_bytes": budget}))
        tl = _live_feed(model, cache, plan[:2])
        report = cache.promote_tokens(tl.tokens_in(*window, "audio")) if promote else None
        _live_feed(model, cache, plan[2:], seed=30)
        return cache, report

    promoted, report = run(True)
    plain, _ = run(False)
    assert report.blocks == 8 and report.readable_share == 1.0
    blocks = timeline.blocks_for(*window, BS)
    after = promoted.block_residency(blocks)
    assert after == report  # pinned: every block kept the format it had when the question came
    unpromoted = plain.block_residency(blocks)
    assert (unpromoted.full, -unpromoted.dropped) < (after.full, -after.dropped), (unpromoted, after)
    assert promoted.kv_bytes(include_sliding=False) <= budget * 1.05  # others paid for it
    # decode reads the pinned blocks even with a top-2 selection
    layer = promoted.tiered_layers[0]
    n_past = len(layer.table)
    query = torch.randn(1, 4, 1, 16)
    chosen = layer.attention.select_blocks(layer.storage, query, n_past, 2, layer.cumulative_length)
    pinned_rows = torch.searchsorted(layer.table.block_index, blocks)
    assert set(pinned_rows.tolist()) <= set(chosen[0, 0].tolist())
    # unpinned, the boost still ranks them above their neighbours; rollback forgets promotions past it
    promoted.unpin()
    cp = promoted.checkpoint()
    feed(model, promoted, token_ids(20, seed=77))
    promoted.promote_tokens([(promoted.get_seq_length() - 4, promoted.get_seq_length())], boost=2.0)
    promoted.rollback(cp)
    assert not promoted.priorities.any_pinned
    assert float(promoted.priorities.for_blocks(blocks)[0].min()) == 1.0


def test_budget_floor_keeps_early_chunks_and_drops_last() -> None:
    """A live ratio budget: nothing compresses below the floor, and quantizing comes before dropping."""
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    settings = TieredCacheConfig(compress=True, budget_ratio=0.25, block_size=BS, sink_tokens=4, recent_tokens=16,
                                 budget_floor_tokens=256, drop_last_resort=True, warm_kinds=("int8", "int4"))
    cache = TieredCache(config=model.config, settings=settings)
    for i in range(4):  # 4 x 24 = 96 tokens (+ metadata) < 256: nothing is touched
        feed(model, cache, token_ids(24, seed=i))
    layer = cache.tiered_layers[0]
    assert bool((layer.table.format == BlockFormat.FULL).all()) and layer.kept_tokens() == 96
    naive = TieredCache(config=model.config, settings=TieredCacheConfig(
        compress=True, budget_ratio=0.25, block_size=BS, sink_tokens=4, recent_tokens=16))
    for i in range(4):
        feed(model, naive, token_ids(24, seed=i))
    assert naive.tiered_layers[0].kept_tokens() < 96  # the old policy already dropped early context
    for i in range(4, 20):  # grow past the floor: quantized, not dropped, while int4 can meet the budget
        feed(model, cache, token_ids(24, seed=i))
        assert layer.kv_bytes() <= layer.budget()
    assert bool((layer.table.format == BlockFormat.INT4).any())
    assert layer.kept_tokens() == layer.cumulative_length
    for i in range(20, 24):  # every settled block is int4 now: only dropping can meet the budget
        feed(model, cache, token_ids(24, seed=i))
    assert layer.kv_bytes() <= layer.budget()
    assert layer.kept_tokens() < layer.cumulative_length
