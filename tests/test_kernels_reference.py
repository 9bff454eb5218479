"""Tests of the torch reference ops in kernels.reference (the oracle for the Triton kernels)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import reference as ref

FAST = settings(max_examples=25, deadline=None)


def _bound_slack(x: torch.Tensor) -> torch.Tensor:
    """fp32 rounding slack of ``code * step + zero``: a few ulps of the largest magnitude involved."""
    return 8 * torch.finfo(torch.float32).eps * (x.abs().amax() + 1.0)


# ------------------------------------------------------------------------------------------------
# Quantization
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [1, 3])
def test_int8_relative_error_is_small(axis: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 64, 2, 64)
    qt = ref.quantize(x, "int8", axis, 32)
    y = ref.dequantize(qt)
    rel = ((y - x).norm() / x.norm()).item()
    assert rel < 0.01, rel
    assert ((y - x).abs() <= ref.element_step(qt) / 2 + _bound_slack(x)).all()
    assert qt.data.dtype == torch.uint8 and qt.data.shape == x.shape


@pytest.mark.parametrize("param_dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("axis", [1, 3])
def test_int4_error_is_at_most_half_a_step(axis: int, param_dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    x = torch.randn(4, 64, 2, 32) * 3
    qt = ref.quantize(x, "int4", axis, 32, param_dtype=param_dtype)
    y = ref.dequantize(qt)
    step = ref.element_step(qt)
    assert ((y - x).abs() <= step / 2 + _bound_slack(x)).all()
    # Two codes per byte along the group axis.
    assert qt.data.shape[axis] == x.shape[axis] // 2
    assert qt.scale.dtype == param_dtype


def test_fp8_error_bound() -> None:
    torch.manual_seed(2)
    x = torch.randn(4, 64, 2, 32)
    qt = ref.quantize(x, "fp8", 3, 32)
    y = ref.dequantize(qt)
    assert qt.data.dtype == ref.FP8_DTYPE
    step = ref.element_step(qt)
    # e4m3: 3 mantissa bits -> relative error <= 2^-4 for normals, subnormal spacing 2^-9 * scale.
    assert ((y - x).abs() <= 2**-4 * x.abs() + 2**-10 * step + _bound_slack(x)).all()


def test_constant_groups_are_exact() -> None:
    x = torch.full((2, 32, 1, 8), 0.37)
    for kind in ("int8", "int4", "int2", "fp8"):
        y = ref.dequantize(ref.quantize(x, kind, 1, 32))
        assert torch.allclose(y, x, atol=1e-3 if kind == "fp8" else 0.0), kind


def test_outlier_channels_restored_exactly_and_protect_the_rest() -> None:
    torch.manual_seed(3)
    x = torch.randn(4, 32, 2, 16)
    x[..., 0, 5] *= 200.0  # head 0 has a huge channel 5
    x[..., 1, 11] *= 200.0
    idx = ref.select_outlier_channels(x, 1, head_axis=2)
    assert idx.tolist() == [[5], [11]]
    bidx = ref.outlier_index_for(idx, x.ndim, head_axis=2)
    with_outliers = ref.dequantize(ref.quantize(x, "int4", 3, 16, outlier_idx=bidx))
    without = ref.dequantize(ref.quantize(x, "int4", 3, 16))
    assert torch.equal(with_outliers[..., 0, 5], x[..., 0, 5])
    assert torch.equal(with_outliers[..., 1, 11], x[..., 1, 11])
    normal = torch.ones_like(x, dtype=torch.bool)
    normal[..., 0, 5] = False
    normal[..., 1, 11] = False
    err_with = (with_outliers - x)[normal].abs().mean()
    err_without = (without - x)[normal].abs().mean()
    assert err_with * 10 < err_without


@FAST
@given(
    length=st.integers(1, 8).map(lambda n: 2 * n),
    other=st.integers(1, 5),
    heads=st.integers(1, 3),
)
def test_int4_pack_roundtrip(length: int, other: int, heads: int) -> None:
    codes = torch.randint(0, 16, (other, length, heads), dtype=torch.uint8)
    packed = ref.pack_int4(codes, axis=1)
    assert packed.shape == (other, length // 2, heads)
    assert torch.equal(ref.unpack_int4(packed, axis=1), codes)


@FAST
@given(runs=st.integers(1, 6), other=st.integers(1, 4), bits=st.sampled_from([2, 4]))
def test_code_packing_roundtrip(runs: int, other: int, bits: int) -> None:
    per_byte = 8 // bits
    codes = torch.randint(0, 1 << bits, (other, runs * per_byte), dtype=torch.uint8)
    packed = ref.pack_codes(codes, bits, axis=1)
    assert packed.shape == (other, runs)
    assert torch.equal(ref.unpack_codes(packed, bits, axis=1), codes)
    # the first code of each run sits in the low bits
    assert torch.equal(packed & ((1 << bits) - 1), codes[:, ::per_byte])


@FAST
@given(
    kind=st.sampled_from(["int8", "int4", "int2", "fp8"]),
    blocks=st.integers(1, 3),
    group_count=st.integers(1, 3),
    group_size=st.sampled_from([2, 4, 8, 32]),
    heads=st.integers(1, 3),
    dim_groups=st.integers(1, 2),
    along_tokens=st.booleans(),
    n_outliers=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_quantize_roundtrip_shapes_and_bounds(
    kind: str,
    blocks: int,
    group_count: int,
    group_size: int,
    heads: int,
    dim_groups: int,
    along_tokens: bool,
    n_outliers: int,
    seed: int,
) -> None:
    gen = torch.Generator().manual_seed(seed)
    if kind == "int2":
        group_size = max(group_size, 4)  # four codes per byte: packed runs of 4 along the axis
    tokens = group_size * group_count if along_tokens else group_count * 2
    dim = group_size * dim_groups if not along_tokens else max(4, dim_groups * 4)
    x = torch.randn(blocks, tokens, heads, dim, generator=gen) * 2
    axis = 1 if along_tokens else 3
    idx = None
    if n_outliers:
        idx = ref.outlier_index_for(ref.select_outlier_channels(x, n_outliers, head_axis=2), 4, 2)
    qt = ref.quantize(x, kind, axis, group_size, outlier_idx=idx)
    y = ref.dequantize(qt)
    assert y.shape == x.shape and y.dtype == x.dtype
    step = ref.element_step(qt)
    err = (y - x).abs()
    if kind == "fp8":
        assert (err <= 2**-4 * x.abs() + 2**-10 * step + _bound_slack(x)).all()
    else:
        assert (err <= step / 2 + _bound_slack(x)).all()
    if idx is not None:
        kept = torch.gather(y, -1, idx.expand(*x.shape[:-1], idx.shape[-1]))
        assert torch.equal(kept, torch.gather(x, -1, idx.expand(*x.shape[:-1], idx.shape[-1])))


def test_quantized_bytes() -> None:
    x = torch.randn(1, 64, 1, 64, dtype=torch.bfloat16)
    full = x.numel() * x.element_size()
    int4 = ref.quantize(x, "int4", 1, 64, param_dtype=torch.float16).nbytes()
    int8 = ref.quantize(x, "int8", 1, 64, param_dtype=torch.float16).nbytes()
    assert int4 == 64 * 64 // 2 + 2 * 64 * 2
    assert int8 == 64 * 64 + 2 * 64 * 2
    assert int4 < 0.3 * full and int8 < 0.55 * full


# ------------------------------------------------------------------------------------------------
# Sparse decode attention
# ------------------------------------------------------------------------------------------------


def _paged_problem(
    gen: torch.Generator,
    batch: int,
    n_kv: int,
    groups: int,
    dim: int,
    block_size: int,
    lengths: list[list[int]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random pages with each (batch, head) owning a shuffled set of physical blocks."""
    blocks_needed = [[math.ceil(n / block_size) for n in row] for row in lengths]
    max_blocks = max(max(row) for row in blocks_needed)
    total = sum(sum(row) for row in blocks_needed) + 3
    k_pages = torch.randn(total, block_size, n_kv, dim, generator=gen)
    v_pages = torch.randn(total, block_size, n_kv, dim, generator=gen)
    perm = torch.randperm(total, generator=gen).tolist()
    table = torch.full((batch, n_kv, max(max_blocks, 1)), -1, dtype=torch.long)
    for b in range(batch):
        for h in range(n_kv):
            for m in range(blocks_needed[b][h]):
                table[b, h, m] = perm.pop()
    q = torch.randn(batch, n_kv * groups, dim, generator=gen)
    return q, k_pages, v_pages, table, torch.tensor(lengths)


