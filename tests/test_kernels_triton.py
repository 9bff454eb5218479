"""Triton kernels against the torch reference (kernels.reference).

On a machine without CUDA the kernels run on the Triton interpreter (``TRITON_INTERPRET=1``, set
here while the kernels are defined and during each test of this module, so the rest of the session
is unaffected); with CUDA they run compiled on the GPU. The interpreter is slow: shapes are tiny, the full matrix (GQA
1/4/8 x head dims 64/128/256 x block sizes 16/64 x tiers) is marked ``slow``, and a representative
subset runs unmarked.
"""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import reference as ref
from kernels.formats import BY_NAME, QUANTIZED

ROOT = Path(__file__).resolve().parent.parent
ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
# fp32 on the interpreter; TF32 tensor-core dots on the GPU.
TOL = dict(atol=2e-2, rtol=2e-2) if ON_GPU else dict(atol=2e-5, rtol=2e-5)


def _load_kernels():
    """Import the Triton modules, defining their kernels for the interpreter when there is no GPU.

    Triton decides at definition time (``@triton.jit``) whether a function is interpreted, for its
    own library functions (``tl.zeros``, ``tl.sum``, ...) too. When Triton was imported earlier in
    the session without the interpreter, those library functions are compiled-only; the autouse
    fixture below then swaps in interpreted twins for the duration of each test.
    """
    if ON_GPU:
        from kernels import triton_decode, triton_quant

        return triton_decode, triton_quant
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        from triton.runtime.interpreter import InterpretedFunction

        from kernels import triton_decode, triton_quant

        if not isinstance(triton_decode._decode_stage1, InterpretedFunction):
            triton_decode = importlib.reload(triton_decode)
            triton_quant = importlib.reload(triton_quant)
    finally:
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous
    return triton_decode, triton_quant


def _compiled_only_library_functions() -> list[tuple[object, str, object]]:
    """(module, name, interpreted twin) for Triton library functions defined without the interpreter."""
    if ON_GPU:
        return []
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    found = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("triton.language") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                found.append((module, attr, InterpretedFunction(value.fn)))
    return found


td, tq = _load_kernels()
_LIBRARY_TWINS = _compiled_only_library_functions()


@pytest.fixture(autouse=True)
def _triton_interpreter(monkeypatch):
    """Without a GPU, each test runs with ``TRITON_INTERPRET=1`` (Triton imports parts of itself
    lazily and checks it then) and interpreted Triton library functions; both are undone after."""
    if not ON_GPU:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    for module, attr, twin in _LIBRARY_TWINS:
        monkeypatch.setattr(module, attr, twin)
    yield

FEW = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MORE = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------------
# Problems
# ------------------------------------------------------------------------------------------------


def _problem(
    seed: int,
    batch: int,
    n_kv: int,
    groups: int,
    dim: int,
    block_size: int,
    lengths: list[list[int]],
    n_queries: int | None = None,
    spare_pages: int = 3,
    dtype: torch.dtype = torch.float32,
):
    """Random paged K/V where each (batch, KV head) lists a shuffled set of physical blocks.

    ``lengths[b][h]`` valid tokens; -1 pads the table. Returns q, k_pages, v_pages, table, seq_lens.
    """
    gen = torch.Generator().manual_seed(seed)
    need = [[math.ceil(n / block_size) for n in row] for row in lengths]
    width = max(1, max(max(row) for row in need))
    total = sum(sum(row) for row in need) + spare_pages
    k_pages = torch.randn(total, block_size, n_kv, dim, generator=gen).to(dtype)
    v_pages = torch.randn(total, block_size, n_kv, dim, generator=gen).to(dtype)
    perm = torch.randperm(total, generator=gen).tolist()
    table = torch.full((batch, n_kv, width), -1, dtype=torch.long)
    for b in range(batch):
        for h in range(n_kv):
            for m in range(need[b][h]):
                table[b, h, m] = perm.pop()
    shape = (batch, n_kv * groups, dim) if n_queries is None else (batch, n_kv * groups, n_queries, dim)
    q = torch.randn(shape, generator=gen).to(dtype)
    return q, k_pages, v_pages, table, torch.tensor(lengths)


def _outliers(x: torch.Tensor, count: int) -> torch.Tensor | None:
    if not count:
        return None
    return ref.outlier_index_for(ref.select_outlier_channels(x, count, head_axis=2), 4, 2)


