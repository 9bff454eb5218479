"""TieredCache with stock transformers models: exactness, budget, rollback, compression quality."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from kvstore.annotations import TokenFlag
from kvstore.attention import MINUTIA_ATTENTION, register_minutia_attention
from kvstore.blocks import BlockFormat
from kvstore.cache import TieredCache
from kvstore.config import TieredCacheConfig
from kvstore.layers import TieredLayer
from kvstore.scoring import ScoreWeights
try:
    from kv_helpers import ARCHS, feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import ARCHS, feed, tiny_model, token_ids

register_minutia_attention()
ATTNS = ("sdpa", MINUTIA_ATTENTION)
EXACT = 1e-5


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# ------------------------------------------------------------------------------------------------
# Exactness with compression off
# ------------------------------------------------------------------------------------------------


# Under the minutia attention an uncompressed cache hands attention to SDPA (exact path); a cache with
# compression on but under its budget runs the sparse reference path over the same blocks.
UNDER_BUDGET = dict(compress=True, budget_ratio=100.0)


@pytest.mark.parametrize("attn,extra", [("sdpa", {}), (MINUTIA_ATTENTION, {}), (MINUTIA_ATTENTION, UNDER_BUDGET)],
                         ids=["sdpa", "minutia-exact-path", "minutia-reference-path"])
@pytest.mark.parametrize("arch", ARCHS)
def test_same_logits_as_dynamic_cache(arch: str, attn: str, extra: dict) -> None:
    """One-shot prefill + decode steps, and chunked prefill (chunks cross block and window edges)."""
    model = tiny_model(arch, attn=attn)
    ids = token_ids(45)
    # one-shot prefill, then decode
    ref, tiered = DynamicCache(config=model.config), TieredCache(config=model.config, block_size=8, **extra)
    diffs = [_max_diff(feed(model, ref, ids), feed(model, tiered, ids))]
    for step in range(4):
        nxt = token_ids(1, seed=10 + step)
        diffs.append(_max_diff(feed(model, ref, nxt), feed(model, tiered, nxt)))
    # chunked prefill, chunk 7 against block 8 and sliding window 16, then decode
    ref, tiered = DynamicCache(config=model.config), TieredCache(config=model.config, block_size=8, **extra)
    with torch.no_grad():
        for start in range(0, ids.shape[1], 7):
            chunk = ids[:, start : start + 7]
            a = model(chunk, past_key_values=ref).logits
            b = model(chunk, past_key_values=tiered).logits
            diffs.append(_max_diff(a, b))
    nxt = token_ids(1, seed=99)
    diffs.append(_max_diff(feed(model, ref, nxt), feed(model, tiered, nxt)))
    assert max(diffs) <= EXACT, diffs
    assert tiered.get_seq_length() == ref.get_seq_length() == 46
    kinds = [type(layer).__name__ for layer in tiered.layers]
    if arch == "gemma3":
        assert kinds == ["SlidingWindowLayer", "SlidingWindowLayer", "TieredLayer", "SlidingWindowLayer"]
    else:
        assert set(kinds) == {"TieredLayer"}


@pytest.mark.parametrize("attn", ATTNS)
def test_batch_of_two_is_exact(attn: str) -> None:
    model = tiny_model("llama", attn=attn)
    ids = token_ids(30, batch=2)
    ref, tiered = DynamicCache(config=model.config), TieredCache(config=model.config, block_size=8)
    assert _max_diff(feed(model, ref, ids, chunk=11), feed(model, tiered, ids, chunk=11)) <= EXACT
    nxt = token_ids(1, seed=5, batch=2)
    assert _max_diff(feed(model, ref, nxt), feed(model, tiered, nxt)) <= EXACT


def test_generate_matches_dynamic_cache() -> None:
    model = tiny_model("qwen2", attn=MINUTIA_ATTENTION)
    ids = token_ids(20)
    with torch.no_grad():
        expected = model.generate(ids, max_new_tokens=6, do_sample=False, past_key_values=DynamicCache(config=model.config))
        got = model.generate(ids, max_new_tokens=6, do_sample=False,
                             past_key_values=TieredCache(config=model.config, block_size=8))
    assert torch.equal(expected, got)
    compressed = TieredCache(config=model.config, block_size=8, compress=True, budget_ratio=0.5, recent_tokens=8,
                             observation_window=4)
    with torch.no_grad():
        out = model.generate(token_ids(64), max_new_tokens=6, do_sample=False, past_key_values=compressed)
    assert out.shape == (1, 70) and compressed.kv_bytes(include_sliding=False) <= compressed.budget_bytes()


def test_crop_matches_dynamic_cache() -> None:
    model = tiny_model("llama")
    ids = token_ids(40)
    ref, tiered = DynamicCache(config=model.config), TieredCache(config=model.config, block_size=8)
    feed(model, ref, ids)
    feed(model, tiered, ids)
    ref.crop(27)
    tiered.crop(27)
    nxt = token_ids(3, seed=4)
    assert _max_diff(feed(model, ref, nxt), feed(model, tiered, nxt)) <= EXACT


# ------------------------------------------------------------------------------------------------
# Compression
# ------------------------------------------------------------------------------------------------


def _storage_bytes(layer: TieredLayer) -> int:
    """A layer's bytes summed directly from its tensors' storage (independent of kv_bytes())."""
    tensors = [t for pool in layer.pools.values() for t in pool.tensors.values()]
    tensors += list(layer.table.columns.values())
    tensors += [layer.table.block_index, layer.table.format, layer.table.slot, layer.table.fill]
    tensors += [layer.summary.key_sum, layer.summary.value_sum, layer.summary.count]
    tensors += [t for t in (layer.recent_queries, *layer.outlier_idx.values()) if t is not None]
    return sum(t.untyped_storage().nbytes() for t in tensors)


@pytest.mark.parametrize(
    "arch,attn,ratio,kinds",
    [
        ("llama", MINUTIA_ATTENTION, 0.5, ("int8", "int4")),
        ("gemma3", MINUTIA_ATTENTION, 0.25, ("int8", "int4")),
        ("qwen2", "sdpa", 0.6, ("int8", "int4")),  # stock SDPA: quantize only, never drop
        ("llama", MINUTIA_ATTENTION, 0.4, ("fp8",)),
        ("llama", MINUTIA_ATTENTION, 0.25, ("int8", "int4", "int2")),
        ("llama", MINUTIA_ATTENTION, 0.5, ("int8", "int4", "k4v2", "int2")),
    ],
)
def test_budget_respected_after_compressed_chunked_prefill(arch, attn, ratio, kinds) -> None:
    model = tiny_model(arch, attn=attn)
    # observation_window=8: the recent queries kept for scoring are fixed-size metadata that would
    # otherwise weigh as much as the KV itself in a model this small.
    cache = TieredCache(config=model.config, block_size=16, compress=True, budget_ratio=ratio,
                        recent_tokens=32, warm_kinds=kinds, observation_window=8)
    ids = token_ids(384)
    with torch.no_grad():
        for start in range(0, 384, 64):
            model(ids[:, start : start + 64], past_key_values=cache)
            # Peak = budget + the chunk just written (kept at full precision until the next pass),
            # plus the per-layer scoring state (recent queries, summary), which is fixed-size.
            layers = cache.tiered_layers
            chunk_bytes = 64 * sum(layer.full_precision_bytes() // layer.cumulative_length for layer in layers)
            fixed = sum(layer.summary.nbytes() + 4 * getattr(layer.recent_queries, "numel", lambda: 0)()
                        for layer in layers)
            assert cache.kv_bytes(include_sliding=False) <= cache.budget_bytes() + 1.1 * chunk_bytes + fixed
    assert cache.kv_bytes(include_sliding=False) <= cache.budget_bytes()
    cache.compact_storage()
    measured = sum(_storage_bytes(layer) for layer in cache.tiered_layers)
    assert measured == cache.kv_bytes(include_sliding=False)
    assert measured <= cache.budget_bytes() <= ratio * cache.full_precision_bytes()
    for layer in cache.tiered_layers:
        formats = set(layer.table.format.tolist())
        assert formats - {int(BlockFormat.FULL)}, "some blocks were quantized"
        layer.table.check_invariants(layer.pools)
        if attn == "sdpa":
            assert layer.kept_tokens() == 384, "stock attention cannot see a summary: nothing dropped"
    # decoding keeps compressing and stays under budget
    feed(model, cache, token_ids(20, seed=3), chunk=1)
    assert cache.kv_bytes(include_sliding=False) <= cache.budget_bytes()


@pytest.mark.parametrize("kinds,ratio", [(("int8", "int4"), 0.5), (("int4", "int2"), 0.3), (("k4v2",), 0.3)])
def test_sparse_attention_over_quantized_blocks_equals_sdpa_over_dequantized_cache(kinds, ratio) -> None:
    """One compressed state (quantized blocks, no drops), read by both attention paths."""
    model = tiny_model("llama", attn=MINUTIA_ATTENTION)
    cache = TieredCache(config=model.config, block_size=16, compress=True, budget_ratio=ratio, recent_tokens=32,
                        allow_drop=False, warm_kinds=kinds)
    feed(model, cache, token_ids(256), chunk=64)
    formats = set(cache.tiered_layers[0].table.format.tolist())
    assert formats & {int(BlockFormat.from_kind(k)) for k in kinds}
    probe = token_ids(5, seed=7)
    outs = []
    for attn in ATTNS:
        model.set_attn_implementation(attn)  # the cache reads the same config object
        checkpoint = cache.checkpoint()  # no compression while open: both paths see one state
        outs.append(feed(model, cache, probe))
        cache.rollback(checkpoint)
    assert _max_diff(*outs) <= EXACT


def test_a_split_block_keeps_int4_keys_and_int2_values_at_bytes_between_theirs() -> None:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION)
    # half the bytes: in a model this small the scoring state and the scales take most of a lower budget
    cache = TieredCache(config=model.config, block_size=16, compress=True, budget_ratio=0.5, recent_tokens=32,
                        allow_drop=False, warm_kinds=("int4", "k4v2", "int2"))
    feed(model, cache, token_ids(256), chunk=256)
    storage = cache.tiered_layers[0].storage
    split, int4, int2 = (BlockFormat.from_kind(k) for k in ("k4v2", "int4", "int2"))
    assert (storage.table.format == int(split)).any(), "the planner uses the split format"
    assert (storage.paged_quantized(split, "k").kind, storage.paged_quantized(split, "v").kind) == ("int4", "int2")
    assert storage.block_bytes(int2) < storage.block_bytes(split) < storage.block_bytes(int4)
    # what it reads back: at most 16 levels in a key group (a channel over the block's tokens), at most 4 in a
    # value group (a token's channels), and more than 4 in some key group: INT4 keys, INT2 values
    row = torch.nonzero(storage.table.format == int(split))[0, 0].view(1)
    keys, values = storage.rows_dense(row)  # [1, B, bs, H, D]
    key_levels = [len(torch.unique(keys[0, 0, :, h, d])) for h in range(keys.shape[3]) for d in range(keys.shape[4])]
    value_levels = [len(torch.unique(values[0, 0, t, h]))
                    for t in range(values.shape[2]) for h in range(values.shape[3])]
    assert max(key_levels) <= 16 and max(value_levels) <= 4 and max(key_levels) > 4


def test_compressed_cache_at_half_budget_stays_close() -> None:
    """Sanity bound, not exactness: closer to the full cache than a recent window of the same size."""
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    ids, probe = token_ids(512), token_ids(8, seed=2)
    full_cache = DynamicCache(config=model.config)
    feed(model, full_cache, ids)
    full = feed(model, full_cache, probe)
    cache = TieredCache(config=model.config, block_size=16, compress=True, budget_ratio=0.5, recent_tokens=32)
    feed(model, cache, ids, chunk=64)
    assert cache.kv_bytes(include_sliding=False) <= 0.5 * cache.full_precision_bytes()
    compressed = feed(model, cache, probe)
    kept = cache.tiered_layers[0].kept_tokens()
    window = DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids[:, -kept:], past_key_values=window, position_ids=torch.arange(512 - kept, 512).view(1, -1),
              cache_position=torch.arange(kept))
        recent_only = model(probe, past_key_values=window, position_ids=torch.arange(512, 520).view(1, -1),
                            cache_position=torch.arange(kept, kept + 8)).logits

    def rel(x: torch.Tensor) -> float:
        return ((x - full).norm() / full.norm()).item()

    assert rel(compressed) < 0.1
    assert rel(compressed) < rel(recent_only)


def test_decode_top_k_reads_only_the_selected_blocks(monkeypatch) -> None:
    """Top-k at decode: k + forced blocks are read; k >= #blocks is exact; more blocks, smaller error.

    (Random tiny models attend almost uniformly, so this checks the mechanism, not Quest's recall.)
    """
    import kvstore.layer_attention as layers_module  # the part that reads the blocks

    listed: list[int] = []
    real = layers_module.ops.mixed_sparse_attention

    def counting(query, sources, *args, **kwargs):
        listed.append(max(int((s.block_table >= 0).sum(-1).max()) for s in sources))
        return real(query, sources, *args, **kwargs)

    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    ids, nxt = token_ids(256), token_ids(1, seed=9)
    results = {}
    for top_k in (None, 100, 2, 8):
        # compression on but never over budget: the sparse reference path reads the blocks itself
        cache = TieredCache(config=model.config, block_size=16, recent_tokens=32, decode_top_k_blocks=top_k,
                            **UNDER_BUDGET)
        feed(model, cache, ids, chunk=64)
        monkeypatch.setattr(layers_module.ops, "mixed_sparse_attention", counting)
        listed.clear()
        results[top_k] = feed(model, cache, nxt)
        monkeypatch.setattr(layers_module.ops, "mixed_sparse_attention", real)
        forced = 3  # block 0 (sinks), blocks 14-15 (recent 32 tokens, the tail)
        assert max(listed) == (16 if top_k in (None, 100) else top_k + forced)
    assert _max_diff(results[None], results[100]) <= EXACT

    def rel(k: int) -> float:
        return ((results[k] - results[None]).norm() / results[None].norm()).item()

    assert 0 < rel(8) < rel(2)


def test_structural_bonus_keeps_annotated_block() -> None:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION)
    # An absolute budget of ~7 full blocks per layer: the cache is full from block 8 on.
    settings = TieredCacheConfig(block_size=16, compress=True, budget_bytes=2 * 7 * 4400 + 2 * 3000,
                                 recent_tokens=32, warm_kinds=(), observation_window=8,
                                 weights=ScoreWeights(accumulated=0.0, query=0.0, position=0.0, structural=1.0))
    cache = TieredCache(config=model.config, settings=settings)
    cache.annotate([5 * 16 + 3], TokenFlag.SPEAKER_CHANGE)  # a token of block 5, before it is prefilled
    feed(model, cache, token_ids(256), chunk=64)
    kept_blocks = set(cache.tiered_layers[0].table.block_index.tolist())
    assert 5 in kept_blocks
    assert len(kept_blocks) < 16, "budget forced drops"


# ------------------------------------------------------------------------------------------------
# Checkpoint / rollback
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arch,attn,compress",
    [("llama", "sdpa", False), ("gemma3", MINUTIA_ATTENTION, False), ("llama", MINUTIA_ATTENTION, True)],
)
def test_rollback_restores_exactly(arch: str, attn: str, compress: bool) -> None:
    model = tiny_model(arch, attn=attn)
    context, question, probe = token_ids(150), token_ids(12, seed=2), token_ids(6, seed=3)
    settings = TieredCacheConfig(block_size=16, compress=compress, budget_ratio=0.5, recent_tokens=32)
    reference = TieredCache(config=model.config, settings=settings)
    cache = TieredCache(config=model.config, settings=settings)
    feed(model, reference, context, chunk=50)
    feed(model, cache, context, chunk=50)
    before = cache.kv_bytes()
    checkpoint = cache.checkpoint()
    feed(model, cache, question)  # the question, then an "answer" decoded token by token
    feed(model, cache, token_ids(20, seed=4), chunk=1)
    assert cache.get_seq_length() == 150 + 12 + 20
    cache.rollback(checkpoint)
    assert cache.get_seq_length() == 150 and cache.kv_bytes() == before
    assert _max_diff(feed(model, reference, probe), feed(model, cache, probe)) == 0.0
    with pytest.raises(ValueError):
        cache.rollback(checkpoint)
    for layer in cache.tiered_layers:
        layer.table.check_invariants(layer.pools)


def test_nested_checkpoints_and_release() -> None:
    model = tiny_model("llama")
    cache = TieredCache(config=model.config, block_size=8)
    feed(model, cache, token_ids(20))
    outer = cache.checkpoint()
    feed(model, cache, token_ids(5, seed=2))
    inner = cache.checkpoint()
    feed(model, cache, token_ids(5, seed=3))
    cache.release(inner)
    assert cache.compression_suspended
    cache.rollback(outer)
    assert cache.get_seq_length() == 20 and not cache.compression_suspended


def test_padded_batch_is_refused_by_the_sparse_path() -> None:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION)
    cache = TieredCache(config=model.config, block_size=8)
    ids = token_ids(10, batch=2)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[0, :3] = 0
    with torch.no_grad():
        model(ids, attention_mask=mask, past_key_values=cache)
        with pytest.raises(NotImplementedError):
            model(token_ids(1, batch=2), attention_mask=torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1),
                  past_key_values=cache)