def _dense_reference(q, k_pages, v_pages, table, seq_lens, scale=None):
    """Per (batch, query head) SDPA over the listed tokens, built with a Python loop (test only)."""
    batch, n_q = q.shape[:2]
    n_kv = table.shape[1]
    groups = n_q // n_kv
    outs = torch.zeros_like(q)
    lses = torch.zeros(batch, n_q)
    for b in range(batch):
        for h in range(n_q):
            kv = h // groups
            ids = [i for i in table[b, kv].tolist() if i >= 0]
            n = int(seq_lens[b, kv])
            keys = torch.cat([k_pages[i, :, kv] for i in ids])[:n] if ids else torch.zeros(0, q.shape[-1])
            vals = torch.cat([v_pages[i, :, kv] for i in ids])[:n] if ids else torch.zeros(0, q.shape[-1])
            s = scale if scale is not None else q.shape[-1] ** -0.5
            if n == 0:
                lses[b, h] = -math.inf
                continue
            outs[b, h] = torch.nn.functional.scaled_dot_product_attention(
                q[b, h][None, None], keys[None, None], vals[None, None], scale=s
            )[0, 0, 0]
            lses[b, h] = torch.logsumexp(keys @ q[b, h] * s, 0)
    return outs, lses


@FAST
@given(
    groups=st.sampled_from([1, 2, 4]),
    n_kv=st.integers(1, 2),
    batch=st.integers(1, 2),
    block_size=st.sampled_from([4, 16]),
    dim=st.sampled_from([8, 32]),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_sparse_decode_equals_sdpa_over_listed_tokens(groups, n_kv, batch, block_size, dim, seed, data) -> None:
    lengths = [[data.draw(st.integers(1, 5 * block_size)) for _ in range(n_kv)] for _ in range(batch)]
    gen = torch.Generator().manual_seed(seed)
    q, k_pages, v_pages, table, seq_lens = _paged_problem(gen, batch, n_kv, groups, dim, block_size, lengths)
    out, lse = ref.sparse_decode_attention(q, k_pages, v_pages, table, seq_lens)
    exp_out, exp_lse = _dense_reference(q, k_pages, v_pages, table, seq_lens)
    torch.testing.assert_close(out, exp_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, exp_lse, atol=1e-5, rtol=1e-5)


def test_all_blocks_selected_equals_dense_sdpa_on_the_contiguous_cache() -> None:
    """A cache laid out in shuffled pages gives the same result as SDPA on the contiguous tensors."""
    gen = torch.Generator().manual_seed(5)
    batch, n_kv, groups, dim, block_size, length = 2, 2, 4, 32, 16, 75
    n_blocks = math.ceil(length / block_size)
    keys = torch.randn(batch, n_kv, length, dim, generator=gen)
    values = torch.randn(batch, n_kv, length, dim, generator=gen)
    q = torch.randn(batch, n_kv * groups, dim, generator=gen)
    perm = torch.randperm(batch * n_blocks, generator=gen)
    k_pages = torch.zeros(batch * n_blocks, block_size, n_kv, dim)
    v_pages = torch.zeros_like(k_pages)
    table = torch.zeros(batch, n_kv, n_blocks, dtype=torch.long)
    for b in range(batch):
        for m in range(n_blocks):
            phys = int(perm[b * n_blocks + m])
            chunk = slice(m * block_size, min((m + 1) * block_size, length))
            n = chunk.stop - chunk.start
            k_pages[phys, :n] = keys[b, :, chunk].transpose(0, 1)
            v_pages[phys, :n] = values[b, :, chunk].transpose(0, 1)
            table[b, :, m] = phys
    seq_lens = torch.full((batch, n_kv), length)
    out, _ = ref.sparse_decode_attention(q, k_pages, v_pages, table, seq_lens)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.unsqueeze(2), keys, values, enable_gqa=True
    ).squeeze(2)
    assert (out - expected).abs().max().item() <= 1e-5