def _quantized(pages: torch.Tensor, kind: str, is_key: bool, group: int, n_out: int = 0) -> ref.QuantizedTensor:
    idx = _outliers(pages, n_out)
    group = math.gcd(group, pages.shape[1] if is_key else pages.shape[3])  # as kvstore does
    if is_key:
        return ref.quantize_keys(pages, kind, group, token_axis=1, outlier_idx=idx, param_dtype=torch.float16)
    return ref.quantize_values(pages, kind, group, outlier_idx=idx, param_dtype=torch.float16)


def _to(x, device=DEVICE):
    """Move a tensor / QuantizedTensor / PagedSource / GlobalSummary to ``device``."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, ref.QuantizedTensor):
        fields = dict(vars(x))
        for name in ("data", "scale", "zero", "outlier_idx", "outlier_values"):
            if fields[name] is not None:
                fields[name] = fields[name].to(device)
        return ref.QuantizedTensor(**fields)
    if isinstance(x, ref.PagedSource):
        return ref.PagedSource(_to(x.k_pages, device), _to(x.v_pages, device), _to(x.block_table, device), _to(x.seq_lens, device))
    if isinstance(x, ref.GlobalSummary):
        return ref.GlobalSummary(_to(x.key_sum, device), _to(x.value_sum, device), _to(x.count, device))
    raise TypeError(type(x))


def _close(actual: torch.Tensor, expected: torch.Tensor, **tol) -> None:
    torch.testing.assert_close(actual.cpu().float(), expected.cpu().float(), **(tol or TOL))


def _check_decode(q, k_src, v_src, table, seq_lens, softcap=None, num_splits=None, summary=None):
    exp_out, exp_lse = ref.sparse_decode_attention(q, k_src, v_src, table, seq_lens, summary=summary, softcap=softcap)
    out, lse = td.sparse_decode_attention(
        _to(q), _to(k_src), _to(v_src), _to(table), _to(seq_lens), summary=_to(summary), softcap=softcap, num_splits=num_splits
    )
    assert out.shape == exp_out.shape and out.dtype == exp_out.dtype
    _close(out, exp_out)
    _close(lse, exp_lse)


def _sources_for(tier: str, k_pages, v_pages, table, seq_lens, block_size: int, group: int,
                 kinds: tuple = (None, "int8", "int4", "fp8")):
    """Split the listed blocks into tier sources: all full, all quantized, or mixed (one pool per kind; a
    (key kind, value kind) pair is a split format such as k4v2)."""
    if tier == "full":
        return [ref.PagedSource(k_pages, v_pages, table, seq_lens)]
    if tier == "int4":
        k = _quantized(k_pages, "int4", True, group, n_out=2)
        v = _quantized(v_pages, "int4", False, group, n_out=2)
        return [ref.PagedSource(k, v, table, seq_lens)]
    # Mixed: block column m goes to tier m % len(kinds) (full, int8, int4, fp8 by default); every source
    # gets its own table whose listed blocks are full except its last one (seq_lens per source).
    width = table.shape[2]
    sources = []
    for tier_idx, kind in enumerate(kinds):
        cols = [m for m in range(width) if m % len(kinds) == tier_idx]
        if not cols:
            continue
        sub = table[..., cols]
        starts = torch.tensor(cols) * block_size
        valid = (seq_lens.unsqueeze(-1) - starts).clamp(0, block_size)
        sub = torch.where(valid > 0, sub, torch.full_like(sub, -1))
        # A source's listed blocks must be full except the last: keep the partial one last.
        lens = valid.sum(-1)
        if kind is None:
            sources.append(ref.PagedSource(k_pages, v_pages, sub, lens))
        else:
            k_kind, v_kind = kind if isinstance(kind, tuple) else (kind, kind)
            k = _quantized(k_pages, k_kind, True, group, n_out=1 if k_kind == "int8" else 0)
            v = _quantized(v_pages, v_kind, False, group, n_out=1 if v_kind == "int8" else 0)
            sources.append(ref.PagedSource(k, v, sub, lens))
    return sources


def _check_mixed(q, sources, summary=None, extra=(), softcap=None, num_splits=None):
    exp, exp_mass = ref.mixed_sparse_attention(q, sources, summary=summary, softcap=softcap, extra=extra)
    got, mass = td.mixed_sparse_attention(
        _to(q),
        [_to(s) for s in sources],
        summary=_to(summary),
        softcap=softcap,
        extra=[ref.AttentionPartial(_to(p.out), _to(p.lse)) for p in extra],
        num_splits=num_splits,
    )
    _close(got.out, exp.out)
    _close(got.lse, exp.lse)
    assert len(mass) == len(exp_mass)
    for a, b in zip(mass, exp_mass):
        assert a.shape == b.shape
        _close(a, b, atol=5e-2 if ON_GPU else 2e-5, rtol=5e-2 if ON_GPU else 2e-5)


# ------------------------------------------------------------------------------------------------
# Decode attention: representative cases (unmarked, run in CI)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "groups,dim,block_size",
    [(1, 64, 16), (4, 128, 64), (8, 256, 16)],
)
def test_full_precision_decode_matches_reference(groups: int, dim: int, block_size: int) -> None:
    lengths = [[3 * block_size + 5, 2 * block_size], [block_size - 3, 4 * block_size]]
    q, k, v, table, seq = _problem(groups * dim + block_size, 2, 2, groups, dim, block_size, lengths)
    _check_decode(q, k, v, table, seq)


@pytest.mark.parametrize(
    "k_kind,v_kind,n_out",
    [("int4", "int4", 0), ("int8", "int4", 2), ("fp8", "int8", 1), ("int4", "fp8", 3), ("int2", "int2", 0), ("int2", "int4", 1)],
)
def test_quantized_decode_matches_reference(k_kind: str, v_kind: str, n_out: int) -> None:
    q, k, v, table, seq = _problem(11, 1, 2, 4, 64, 16, [[50, 33]])
    kq = _quantized(k, k_kind, True, 8, n_out)
    vq = _quantized(v, v_kind, False, 16, n_out)
    _check_decode(q, kq, vq, table, seq, num_splits=2)


def test_mixed_tiers_in_one_launch_with_summary_and_extra_partial() -> None:
    q, k, v, table, seq = _problem(12, 2, 2, 4, 64, 16, [[120, 97], [16, 128]], n_queries=2)
    sources = _sources_for("mixed", k, v, table, seq, 16, 8)
    assert len(sources) == 4  # full, int8, int4, fp8
    summary = ref.GlobalSummary.empty(2, 2, 64).absorb(torch.randn(2, 2, 5, 64), torch.randn(2, 2, 5, 64))
    chunk, _ = ref.dense_attention_partial(q, torch.randn(2, 2, 2, 64), torch.randn(2, 2, 2, 64), 64**-0.5)
    _check_mixed(q, sources, summary=summary, extra=[chunk], num_splits=3)


def test_every_format_of_the_table_in_one_launch() -> None:
    """One pool per format (kernels.formats), the split k4v2 as INT4 keys with INT2 values: the fused kernel takes
    them all at once instead of falling back to the reference."""
    kinds = (None, *(f.parts or f.name for f in QUANTIZED))
    assert len(kinds) == len(BY_NAME) <= td.MAX_SOURCES
    q, k, v, table, seq = _problem(13, 2, 2, 4, 64, 16, [[190, 161], [16, 192]], n_queries=1)
    sources = _sources_for("mixed", k, v, table, seq, 16, 8, kinds)
    assert len(sources) == len(kinds) and ("int4", "int2") in [(s.k_pages.kind, s.v_pages.kind) for s in sources[1:]]
    _check_mixed(q, sources, num_splits=2)


@pytest.mark.parametrize("n_queries,n_extra", [(1, 2), (20, 1), (2, 3)])
def test_stage_two_merges_summary_extras_and_masses(n_queries: int, n_extra: int) -> None:
    """Stage 2 merges the summary (softcapped logit, a head with nothing dropped) and up to two extra
    partials and sums the block masses; 80 rows (two row tiles) and a third extra take the host path."""
    q, k, v, table, seq = _problem(15, 1, 2, 4, 64, 16, [[70, 33]], n_queries=n_queries)
    kq = _quantized(k, "int4", True, 8)
    sources = [ref.PagedSource(kq, v, table, seq)]
    summary = ref.GlobalSummary.empty(1, 2, 64).absorb(torch.randn(1, 2, 4, 64), torch.randn(1, 2, 4, 64))
    summary.count[0, 1] = 0.0  # nothing dropped from the second head: its virtual token is absent
    extra = []
    for i in range(n_extra):
        ke, ve = torch.randn(1, 2, 3 + i, 64), torch.randn(1, 2, 3 + i, 64)
        extra.append(ref.dense_attention_partial(q, ke, ve, 64**-0.5)[0])
    _check_mixed(q, sources, summary=summary, extra=extra, softcap=3.0, num_splits=2)


@pytest.mark.skipif(ON_GPU, reason="compares interpreted Triton with the CPU reference")
def test_a_compressed_cache_decodes_through_triton_like_through_the_reference(monkeypatch) -> None:
    """The whole decode path of a TieredCache (quantized and dropped blocks, the summary, the current
    token's own attention as an extra partial, block masses feeding the scores) on the Triton backend."""
    try:
        from kv_helpers import feed, tiny_model, token_ids
    except ImportError:
        from tests.kv_helpers import feed, tiny_model, token_ids
    from kvstore.attention import MINUTIA_ATTENTION
    from kvstore.cache import TieredCache

    from kernels import dispatch

    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    module = dispatch._triton_module("triton_decode")
    calls = []
    fused = module.mixed_sparse_attention
    monkeypatch.setattr(module, "mixed_sparse_attention", lambda *a, **kw: calls.append(1) or fused(*a, **kw))
    logits, scores = {}, {}
    for mode in ("reference", "triton"):
        monkeypatch.setenv("MINUTIA_KERNELS", mode)
        cache = TieredCache(config=model.config, block_size=16, compress=True, budget_ratio=0.3, recent_tokens=16,
                            warm_kinds=("int8", "int4"), sink_tokens=4, allow_drop=True)
        feed(model, cache, token_ids(160), chunk=32)
        steps = [feed(model, cache, token_ids(1, seed=9 + i))[0, -1] for i in range(3)]
        assert float(cache.tiered_layers[0].summary.count.max()) > 0, "the budget must have dropped tokens"
        logits[mode] = torch.stack(steps)
        scores[mode] = [layer.table.block_index.clone() for layer in cache.tiered_layers]
    assert calls, "the Triton backend served the decode steps"
    for a, b in zip(scores["reference"], scores["triton"]):
        assert torch.equal(a, b)
    _close(logits["triton"], logits["reference"], atol=1e-4, rtol=1e-4)


def test_block_mass_of_a_partial_matches_reference() -> None:
    q, k, v, table, seq = _problem(13, 1, 2, 2, 64, 16, [[40, 64]], n_queries=3)
    kq = _quantized(k, "int8", True, 16)
    exp, exp_mass = ref.paged_attention_partial(q, kq, v, table, seq, 0.1, None, True)
    got, mass = td.paged_attention_partial(_to(q), _to(kq), _to(v), _to(table), _to(seq), 0.1, None, True)
    _close(got.out, exp.out)
    _close(got.lse, exp.lse)
    assert mass.shape == exp_mass.shape == (1, 2, 2, 3, table.shape[2])
    _close(mass, exp_mass)


def test_padding_inside_the_table_softcap_and_split_counts() -> None:
    q, k, v, table, seq = _problem(14, 1, 1, 4, 64, 16, [[64]])
    table[0, 0, 1] = -1  # a hole: its positions count towards seq_lens but are masked
    for splits in (1, 4):
        _check_decode(q, k, v, table, seq, softcap=2.5, num_splits=splits)


def test_empty_selection() -> None:
    q = torch.randn(1, 4, 64)
    pages = torch.randn(3, 16, 1, 64)
    table = torch.full((1, 1, 2), -1, dtype=torch.long)
    zero = torch.zeros(1, 1, dtype=torch.long)
    out, lse = td.sparse_decode_attention(_to(q), _to(pages), _to(pages), _to(table), _to(zero))
    assert torch.equal(out.cpu(), torch.zeros_like(q)) and torch.isinf(lse).all() and (lse < 0).all()
    # Zero-width table, and the summary alone.
    empty = torch.zeros(1, 1, 0, dtype=torch.long)
    summary = ref.GlobalSummary.empty(1, 1, 64).absorb(torch.randn(1, 1, 5, 64), torch.ones(1, 1, 5, 64))
    out, lse = td.sparse_decode_attention(_to(q), _to(pages), _to(pages), _to(empty), _to(zero), summary=_to(summary))
    _close(out, torch.ones_like(q))
    merged, masses = td.mixed_sparse_attention(_to(q), [ref.PagedSource(_to(pages), _to(pages), _to(table), _to(zero))])
    assert torch.equal(merged.out.cpu(), torch.zeros(1, 4, 1, 64)) and masses[0].shape == (1, 1, 2)
    assert torch.equal(masses[0].cpu(), torch.zeros(1, 1, 2))


def test_bf16_queries_and_pages() -> None:
    q, k, v, table, seq = _problem(15, 1, 2, 4, 64, 16, [[40, 21]], dtype=torch.bfloat16)
    exp_out, exp_lse = ref.sparse_decode_attention(q, k, v, table, seq)
    out, lse = td.sparse_decode_attention(_to(q), _to(k), _to(v), _to(table), _to(seq))
    assert out.dtype == torch.bfloat16
    _close(out, exp_out, atol=2e-2, rtol=2e-2)
    _close(lse, exp_lse, atol=1e-4 if not ON_GPU else 2e-2, rtol=1e-4 if not ON_GPU else 2e-2)


@FEW
@given(
    groups=st.sampled_from([1, 4, 8]),
    block_size=st.sampled_from([16, 64]),
    tier=st.sampled_from(["full", "int4", "mixed"]),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_hypothesis_shapes(groups: int, block_size: int, tier: str, seed: int, data) -> None:
    n_kv = data.draw(st.integers(1, 2))
    lengths = [[data.draw(st.integers(0, 4 * block_size)) for _ in range(n_kv)]]
    q, k, v, table, seq = _problem(seed, 1, n_kv, groups, 64, block_size, lengths)
    sources = _sources_for(tier, k, v, table, seq, block_size, 16)
    _check_mixed(q, sources, num_splits=data.draw(st.integers(1, 3)))


# ------------------------------------------------------------------------------------------------
# Decode attention: the full matrix (slow on the interpreter)
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("tier", ["full", "int4", "mixed"])
@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("groups", [1, 4, 8])
def test_decode_matrix(groups: int, dim: int, block_size: int, tier: str) -> None:
    lengths = [[5 * block_size - 7, block_size], [2 * block_size + 1, 0]]
    q, k, v, table, seq = _problem(groups * 1000 + dim + block_size, 2, 2, groups, dim, block_size, lengths)
    sources = _sources_for(tier, k, v, table, seq, block_size, 32)
    _check_mixed(q, sources)


@pytest.mark.slow
@MORE
@given(
    groups=st.sampled_from([1, 2, 4, 8]),
    n_kv=st.integers(1, 3),
    batch=st.integers(1, 2),
    block_size=st.sampled_from([16, 32, 64]),
    dim=st.sampled_from([64, 128]),
    n_queries=st.sampled_from([None, 1, 3]),
    tier=st.sampled_from(["full", "int4", "mixed"]),
    softcap=st.sampled_from([None, 30.0]),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_hypothesis_shapes_many(groups, n_kv, batch, block_size, dim, n_queries, tier, softcap, seed, data) -> None:
    lengths = [[data.draw(st.integers(0, 5 * block_size)) for _ in range(n_kv)] for _ in range(batch)]
    q, k, v, table, seq = _problem(seed, batch, n_kv, groups, dim, block_size, lengths, n_queries=n_queries)
    sources = _sources_for(tier, k, v, table, seq, block_size, 16)
    _check_mixed(q, sources, softcap=softcap, num_splits=data.draw(st.integers(1, 4)))


# ------------------------------------------------------------------------------------------------
# The oracle itself: the reference reads quantized pages without dequantizing them (scales folded
# into queries / probabilities); it must equal attention over the dequantized pages.
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k_kind", ["int8", "int4", "int2", "fp8"])
@pytest.mark.parametrize("v_kind", ["int8", "int4", "int2", "fp8"])
def test_reference_quantized_path_equals_dequantized_attention(k_kind: str, v_kind: str) -> None:
    q, k, v, table, seq = _problem(51, 2, 2, 4, 32, 16, [[70, 40], [33, 64]], n_queries=2)
    table[0, 1, 0] = -1
    for n_out, k_group, v_group in ((0, 8, 16), (2, 2, 4), (1, 16, 32)):
        kq = _quantized(k, k_kind, True, k_group, n_out)
        vq = _quantized(v, v_kind, False, v_group, n_out)
        k_deq, v_deq = ref.dequantize(kq, torch.float32), ref.dequantize(vq, torch.float32)
        got, mass = ref.paged_attention_partial(q, kq, vq, table, seq, 0.2, 3.0, True)
        exp, exp_mass = ref.paged_attention_partial(q, k_deq, v_deq, table, seq, 0.2, 3.0, True)
        torch.testing.assert_close(got.out, exp.out, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.lse, exp.lse, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(mass, exp_mass, atol=1e-5, rtol=1e-5)


def test_reference_chunks_long_reads_exactly(monkeypatch) -> None:
    """Reads of many blocks go in column chunks merged by LSE: same output, LSE and block mass."""
    q, k, v, table, seq = _problem(52, 2, 2, 4, 32, 16, [[200, 150], [208, 5]], n_queries=3)
    table[0, 1, 4] = -1
    kq, vq = _quantized(k, "int4", True, 8), _quantized(v, "int8", False, 16)
    for k_src, v_src in ((k, v), (kq, vq)):
        whole, whole_mass = ref.paged_attention_partial(q, k_src, v_src, table, seq, 0.2, 4.0, True)
        with monkeypatch.context() as patch:
            patch.setattr(ref, "_CHUNK_BYTES", 2 * 2 * 16 * 32 * 4 * 3)  # 3 listed blocks per chunk
            parts, parts_mass = ref.paged_attention_partial(q, k_src, v_src, table, seq, 0.2, 4.0, True)
        torch.testing.assert_close(parts.out, whole.out, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(parts.lse, whole.lse, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(parts_mass, whole_mass, atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# Quest scores + top-k
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("groups,n_queries", [(4, None), (1, 3)])
def test_quest_scores_and_top_k_match_reference(groups: int, n_queries: int | None) -> None:
    gen = torch.Generator().manual_seed(21)
    n_kv, dim, block_size, n_pages = 2, 64, 16, 12
    k_pages = torch.randn(n_pages, block_size, n_kv, dim, generator=gen)
    fill = torch.full((n_pages,), block_size)
    fill[3] = 5
    kmin, kmax = ref.block_key_bounds(k_pages, fill)
    table = torch.stack([torch.randperm(n_pages, generator=gen)[:9] for _ in range(2 * n_kv)]).view(2, n_kv, 9)
    table[1, 0, 7:] = -1
    shape = (2, n_kv * groups, dim) if n_queries is None else (2, n_kv * groups, n_queries, dim)
    q = torch.randn(shape, generator=gen)
    expected = ref.quest_scores(q, kmin, kmax, table)
    got = td.quest_scores(_to(q), _to(kmin), _to(kmax), _to(table))
    _close(got, expected, atol=1e-4, rtol=1e-5)
    always = torch.zeros_like(table, dtype=torch.bool)
    always[..., 0] = True
    picked = td.quest_top_k(_to(q), _to(kmin), _to(kmax), _to(table), 4, _to(always))
    assert torch.equal(picked.cpu(), ref.select_top_k_blocks(expected, table, 4, always))


# ------------------------------------------------------------------------------------------------
# Quantize / pack
# ------------------------------------------------------------------------------------------------


def _assert_same_quantized(got: ref.QuantizedTensor, exp: ref.QuantizedTensor) -> None:
    assert (got.kind, got.axis, got.group_size, got.shape, got.dtype) == (exp.kind, exp.axis, exp.group_size, exp.shape, exp.dtype)
    for name in ("data", "scale", "zero", "outlier_values"):
        a, b = getattr(got, name), getattr(exp, name)
        assert (a is None) == (b is None), name
        if a is None:
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if a.dtype == ref.FP8_DTYPE:
            a, b = a.view(torch.uint8), b.view(torch.uint8)
        assert torch.equal(a.cpu(), b.cpu()), f"{name} differs in {(a.cpu() != b.cpu()).sum().item()} places"


@pytest.mark.parametrize("kind", ["int8", "int4", "int2", "fp8"])
@pytest.mark.parametrize("axis", [1, 3])
def test_quantize_kernel_is_bit_identical(kind: str, axis: int) -> None:
    gen = torch.Generator().manual_seed(31)
    for param_dtype, x_dtype, n_out in ((torch.float16, torch.float32, 2), (torch.float32, torch.bfloat16, 0), (torch.bfloat16, torch.float32, 1)):
        x = (torch.randn(3, 32, 2, 64, generator=gen) * 3).to(x_dtype)
        x[0, :, 0, :] = 0.25  # constant groups
        idx = _outliers(x.float(), n_out)
        exp = ref.quantize(x, kind, axis, 16, idx, param_dtype)
        got = tq.quantize(_to(x), kind, axis, 16, _to(idx), param_dtype)
        _assert_same_quantized(got, exp)


@FEW
@given(
    kind=st.sampled_from(["int8", "int4", "int2", "fp8"]),
    blocks=st.integers(1, 3),
    group=st.sampled_from([2, 4, 8, 32]),
    group_count=st.integers(1, 2),
    heads=st.integers(1, 3),
    along_tokens=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_quantize_kernel_hypothesis(kind, blocks, group, group_count, heads, along_tokens, seed) -> None:
    if kind == "int2" and group % 4:
        group *= 2  # INT2 packs four codes per byte: its groups are multiples of 4
    gen = torch.Generator().manual_seed(seed)
    tokens = group * group_count if along_tokens else 4
    dim = 8 if along_tokens else group * group_count
    x = torch.randn(blocks, tokens, heads, dim, generator=gen) * 2
    axis = 1 if along_tokens else 3
    exp = ref.quantize(x, kind, axis, group, None, torch.float16)
    _assert_same_quantized(tq.quantize(_to(x), kind, axis, group, None, torch.float16), exp)


def test_quantized_by_the_kernel_feeds_the_decode_kernel() -> None:
    q, k, v, table, seq = _problem(32, 1, 2, 4, 64, 16, [[48, 30]])
    idx = _outliers(k, 2)
    kq = tq.quantize_keys(_to(k), "int4", 16, 1, _to(idx), torch.float16)
    vq = tq.quantize_values(_to(v), "int4", 16, _to(idx), torch.float16)
    out, _ = td.sparse_decode_attention(_to(q), kq, vq, _to(table), _to(seq))
    exp, _ = ref.sparse_decode_attention(q, _to(kq, "cpu"), _to(vq, "cpu"), table, seq)
    _close(out, exp)


# ------------------------------------------------------------------------------------------------
# The dispatch point
# ------------------------------------------------------------------------------------------------


def test_dispatch_routes_by_device_and_environment(monkeypatch) -> None:
    from kernels import dispatch

    monkeypatch.delenv("MINUTIA_KERNELS", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert dispatch.backend_for("cpu") == "reference"
    monkeypatch.setenv("MINUTIA_KERNELS", "triton")
    with pytest.raises(RuntimeError):
        dispatch.backend_for("cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert dispatch.backend_for("cpu") == "triton"
    monkeypatch.setenv("MINUTIA_KERNELS", "auto")
    assert dispatch.backend_for("cpu") == "triton"
    monkeypatch.setenv("MINUTIA_KERNELS", "reference")
    assert dispatch.backend_for("cpu") == "reference"
    monkeypatch.setenv("MINUTIA_KERNELS", "bogus")
    with pytest.raises(ValueError):
        dispatch.backend_for("cpu")
    # The reference API is re-exported unchanged.
    assert dispatch.pack_int4 is ref.pack_int4 and dispatch.merge_partials is ref.merge_partials


def test_dispatch_calls_give_reference_results_on_both_backends(monkeypatch) -> None:
    from kernels import dispatch

    q, k, v, table, seq = _problem(41, 1, 2, 4, 64, 16, [[40, 20]])
    kq = _quantized(k, "int4", True, 16)
    exp_out, exp_lse = ref.sparse_decode_attention(q, kq, v, table, seq)
    for mode in ("reference", "triton"):
        monkeypatch.setenv("MINUTIA_KERNELS", mode)
        out, lse = dispatch.sparse_decode_attention(_to(q), _to(kq), _to(v), _to(table), _to(seq))
        _close(out, exp_out)
        qt = dispatch.quantize(_to(k), "int4", 1, 16, None, torch.float16)
        _assert_same_quantized(qt, ref.quantize(k, "int4", 1, 16, None, torch.float16))
    # A case the Triton quantize kernel does not cover (odd group) falls back in auto mode only: the
    # reference on the same device (a GPU's float division may round differently from the CPU's).
    monkeypatch.setenv("MINUTIA_KERNELS", "auto")
    x = torch.randn(2, 3, 1, 6)
    _assert_same_quantized(dispatch.quantize(_to(x), "int8", 1, 3), ref.quantize(_to(x), "int8", 1, 3))
    # INT2 groups must hold whole packed bytes (4 codes) for the kernel; a group of 6 falls back too.
    y = torch.randn(2, 12, 1, 8)
    _assert_same_quantized(dispatch.quantize(_to(y), "int2", 1, 6), ref.quantize(_to(y), "int2", 1, 6))
    monkeypatch.setenv("MINUTIA_KERNELS", "triton")
    with pytest.raises(NotImplementedError):
        dispatch.quantize(_to(x), "int8", 1, 3)
    with pytest.raises(NotImplementedError):
        dispatch.quantize(_to(y), "int2", 1, 6)
    _assert_same_quantized(dispatch.quantize(_to(y), "int2", 1, 4), ref.quantize(_to(y), "int2", 1, 4))


# ------------------------------------------------------------------------------------------------
# The kernels compile for a GPU (no GPU needed: Triton compiles ahead of time for a target)
# ------------------------------------------------------------------------------------------------

_COMPILE_SCRIPT = textwrap.dedent(
    """
    import inspect, os, sys
    os.environ.pop("TRITON_INTERPRET", None)
    sys.path.insert(0, sys.argv[1])
    import torch, triton
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton._C.libtriton import native_specialize_impl
    from kernels import reference as ref, triton_decode as td, triton_quant as tq, triton_select as ts

    target = GPUTarget("cuda", int(sys.argv[2]), 32)
    backend = make_backend(target)
    done = []

    class Compile:
        def __init__(self, kernel):
            self.kernel = kernel
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                k = self.kernel
                opts = {n: kwargs.pop(n) for n in ("num_warps", "num_stages") if n in kwargs}
                bound = inspect.signature(k.fn).bind(*args, **kwargs)
                bound.apply_defaults()
                spec = [("constexpr", v) if p.is_constexpr else native_specialize_impl(BaseBackend, v, p.is_const, True, True)
                        for p, v in zip(k.params, bound.arguments.values())]
                options, signature, constexprs, attrs = k._pack_args(backend, opts, bound.arguments, spec, opts)
                compiled = triton.compile(ASTSource(k, signature, constexprs, attrs), target=target, options=options.__dict__)
                done.append((k.fn.__name__, "cubin" in compiled.asm))
            return run

    for mod, names in ((td, ("_decode_stage1", "_decode_stage2", "_quest_kernel")), (tq, ("_quantize_kernel",)),
                       (ts, ("_select_kernel",))):
        for name in names:
            setattr(mod, name, Compile(getattr(mod, name)))
    td._default_splits = lambda n, p, d: 4
    torch.manual_seed(0)
    k = torch.randn(8, 64, 2, 128)
    v = torch.randn(8, 64, 2, 128)
    idx = ref.outlier_index_for(ref.select_outlier_channels(k, 2, head_axis=2), 4, 2)
    table = torch.arange(8).view(1, 1, 8).repeat(1, 2, 1)
    seq = torch.full((1, 2), 500)
    q = torch.randn(1, 8, 128)
    sources = [
        ref.PagedSource(k, v, table, seq),
        ref.PagedSource(ref.quantize(k, "int4", 1, 32, idx, torch.float16), ref.quantize(v, "int4", 3, 32, idx, torch.float16), table, seq),
        ref.PagedSource(ref.quantize(k, "int8", 1, 32), ref.quantize(v, "fp8", 3, 32), table, seq),
        ref.PagedSource(ref.quantize(k, "int2", 1, 32), ref.quantize(v, "int2", 3, 32), table, seq),
    ]
    td._compiled_for = lambda device: True  # CPU tensors stand in for CUDA ones: compile the GPU variant
    td.mixed_sparse_attention(q, sources, softcap=30.0)
    summary = ref.GlobalSummary.empty(1, 2, 128).absorb(torch.randn(1, 2, 3, 128), torch.randn(1, 2, 3, 128))
    chunk, _ = ref.dense_attention_partial(q, torch.randn(1, 2, 2, 128), torch.randn(1, 2, 2, 128), 128**-0.5)
    td.mixed_sparse_attention(q, sources, summary=summary, extra=[chunk])  # stage 2 with the summary and an extra
    td.quest_scores(q, k.amin(1), k.amax(1), table)
    for kind in ("int8", "int4", "int2", "fp8"):
        tq.quantize(k, kind, 1, 32, idx, torch.float16)
        tq.quantize(v, kind, 3, 32, None, torch.bfloat16)
    wide = torch.randint(0, 8, (1, 2, 4096))  # the fused selection at its widest table (8 warps), then a small one
    ts.quest_top_k(q.bfloat16(), k.amin(1), k.amax(1), wide, 300, torch.zeros(1, 2, 4096, dtype=torch.bool))
    ts.quest_top_k(q.view(1, 8, 1, 128), k.amin(1).half(), k.amax(1).half(), wide[..., :40].int(), 7)
    assert done and all(ok for _, ok in done), done
    print(len(done), "kernels compiled to cubin for sm_" + sys.argv[2])
    """
)


@pytest.mark.skipif(ON_GPU, reason="the GPU run compiles and runs the kernels for real")
@pytest.mark.parametrize("arch", [90])
def test_kernels_compile_for_a_cuda_target(arch: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", _COMPILE_SCRIPT, str(ROOT), str(arch)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "compiled to cubin" in result.stdout