def test_subset_selection_equals_sdpa_over_the_subset() -> None:
    gen = torch.Generator().manual_seed(6)
    q, k_pages, v_pages, table, seq_lens = _paged_problem(gen, 1, 2, 4, 16, 8, [[64, 64]])
    scores = torch.randn(table.shape, generator=gen)
    subset = ref.select_top_k_blocks(scores, table, 3)
    subset_lens = (subset >= 0).sum(-1) * 8
    out, lse = ref.sparse_decode_attention(q, k_pages, v_pages, subset, subset_lens)
    exp_out, exp_lse = _dense_reference(q, k_pages, v_pages, subset, subset_lens)
    torch.testing.assert_close(out, exp_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, exp_lse, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("key_kind,value_kind", [("int8", "int4"), ("int2", "int2"), ("int4", "int2")])
def test_multi_query_and_quantized_and_mixed_sources(key_kind: str, value_kind: str) -> None:
    gen = torch.Generator().manual_seed(7)
    q, k_pages, v_pages, table, seq_lens = _paged_problem(gen, 1, 2, 2, 32, 16, [[64, 64]])
    q = torch.randn(1, 4, 3, 32, generator=gen)  # three queries seeing every listed token
    kq = ref.quantize(k_pages, key_kind, 1, 16)
    vq = ref.quantize(v_pages, value_kind, 3, 16)
    k_deq, v_deq = ref.dequantize(kq), ref.dequantize(vq)
    out_q, lse_q = ref.sparse_decode_attention(q, kq, vq, table, seq_lens)
    out_d, lse_d = ref.sparse_decode_attention(q, k_deq, v_deq, table, seq_lens)
    torch.testing.assert_close(out_q, out_d, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse_q, lse_d, atol=1e-5, rtol=1e-5)
    # Mixed tiers: first two blocks from the quantized pool, last two from full precision.
    mixed, masses = ref.mixed_sparse_attention(
        q,
        [
            ref.PagedSource(kq, vq, table[..., :2], torch.full((1, 2), 32)),
            ref.PagedSource(k_deq, v_deq, table[..., 2:], torch.full((1, 2), 32)),
        ],
    )
    torch.testing.assert_close(mixed.out, out_d.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mixed.lse, lse_d, atol=1e-5, rtol=1e-5)
    total_mass = sum(m.sum(-1) for m in masses)  # summed over G=2 heads and Q=3 queries
    torch.testing.assert_close(total_mass, torch.full((1, 2), 6.0), atol=1e-5, rtol=1e-5)


def test_empty_selection_and_summary_only() -> None:
    q = torch.randn(1, 2, 8)
    pages = torch.randn(2, 4, 1, 8)
    table = torch.full((1, 1, 2), -1, dtype=torch.long)
    out, lse = ref.sparse_decode_attention(q, pages, pages, table, torch.zeros(1, 1, dtype=torch.long))
    assert torch.equal(out, torch.zeros_like(out)) and torch.isinf(lse).all()
    summary = ref.GlobalSummary.empty(1, 1, 8).absorb(torch.randn(1, 1, 5, 8), torch.ones(1, 1, 5, 8))
    out, lse = ref.sparse_decode_attention(q, pages, pages, table, torch.zeros(1, 1, dtype=torch.long), summary=summary)
    torch.testing.assert_close(out, torch.ones_like(out))
    assert torch.isfinite(lse).all()


def test_summary_is_exact_for_identical_dropped_keys() -> None:
    """With every dropped key equal to the mean, the virtual token reproduces the dropped tokens exactly."""
    gen = torch.Generator().manual_seed(8)
    batch, n_kv, groups, dim = 1, 2, 2, 16
    kept_k = torch.randn(batch, n_kv, 10, dim, generator=gen)
    kept_v = torch.randn(batch, n_kv, 10, dim, generator=gen)
    dropped_k = torch.randn(batch, n_kv, 1, dim, generator=gen).expand(batch, n_kv, 7, dim)
    dropped_v = torch.randn(batch, n_kv, 7, dim, generator=gen)
    q = torch.randn(batch, n_kv * groups, 1, dim, generator=gen)
    scale = dim**-0.5
    full, _ = ref.dense_attention_partial(
        q, torch.cat([kept_k, dropped_k], 2), torch.cat([kept_v, dropped_v], 2), scale, causal=False
    )
    kept, _ = ref.dense_attention_partial(q, kept_k, kept_v, scale, causal=False)
    summary = ref.GlobalSummary.empty(batch, n_kv, dim).absorb(dropped_k, dropped_v)
    merged = ref.merge_partials([kept, ref.summary_partial(q, summary, scale)])
    torch.testing.assert_close(merged.out, full.out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(merged.lse, full.lse, atol=1e-5, rtol=1e-5)


def test_dense_causal_partial_matches_sdpa_and_merge_is_exact() -> None:
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(2, 4, 5, 16, generator=gen)
    k = torch.randn(2, 2, 12, 16, generator=gen)
    v = torch.randn(2, 2, 12, 16, generator=gen)
    causal, _ = ref.dense_attention_partial(q, k, v, 0.25, causal=True)
    mask = torch.ones(5, 12, dtype=torch.bool).tril(diagonal=7)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.25, enable_gqa=True)
    torch.testing.assert_close(causal.out, expected, atol=1e-5, rtol=1e-5)
    # Splitting the keys into a past part (seen by all) and a causal chunk part, then merging, is exact.
    past, _ = ref.dense_attention_partial(q, k[:, :, :7], v[:, :, :7], 0.25, causal=False)
    chunk, _ = ref.dense_attention_partial(q, k[:, :, 7:], v[:, :, 7:], 0.25, causal=True)
    merged = ref.merge_partials([past, chunk])
    torch.testing.assert_close(merged.out, expected, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# Quest block scores
# ------------------------------------------------------------------------------------------------


@FAST
@given(groups=st.sampled_from([1, 4]), seed=st.integers(0, 2**16), fill=st.integers(1, 8))
def test_quest_bound_is_at_least_the_true_max(groups: int, seed: int, fill: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    n_kv, dim, block_size, n_pages = 2, 16, 8, 6
    k_pages = torch.randn(n_pages, block_size, n_kv, dim, generator=gen)
    fills = torch.full((n_pages,), block_size)
    fills[-1] = fill
    kmin, kmax = ref.block_key_bounds(k_pages, fills)
    table = torch.arange(n_pages).view(1, 1, -1).expand(1, n_kv, n_pages).contiguous()
    q = torch.randn(1, n_kv * groups, dim, generator=gen)
    bound = ref.quest_scores(q, kmin, kmax, table)  # [1, Hkv, P]
    for h in range(n_kv * groups):
        kv = h // groups
        for p in range(n_pages):
            true_max = (k_pages[p, : int(fills[p]), kv] @ q[0, h]).max()
            assert bound[0, kv, p] >= true_max - 1e-5


def test_top_k_keeps_order_and_forced_blocks() -> None:
    table = torch.tensor([[[10, 11, 12, 13, 14, -1]]])
    scores = torch.tensor([[[0.1, 5.0, 0.2, 3.0, 0.0, 9.0]]])
    always = torch.tensor([[[True, False, False, False, True, False]]])
    picked = ref.select_top_k_blocks(scores, table, 3, always)
    assert picked.tolist() == [[[10, 11, 14]]]
    picked = ref.select_top_k_blocks(scores, table, 4)
    assert picked.tolist() == [[[10, 11, 12, 13]]]
    compacted, count = ref.compact_block_table(torch.tensor([[[-1, 3, -1, 4]]]))
    assert compacted.tolist() == [[[3, 4, -1, -1]]] and count.tolist() == [[2]]
