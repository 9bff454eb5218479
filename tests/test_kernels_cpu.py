"""The fused CPU decode kernel (kernels.cpu_decode) against the torch reference (kernels.reference).

Compared as the Triton kernels are (tests/test_kernels_triton.py): same problems, fp32 tolerance
2e-5 in the exact mode (``MINUTIA_CPU_DECODE=exact``, set for every test here unless it says
otherwise). The fast mode (int8 queries x INT8/INT4 key codes, bf16 weights x INT4 value codes) is
checked against a bound derived from those roundings (:func:`_fast_bound`). The kernel is compiled
once per machine (cached under the torch extensions folder) and loaded once per test session.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch

from kernels import cpu_decode as cd
from kernels import dispatch
from kernels import reference as ref
from kvstore.blocks import HEAD_MAJOR, with_layout

TOL = dict(atol=2e-5, rtol=2e-5)

pytestmark = pytest.mark.skipif(not cd.available(), reason=f"fused CPU kernel did not build: {cd.build_error()}")


@pytest.fixture(autouse=True)
def _exact_mode(monkeypatch):
    monkeypatch.setenv("MINUTIA_CPU_DECODE", "exact")


def _problem(seed: int, batch: int, n_kv: int, groups: int, dim: int, block_size: int, lengths, dtype=torch.float32):
    """Random paged K/V; each (batch, KV head) lists shuffled physical blocks, ``lengths[b][h]`` tokens."""
    gen = torch.Generator().manual_seed(seed)
    need = [[math.ceil(n / block_size) for n in row] for row in lengths]
    width = max(1, max(max(row) for row in need))
    total = sum(sum(row) for row in need) + 3
    k = torch.randn(total, block_size, n_kv, dim, generator=gen).to(dtype)
    v = torch.randn(total, block_size, n_kv, dim, generator=gen).to(dtype)
    perm = torch.randperm(total, generator=gen).tolist()
    table = torch.full((batch, n_kv, width), -1, dtype=torch.long)
    for b in range(batch):
        for h in range(n_kv):
            for m in range(need[b][h]):
                table[b, h, m] = perm.pop()
    q = torch.randn(batch, n_kv * groups, dim, generator=gen).to(dtype)
    return q, k, v, table, torch.tensor(lengths)


def _quantized(pages: torch.Tensor, kind: str, is_key: bool, group: int, n_out: int = 0) -> ref.QuantizedTensor:
    idx = None
    if n_out:
        idx = ref.outlier_index_for(ref.select_outlier_channels(pages, n_out, head_axis=2), 4, 2)
    group = math.gcd(group, pages.shape[1] if is_key else pages.shape[3])
    if is_key:
        return ref.quantize_keys(pages, kind, group, token_axis=1, outlier_idx=idx, param_dtype=torch.float16)
    return ref.quantize_values(pages, kind, group, outlier_idx=idx, param_dtype=torch.float16)


MIXED_TIERS = [None, "int8", "int4", "fp8", "int2"]


def _sources(tier: str, k, v, table, seq_lens, block_size: int, group: int = 32) -> list[ref.PagedSource]:
    """All full, all one quantized format (with outliers), or mixed: column m in tier m % 5
    (full, INT8, INT4, FP8, INT2)."""
    if tier == "full":
        return [ref.PagedSource(k, v, table, seq_lens)]
    if tier in ("int8", "int4", "fp8", "int2"):
        n_out = {"int8": 0, "int4": 2, "fp8": 1, "int2": 2}[tier]
        kq, vq = _quantized(k, tier, True, group, n_out), _quantized(v, tier, False, group, n_out)
        return [ref.PagedSource(kq, vq, table, seq_lens)]
    sources = []
    n_tiers = len(MIXED_TIERS)
    for tier_idx, kind in enumerate(MIXED_TIERS):
        cols = [m for m in range(table.shape[2]) if m % n_tiers == tier_idx]
        if not cols:
            continue
        valid = (seq_lens.unsqueeze(-1) - torch.tensor(cols) * block_size).clamp(0, block_size)
        sub = torch.where(valid > 0, table[..., cols], torch.full_like(table[..., cols], -1))
        lens = valid.sum(-1)
        if kind is None:
            sources.append(ref.PagedSource(k, v, sub, lens))
        else:
            n_out = 1 if kind in ("int8", "int2") else 0
            sources.append(ref.PagedSource(_quantized(k, kind, True, group, n_out), _quantized(v, kind, False, group, n_out), sub, lens))
    return sources


def _check_mixed(q, sources, summary=None, extra=(), softcap=None) -> None:
    exp, exp_mass = ref.mixed_sparse_attention(q, sources, summary=summary, softcap=softcap, extra=extra)
    got, mass = cd.mixed_sparse_attention(q, sources, summary=summary, softcap=softcap, extra=extra)
    torch.testing.assert_close(got.out, exp.out, **TOL)
    torch.testing.assert_close(got.lse, exp.lse, **TOL)
    assert len(mass) == len(exp_mass)
    for a, b in zip(mass, exp_mass):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, **TOL)


def _check_decode(q, k_src, v_src, table, seq_lens, softcap=None, summary=None, tol=TOL) -> None:
    exp_out, exp_lse = ref.sparse_decode_attention(q, k_src, v_src, table, seq_lens, summary=summary, softcap=softcap)
    out, lse = cd.sparse_decode_attention(q, k_src, v_src, table, seq_lens, summary=summary, softcap=softcap)
    assert out.shape == exp_out.shape and out.dtype == exp_out.dtype
    torch.testing.assert_close(out.float(), exp_out.float(), **tol)
    torch.testing.assert_close(lse, exp_lse, **TOL)


# ------------------------------------------------------------------------------------------------
# Fused vs reference
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tier", ["full", "int8", "int4", "fp8", "int2", "mixed"])
@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("groups", [1, 4, 8])
def test_decode_matrix(groups: int, dim: int, block_size: int, tier: str) -> None:
    # Ragged: partial last blocks, one empty (batch, head).
    lengths = [[5 * block_size - 7, block_size], [2 * block_size + 1, 0]]
    q, k, v, table, seq = _problem(groups * 1000 + dim + block_size, 2, 2, groups, dim, block_size, lengths)
    _check_mixed(q, _sources(tier, k, v, table, seq, block_size))


@pytest.mark.parametrize("k_kind,v_kind", [("int8", "int4"), ("int4", "fp8"), ("fp8", "int8"), ("int4", "int4")])
@pytest.mark.parametrize("n_out", [0, 3])
@pytest.mark.parametrize("k_group,v_group", [(8, 16), (2, 4), (16, 32)])
def test_formats_outliers_and_group_sizes(k_kind: str, v_kind: str, n_out: int, k_group: int, v_group: int) -> None:
    q, k, v, table, seq = _problem(11 + n_out + k_group, 1, 2, 4, 64, 16, [[50, 33]])
    kq = _quantized(k, k_kind, True, k_group, n_out)
    vq = _quantized(v, v_kind, False, v_group, n_out)
    _check_decode(q, kq, vq, table, seq)


@pytest.mark.parametrize("k_kind,v_kind", [("int2", "int2"), ("int2", "int4"), ("int8", "int2"), ("int2", "fp8"),
                                            ("fp8", "int2"), ("int4", "int2"), ("int2", "int8")])  # fmt: skip
@pytest.mark.parametrize("n_out", [0, 3])
@pytest.mark.parametrize("k_group,v_group", [(4, 4), (8, 16), (4, 8), (16, 32), (16, 64)])
def test_int2_formats_outliers_and_group_sizes(k_kind: str, v_kind: str, n_out: int, k_group: int, v_group: int) -> None:
    """INT2 (four codes per byte: keys along tokens, values along channels) in either or both operands,
    group sizes of one byte (4) up to whole blocks / 64 channels, with and without outlier channels."""
    q, k, v, table, seq = _problem(31 + n_out + k_group + v_group, 2, 2, 4, 64, 16, [[50, 33], [3, 16 * 4]])
    kq = _quantized(k, k_kind, True, k_group, n_out)
    vq = _quantized(v, v_kind, False, v_group, n_out)
    _check_decode(q, kq, vq, table, seq)


@pytest.mark.parametrize("groups", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("block_size", [16, 64])
def test_int2_mixed_with_every_format_in_one_call(groups: int, block_size: int) -> None:
    """Keys and values of each source in different formats, INT2 in every position, one kernel call."""
    lengths = [[6 * block_size - 5, 2 * block_size + 3], [block_size - 1, 0]]
    q, k, v, table, seq = _problem(300 + groups + block_size, 2, 2, groups, 128, block_size, lengths)
    pairs = [("int2", None), (None, "int2"), ("int2", "int8"), ("int4", "int2"), ("int2", "fp8"), ("int2", "int2")]
    sources = []
    for idx, (k_kind, v_kind) in enumerate(pairs):
        cols = [m for m in range(table.shape[2]) if m % len(pairs) == idx]
        valid = (seq.unsqueeze(-1) - torch.tensor(cols) * block_size).clamp(0, block_size)
        sub = torch.where(valid > 0, table[..., cols], torch.full_like(table[..., cols], -1))
        kq = k if k_kind is None else _quantized(k, k_kind, True, 16, idx % 2)
        vq = v if v_kind is None else _quantized(v, v_kind, False, 32, idx % 2)
        sources.append(ref.PagedSource(kq, vq, sub, valid.sum(-1)))
    _check_mixed(q, sources)
    _check_mixed(q, sources, softcap=3.0)


def test_int2_bf16_params_and_empty_selection() -> None:
    q, k, v, table, seq = _problem(33, 1, 2, 4, 64, 16, [[40, 21]], dtype=torch.bfloat16)
    idx = ref.outlier_index_for(ref.select_outlier_channels(k, 1, head_axis=2), 4, 2)
    kq = ref.quantize_keys(k, "int2", 8, token_axis=1, outlier_idx=idx, param_dtype=torch.bfloat16)
    vq = ref.quantize_values(v, "int2", 16, outlier_idx=idx, param_dtype=torch.float32)
    _check_decode(q, kq, vq, table, seq, tol=dict(atol=2e-2, rtol=2e-2))
    empty = torch.full_like(table, -1)
    zero = torch.zeros_like(seq)
    out, lse = cd.sparse_decode_attention(q.float(), kq, vq, empty, zero)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isinf(lse).all() and (lse < 0).all()


def test_int2_group_not_a_multiple_of_four_raises_not_implemented() -> None:
    q, k, v, table, seq = _problem(34, 1, 1, 2, 64, 16, [[20]])
    kq = ref.quantize_keys(k, "int2", 4, token_axis=1, param_dtype=torch.float16)
    kq.group_size = 2  # not a whole number of packed bytes: the kernel declines, dispatch falls back
    with pytest.raises(NotImplementedError):
        cd.sparse_decode_attention(q, kq, v, table, seq)


@pytest.mark.parametrize("groups", [2, 3, 6, 16])
def test_other_group_sizes_and_softcap(groups: int) -> None:
    q, k, v, table, seq = _problem(20 + groups, 2, 1, groups, 32, 16, [[40], [17]])
    for sources in (_sources("full", k, v, table, seq, 16), _sources("mixed", k, v, table, seq, 16, 8)):
        _check_mixed(q, sources, softcap=2.5)


def test_padding_inside_the_table_and_softcap() -> None:
    q, k, v, table, seq = _problem(14, 1, 1, 4, 64, 16, [[64]])
    table[0, 0, 1] = -1  # a hole: its positions count towards seq_lens but are masked
    _check_decode(q, k, v, table, seq, softcap=2.5)
    _check_decode(q, _quantized(k, "int4", True, 8, 2), _quantized(v, "int8", False, 16, 2), table, seq, softcap=30.0)


def test_block_mass_of_a_partial_matches_reference() -> None:
    q, k, v, table, seq = _problem(13, 1, 2, 2, 64, 16, [[40, 64]])
    q4 = q.unsqueeze(2)  # [B, Hq, 1, D]: the KV store's decode query
    kq = _quantized(k, "int8", True, 16)
    exp, exp_mass = ref.paged_attention_partial(q4, kq, v, table, seq, 0.1, None, True)
    got, mass = cd.paged_attention_partial(q4, kq, v, table, seq, 0.1, None, True)
    torch.testing.assert_close(got.out, exp.out, **TOL)
    torch.testing.assert_close(got.lse, exp.lse, **TOL)
    assert mass.shape == exp_mass.shape == (1, 2, 2, 1, table.shape[2])
    torch.testing.assert_close(mass, exp_mass, **TOL)


def test_mixed_tiers_with_summary_and_extra_partial() -> None:
    q, k, v, table, seq = _problem(12, 2, 2, 4, 64, 16, [[120, 97], [16, 128]])
    sources = _sources("mixed", k, v, table, seq, 16, 8)
    assert len(sources) == 5  # full, int8, int4, fp8, int2
    summary = ref.GlobalSummary.empty(2, 2, 64).absorb(torch.randn(2, 2, 5, 64), torch.randn(2, 2, 5, 64))
    chunk, _ = ref.dense_attention_partial(q.unsqueeze(2), torch.randn(2, 2, 1, 64), torch.randn(2, 2, 1, 64), 64**-0.5)
    _check_mixed(q.unsqueeze(2), sources, summary=summary, extra=[chunk])
    _check_decode(q, k, v, table, seq, summary=summary)


def test_bf16_queries_and_pages() -> None:
    q, k, v, table, seq = _problem(15, 1, 2, 4, 64, 16, [[40, 21]], dtype=torch.bfloat16)
    _check_decode(q, k, v, table, seq, tol=dict(atol=2e-2, rtol=2e-2))
    kq, vq = _quantized(k, "int4", True, 16, 1), _quantized(v, "int4", False, 16, 1)  # bf16 outlier values
    _check_decode(q, kq, vq, table, seq, tol=dict(atol=2e-2, rtol=2e-2))


def test_empty_selection() -> None:
    q = torch.randn(1, 4, 64)
    pages = torch.randn(3, 16, 1, 64)
    table = torch.full((1, 1, 2), -1, dtype=torch.long)
    zero = torch.zeros(1, 1, dtype=torch.long)
    out, lse = cd.sparse_decode_attention(q, pages, pages, table, zero)
    assert torch.equal(out, torch.zeros_like(q)) and torch.isinf(lse).all() and (lse < 0).all()
    empty = torch.zeros(1, 1, 0, dtype=torch.long)
    summary = ref.GlobalSummary.empty(1, 1, 64).absorb(torch.randn(1, 1, 5, 64), torch.ones(1, 1, 5, 64))
    out, lse = cd.sparse_decode_attention(q, pages, pages, empty, zero, summary=summary)
    torch.testing.assert_close(out, torch.ones_like(q))
    merged, masses = cd.mixed_sparse_attention(q, [ref.PagedSource(pages, pages, table, zero)])
    assert torch.equal(merged.out, torch.zeros(1, 4, 1, 64)) and torch.equal(masses[0], torch.zeros(1, 1, 2))


def test_split_blocks_across_threads_merge_exactly() -> None:
    """With more threads than (batch, head) pairs the listed blocks are split and merged by LSE."""
    q, k, v, table, seq = _problem(16, 1, 1, 4, 64, 16, [[16 * 9 - 5]])
    sources = _sources("mixed", k, v, table, seq, 16, 8)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _check_mixed(q, sources, softcap=5.0)
    finally:
        torch.set_num_threads(previous)


def test_prefill_and_uncovered_cases_raise_not_implemented() -> None:
    q, k, v, table, seq = _problem(17, 1, 1, 2, 64, 16, [[20]])
    with pytest.raises(NotImplementedError):
        cd.sparse_decode_attention(q.unsqueeze(2).expand(-1, -1, 3, -1), k, v, table, seq)  # Q = 3
    q24, k24, v24, t24, s24 = _problem(18, 1, 1, 2, 24, 16, [[20]])
    with pytest.raises(NotImplementedError):
        cd.sparse_decode_attention(q24, k24, v24, t24, s24)  # head dim not a multiple of 16


# ------------------------------------------------------------------------------------------------
# Dispatch
# ------------------------------------------------------------------------------------------------


def test_dispatch_routes_cpu_decode(monkeypatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("MINUTIA_KERNELS", raising=False)
    assert dispatch.backend_for("cpu", decode=True) == "cpu"
    assert dispatch.backend_for("cpu") == "reference"  # quantize, Quest, prefill
    monkeypatch.setenv("MINUTIA_KERNELS", "reference")
    assert dispatch.backend_for("cpu", decode=True) == "reference"
    monkeypatch.setenv("MINUTIA_KERNELS", "cpu")
    assert dispatch.backend_for("cpu", decode=True) == "cpu"
    assert dispatch.backend_for("cpu") == "reference"


def test_dispatch_results_and_fallbacks(monkeypatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    q, k, v, table, seq = _problem(41, 1, 2, 4, 64, 16, [[40, 20]])
    kq = _quantized(k, "int4", True, 16)
    exp_out, exp_lse = ref.sparse_decode_attention(q, kq, v, table, seq)
    calls = []
    real = cd.sparse_decode_attention
    monkeypatch.setattr(cd, "sparse_decode_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    for mode, fused in (("auto", True), ("cpu", True), ("reference", False)):
        monkeypatch.setenv("MINUTIA_KERNELS", mode)
        calls.clear()
        out, lse = dispatch.sparse_decode_attention(q, kq, v, table, seq)
        torch.testing.assert_close(out, exp_out, **TOL)
        torch.testing.assert_close(lse, exp_lse, **TOL)
        assert bool(calls) == fused, mode
    # Prefill (Q > 1) runs the reference in every mode.
    q3 = torch.randn(1, 8, 3, 64)
    exp3, _ = ref.sparse_decode_attention(q3, kq, v, table, seq)
    for mode in ("auto", "cpu"):
        monkeypatch.setenv("MINUTIA_KERNELS", mode)
        calls.clear()
        torch.testing.assert_close(dispatch.sparse_decode_attention(q3, kq, v, table, seq)[0], exp3, **TOL)
        assert not calls
    # A case the kernel does not cover falls back in auto mode only.
    q24, k24, v24, t24, s24 = _problem(42, 1, 1, 2, 24, 16, [[20]])
    monkeypatch.setenv("MINUTIA_KERNELS", "auto")
    torch.testing.assert_close(
        dispatch.sparse_decode_attention(q24, k24, v24, t24, s24)[0], ref.sparse_decode_attention(q24, k24, v24, t24, s24)[0]
    )
    monkeypatch.setenv("MINUTIA_KERNELS", "cpu")
    with pytest.raises(NotImplementedError):
        dispatch.sparse_decode_attention(q24, k24, v24, t24, s24)


def test_build_failure_falls_back_to_the_reference_with_one_warning(monkeypatch, caplog) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("MINUTIA_KERNELS", raising=False)

    def broken_build():
        raise RuntimeError("simulated compiler failure")

    monkeypatch.setattr(cd, "_state", {"module": None, "error": None})  # a fresh session
    monkeypatch.setattr(cd, "_build", broken_build)
    q, k, v, table, seq = _problem(43, 1, 1, 4, 64, 16, [[30]])
    sources = _sources("mixed", k, v, table, seq, 16, 8)
    exp, exp_mass = ref.mixed_sparse_attention(q, sources)
    with caplog.at_level(logging.WARNING, logger="kernels.cpu_decode"):
        for _ in range(3):
            assert dispatch.backend_for("cpu", decode=True) == "reference"
            got, mass = dispatch.mixed_sparse_attention(q, sources)
            torch.testing.assert_close(got.out, exp.out)
            torch.testing.assert_close(mass[0], exp_mass[0])
    warnings = [r for r in caplog.records if r.name == "kernels.cpu_decode" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "simulated compiler failure" in warnings[0].getMessage()
    assert not cd.available() and isinstance(cd.build_error(), RuntimeError)
    monkeypatch.setenv("MINUTIA_KERNELS", "cpu")
    with pytest.raises(RuntimeError):
        dispatch.mixed_sparse_attention(q, sources)


# ------------------------------------------------------------------------------------------------
# Fast mode
# ------------------------------------------------------------------------------------------------


def _key_logit_error(q: torch.Tensor, kq: ref.QuantizedTensor, scale: float) -> float:
    """The largest logit change the int8 query causes: per (head, page, token group) the kernel rounds
    qe = q * scale * s_k (outlier channels zeroed) to sq * round(qe / sq), sq = max|qe| / 127, so a
    token's logit moves by sum_d (qe_d - sq * qi_d) * (code_td - mid) (the kernel adds the mid-range
    part back exactly; mid = 1.5 for INT2, 7.5 for INT4, 127.5 for INT8). Computed here from the same
    rounding (over every page, listed or not)."""
    n_pages, bs, n_kv, dim = kq.shape
    bits = {"int8": 8, "int4": 4, "int2": 2}[kq.kind]
    codes = ref.unpack_codes(kq.data, bits, 1) if bits < 8 else kq.data
    mid = (2**bits - 1) / 2
    codes = (codes.float() - mid).view(n_pages, bs // kq.group_size, kq.group_size, n_kv, dim)
    qg = q.float().view(q.shape[0], n_kv, -1, 1, 1, dim) * scale  # [B, H, G, 1, 1, D]
    s_k = kq.scale.float().permute(2, 0, 1, 3)  # [H, P, n_groups, D]
    qe = qg * s_k.unsqueeze(0).unsqueeze(2)  # [B, H, G, P, n_groups, D]
    if kq.outlier_idx is not None:
        idx = kq.outlier_idx.reshape(-1, kq.outlier_idx.shape[-1]).expand(n_kv, -1)
        mask = torch.ones(n_kv, dim).scatter(1, idx, 0.0).view(1, n_kv, 1, 1, 1, dim)
        qe = qe * mask
    sq = qe.abs().amax(-1, keepdim=True) / 127
    residual = qe - sq * torch.round(qe / sq.clamp(min=1e-30)).clamp(-127, 127)
    err = torch.einsum("bhgpjd,pjthd->bhgpjt", residual, codes)
    return err.abs().max().item()


def _fast_bound(q, kq, vq, v_deq: torch.Tensor, scale: float) -> tuple[float, float]:
    """(output tolerance, lse tolerance) of the fast mode against the reference.

    Logits move by at most delta (:func:`_key_logit_error`), so every probability by a factor within
    exp(+-2 delta): the output moves by at most (exp(2 delta) - 1) max|v|, the lse by delta. INT4 and INT2
    values add the bf16 rounding of the weights p_t s_t (relative 2^-9): at most 2^-9 max|s_t code_td|."""
    quantized_key = isinstance(kq, ref.QuantizedTensor) and kq.kind in ("int8", "int4", "int2")
    delta = _key_logit_error(q, kq, scale) if quantized_key else 0.0
    out_tol = math.expm1(2 * delta) * v_deq.abs().max().item()
    if isinstance(vq, ref.QuantizedTensor) and vq.kind in ("int4", "int2"):  # max code 15 / 3
        out_tol += 2.0**-9 * (15 if vq.kind == "int4" else 3) * vq.scale.float().abs().max().item()
    return out_tol + 2e-5, delta + 2e-5


@pytest.mark.parametrize(
    "k_kind,v_kind",
    [("int4", "int4"), ("int8", "int8"), ("int8", "int4"), ("int4", "fp8"), ("int2", "int2"), ("int2", "int4"), ("int2", "fp8")],
)
@pytest.mark.parametrize("dim,groups", [(64, 4), (128, 8), (256, 1), (32, 2)])
def test_fast_mode_error_is_bounded_by_its_roundings(monkeypatch, k_kind, v_kind, dim, groups) -> None:
    q, k, v, table, seq = _problem(60 + dim + groups, 2, 2, groups, dim, 64, [[200, 64], [129, 31]])
    n_out = 2 if k_kind in ("int4", "int2") else 0
    kq, vq = _quantized(k, k_kind, True, 32, n_out), _quantized(v, v_kind, False, 32, n_out)
    exp_out, exp_lse = ref.sparse_decode_attention(q, kq, vq, table, seq)
    monkeypatch.setenv("MINUTIA_CPU_DECODE", "fast")
    out, lse = cd.sparse_decode_attention(q, kq, vq, table, seq)
    out_tol, lse_tol = _fast_bound(q, kq, vq, ref.dequantize(vq), dim**-0.5)
    err, lse_err = (out - exp_out).abs().max().item(), (lse - exp_lse).abs().max().item()
    assert err <= out_tol and lse_err <= lse_tol, (err, out_tol, lse_err, lse_tol)
    assert err > 0  # the fast path ran (the exact one agrees to ~1e-6)


@pytest.mark.parametrize("k_kind", ["int4", "int8", "int2"])
@pytest.mark.parametrize("k_group,v_group,groups", [(16, 16, 4), (8, 64, 2), (64, 32, 4), (16, 32, 8), (4, 32, 1), (32, 16, 8), (64, 64, 8)])
def test_fast_mode_other_group_sizes(monkeypatch, k_kind, k_group, v_group, groups) -> None:
    """Key groups too small for the 16-row transposed VNNI tiles use the per-tile kernel; value groups
    of one chunk (16 channels) or G = 8 use the 32-channel bf16 loop; the rest the 64-channel one."""
    dim = 128
    q, k, v, table, seq = _problem(90 + k_group + v_group, 1, 2, groups, dim, 64, [[150, 64]])
    kq, vq = _quantized(k, k_kind, True, k_group), _quantized(v, "int4", False, v_group)
    exp_out, exp_lse = ref.sparse_decode_attention(q, kq, vq, table, seq)
    monkeypatch.setenv("MINUTIA_CPU_DECODE", "fast")
    out, lse = cd.sparse_decode_attention(q, kq, vq, table, seq)
    out_tol, lse_tol = _fast_bound(q, kq, vq, ref.dequantize(vq), dim**-0.5)
    err, lse_err = (out - exp_out).abs().max().item(), (lse - exp_lse).abs().max().item()
    assert err <= out_tol and lse_err <= lse_tol, (err, out_tol, lse_err, lse_tol)
    assert err > 0


def test_fast_mode_keeps_full_precision_and_fp8_blocks_exact(monkeypatch) -> None:
    q, k, v, table, seq = _problem(70, 2, 2, 4, 128, 16, [[100, 40], [33, 16]])
    monkeypatch.setenv("MINUTIA_CPU_DECODE", "fast")
    for tier in ("full", "fp8"):
        _check_mixed(q, _sources(tier, k, v, table, seq, 16))
    _check_decode(q.bfloat16(), k.bfloat16(), v.bfloat16(), table, seq, tol=dict(atol=2e-2, rtol=2e-2))


def test_fast_mode_mixed_tiers_and_mode_switch(monkeypatch) -> None:
    q, k, v, table, seq = _problem(71, 1, 2, 4, 128, 64, [[64 * 7 - 3, 64 * 5]])
    sources = _sources("mixed", k, v, table, seq, 64)
    exp, exp_mass = ref.mixed_sparse_attention(q, sources)
    monkeypatch.setenv("MINUTIA_CPU_DECODE", "fast")
    got, mass = cd.mixed_sparse_attention(q, sources)
    torch.testing.assert_close(got.out, exp.out, atol=2e-2, rtol=0)  # INT8/INT4 columns approximate
    for a, b in zip(mass, exp_mass):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=0)
    monkeypatch.setenv("MINUTIA_CPU_DECODE", "exact")
    torch.testing.assert_close(cd.mixed_sparse_attention(q, sources)[0].out, exp.out, **TOL)
    monkeypatch.setenv("MINUTIA_CPU_DECODE", "bogus")
    with pytest.raises(ValueError):
        cd.mixed_sparse_attention(q, sources)


# ------------------------------------------------------------------------------------------------
# Quest scores and top-k selection
# ------------------------------------------------------------------------------------------------


def _quest_problem(seed: int, batch: int, n_kv: int, groups: int, dim: int, width: int, n_pages: int, queries: int = 0,
                   bound_dtype=torch.float32, q_dtype=torch.float32, pad: bool = True):  # fmt: skip
    """Random queries, per-page key bounds (kmin <= kmax) and a table listing distinct shuffled pages."""
    gen = torch.Generator().manual_seed(seed)
    pages = torch.randn(n_pages, 16, n_kv, dim, generator=gen)
    kmin, kmax = ref.block_key_bounds(pages)
    shape = (batch, n_kv * groups, queries, dim) if queries else (batch, n_kv * groups, dim)
    q = torch.randn(*shape, generator=gen).to(q_dtype)
    table = torch.stack([torch.randperm(n_pages, generator=gen)[:width] for _ in range(batch * n_kv)]).view(batch, n_kv, width)
    if pad:
        table[..., -1] = -1
        table[0, 0, width // 2] = -1
    return q, kmin.to(bound_dtype), kmax.to(bound_dtype), table


@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("queries", [0, 2])
@pytest.mark.parametrize("bound_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dim", [64, 40])
def test_quest_scores_match_reference(groups: int, queries: int, bound_dtype, dim: int) -> None:
    q, kmin, kmax, table = _quest_problem(60 + groups + queries, 2, 3, groups, dim, 9, 24, queries, bound_dtype)
    got = cd.quest_scores(q, kmin, kmax, table)
    exp = ref.quest_scores(q, kmin, kmax, table)
    assert got.dtype == exp.dtype == torch.float32 and got.shape == exp.shape
    torch.testing.assert_close(got, exp, atol=1e-4, rtol=1e-5)
    assert bool((got[table < 0] == -math.inf).all())


def test_quest_scores_bf16_queries_and_empty_blocks() -> None:
    q, _, _, table = _quest_problem(70, 1, 2, 2, 32, 6, 10, q_dtype=torch.bfloat16)
    pages = torch.randn(10, 16, 2, 32)
    fill = torch.tensor([16, 0, 5, 16, 0, 16, 3, 16, 16, 1])  # pages 1 and 4 empty: +-inf bounds
    kmin, kmax = ref.block_key_bounds(pages, fill)
    table = torch.tensor([[[1, 0, 4, 2, -1, 3], [5, 6, 7, 8, 9, 4]]])
    got = cd.quest_scores(q, kmin, kmax, table)
    exp = ref.quest_scores(q, kmin, kmax, table)
    torch.testing.assert_close(got, exp, atol=1e-4, rtol=1e-5)


def _assert_same_selection(got: torch.Tensor, exp: torch.Tensor) -> None:
    """Same kept blocks in the same (column) order and as many -1 picks per row. Where padding columns
    fill the last picks, torch.topk chooses among them unspecified, so the -1s may sit elsewhere."""
    assert got.shape == exp.shape and got.dtype == exp.dtype
    rows = math.prod(got.shape[:-1])
    for g_row, e_row in zip(got.reshape(rows, -1).tolist(), exp.reshape(rows, -1).tolist()):
        assert [x for x in g_row if x >= 0] == [x for x in e_row if x >= 0]
        assert g_row.count(-1) == e_row.count(-1)


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("k", [0, 1, 3, 6, 8, 9, 20])
def test_quest_top_k_matches_reference(groups: int, k: int) -> None:
    q, kmin, kmax, table = _quest_problem(80 + k, 2, 2, groups, 32, 9, 30)
    always = torch.zeros(table.shape, dtype=torch.bool)
    always[0, 1, 2] = always[1, 0, 0] = always[1, 0, 8] = True  # (1, 0, 8) is padding: never kept
    for mask in (None, always):
        exp = ref.select_top_k_blocks(ref.quest_scores(q, kmin, kmax, table), table, k, mask)
        got = cd.quest_top_k(q, kmin, kmax, table, k, mask)
        assert got.dtype == exp.dtype and got.shape == exp.shape == (2, 2, min(k, 9))
        _assert_same_selection(got, exp)
    assert cd.quest_top_k(q, kmin, kmax, table, 9) is table  # everything kept: the table itself


def test_quest_top_k_ties_padding_and_empty_selection() -> None:
    # Pages 0..3 have equal bounds: equal scores; the fused kernel keeps the lower columns.
    dim = 32
    kmin, kmax = torch.zeros(8, 1, dim), torch.zeros(8, 1, dim)  # pages 4..7: score 0
    kmin[:4], kmax[:4] = -1.0, 1.0  # pages 0..3: score sum |q_d| > 0 for each of them
    # quarter-integer queries: every partial sum is exact in fp32, so the ties are exact in any order
    q = torch.randint(-8, 9, (1, 2, dim), generator=torch.Generator().manual_seed(5)).float() / 4
    table = torch.tensor([[[5, 3, -1, 1, 0, 2, 4]]])
    scores = ref.quest_scores(q, kmin, kmax, table)
    tied = scores[0, 0, [1, 3, 4, 5]]
    assert torch.equal(tied, tied[:1].expand(4))
    got = cd.quest_top_k(q, kmin, kmax, table, 2)
    assert got.tolist() == [[[3, 1]]]  # columns 1 and 3 of the four tied ones, in column order
    exp = ref.select_top_k_blocks(scores, table, 2)
    assert sorted(scores[0, 0, [c for c in range(7) if int(table[0, 0, c]) in exp[0, 0].tolist()]].tolist()) == sorted(
        scores[0, 0, [1, 3]].tolist()
    )
    # More picks than listed blocks: padding picks come back as -1.
    few = torch.tensor([[[-1, 6, -1, -1, 7]]])
    got = cd.quest_top_k(q, kmin, kmax, few, 3)
    assert sorted(x for x in got[0, 0].tolist() if x >= 0) == [6, 7] and got[0, 0].tolist().count(-1) == 1
    _assert_same_selection(got, ref.select_top_k_blocks(ref.quest_scores(q, kmin, kmax, few), few, 3))
    # Nothing listed at all, and k = 0.
    empty = torch.full((1, 1, 4), -1, dtype=torch.long)
    assert cd.quest_top_k(q, kmin, kmax, empty, 2).tolist() == [[[-1, -1]]]
    assert cd.quest_top_k(q, kmin, kmax, table, 0).shape == (1, 1, 0)
    assert cd.quest_scores(q, kmin, kmax, empty).eq(-math.inf).all()
    # An int32 table keeps its dtype.
    assert cd.quest_top_k(q, kmin, kmax, table.int(), 2).dtype == torch.int32


def test_dispatch_routes_quest_selection(monkeypatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    q, kmin, kmax, table = _quest_problem(90, 1, 2, 4, 64, 12, 40)
    exp = ref.select_top_k_blocks(ref.quest_scores(q, kmin, kmax, table), table, 5)
    calls = []
    real = cd.quest_top_k
    monkeypatch.setattr(cd, "quest_top_k", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    for mode, fused in (("auto", True), ("cpu", True), ("reference", False)):
        monkeypatch.setenv("MINUTIA_KERNELS", mode)
        calls.clear()
        _assert_same_selection(dispatch.quest_top_k(q, kmin, kmax, table, 5), exp)
        torch.testing.assert_close(dispatch.quest_scores(q, kmin, kmax, table), ref.quest_scores(q, kmin, kmax, table))
        assert bool(calls) == fused, mode
    # A case the kernel does not cover (a 2-d table) falls back in auto mode, raises in cpu mode.
    flat = table[0]
    monkeypatch.setenv("MINUTIA_KERNELS", "cpu")
    with pytest.raises(NotImplementedError):
        dispatch.quest_top_k(q, kmin, kmax, flat, 2)
    monkeypatch.setenv("MINUTIA_KERNELS", "auto")
    calls.clear()
    try:
        exp_flat = ref.select_top_k_blocks(ref.quest_scores(q, kmin, kmax, flat), flat, 2)
    except Exception:  # the reference does not take it either: nothing to compare
        return
    torch.testing.assert_close(dispatch.quest_top_k(q, kmin, kmax, flat, 2), exp_flat)


def test_cached_pool_descriptions_follow_pool_changes() -> None:
    """The wrapper remembers validated pools; results must follow in-place writes, swapped tensors and
    in-place re-pointing (set_) of a pool, and non-contiguous pools are never remembered."""
    q, k, v, table, seq = _problem(95, 1, 2, 4, 64, 16, [[40, 33]])
    kq, vq = _quantized(k, "int4", True, 16), _quantized(v, "int8", False, 32)

    def check() -> None:
        exp_out, exp_lse = ref.sparse_decode_attention(q, kq, vq, table, seq)
        out, lse = cd.sparse_decode_attention(q, kq, vq, table, seq)
        torch.testing.assert_close(out, exp_out, **TOL)
        torch.testing.assert_close(lse, exp_lse, **TOL)

    check()
    check()  # from the remembered descriptions
    other = _quantized(torch.randn_like(k), "int4", True, 16)
    kq.data.copy_(other.data)  # written in place: same pointers
    check()
    kq.scale = other.scale.clone()  # a new tensor object
    check()
    vq.data.set_(vq.data.clone())  # same object, new storage
    check()
    vq.zero = vq.zero.transpose(0, 1).contiguous().transpose(0, 1)  # non-contiguous: copied each call
    check()
    assert not any(key[0] == id(vq.data) and key[2] == id(vq.zero) for key in cd._OPERANDS if len(key) > 4)


@pytest.mark.parametrize("groups", [1, 2, 4, 8])
@pytest.mark.parametrize("v_group", [16, 32, 64])
def test_fast_mode_int2_values(monkeypatch, groups: int, v_group: int) -> None:
    """INT2 values in the fast mode: bf16 weights x codes, 64 channels per pass, for G <= 4 and channel
    groups of 32 or more; the fp32 path otherwise. Within the bf16 rounding bound of the reference."""
    dim = 256
    q, k, v, table, seq = _problem(110 + groups + v_group, 1, 1, groups, dim, 64, [[64 * 5 - 9]])
    kq, vq = _quantized(k, "int2", True, 64, 1), _quantized(v, "int2", False, v_group, 1)
    exp_out, exp_lse = ref.sparse_decode_attention(q, kq, vq, table, seq)
    monkeypatch.setenv("MINUTIA_CPU_DECODE", "fast")
    out, lse = cd.sparse_decode_attention(q, kq, vq, table, seq)
    out_tol, lse_tol = _fast_bound(q, kq, vq, ref.dequantize(vq), dim**-0.5)
    err, lse_err = (out - exp_out).abs().max().item(), (lse - exp_lse).abs().max().item()
    assert err <= out_tol and lse_err <= lse_tol, (err, out_tol, lse_err, lse_tol)


def _head_major(qt: ref.QuantizedTensor) -> ref.QuantizedTensor:
    """``qt`` with scale/zero stored head-major (same logical shape), as kvstore's value pools hold them."""
    fields = dict(vars(qt))
    for name in ("scale", "zero"):
        if fields[name] is not None:
            fields[name] = with_layout(fields[name], HEAD_MAJOR)
    return ref.QuantizedTensor(**fields)


@pytest.mark.parametrize("mode", ["exact", "fast"])
@pytest.mark.parametrize("v_kind", ["int8", "int4", "int2", "fp8"])
@pytest.mark.parametrize(
    "dim,v_group,groups,block_size",  # params per token 4 (one load), 8 (gather), 2 (scalar), 8 narrow groups
    [(128, 32, 4, 64), (64, 16, 8, 16), (256, 32, 1, 64), (128, 64, 2, 16), (64, 8, 4, 64)],
)
def test_head_major_value_params_are_read_in_place(monkeypatch, mode, v_kind, dim, v_group, groups, block_size) -> None:
    """Head-major value scales/zeros give the same bits as token-major ones, read without a copy."""
    monkeypatch.setenv("MINUTIA_CPU_DECODE", mode)
    lengths = [[3 * block_size - 5, block_size + 3, 7]]  # partial blocks, one under 16 tokens
    q, k, v, table, seq = _problem(dim + v_group + groups, 1, 3, groups, dim, block_size, lengths)
    kq = _quantized(k, "int4", True, 16)
    for n_out in (0, 2):
        vq = _quantized(v, v_kind, False, v_group, n_out)
        hm = _head_major(vq)
        assert not hm.scale.is_contiguous() and torch.equal(hm.scale, vq.scale)
        cd._OPERANDS.clear()  # the cache clears itself when full: start empty so this call's entries stay
        out, lse = cd.sparse_decode_attention(q, kq, hm, table, seq)
        remembered = list(cd._OPERANDS)
        exp_out, exp_lse = cd.sparse_decode_attention(q, kq, vq, table, seq)
        assert torch.equal(out, exp_out) and torch.equal(lse, exp_lse)
        if mode == "exact":
            ref_out, ref_lse = ref.sparse_decode_attention(q, kq, hm, table, seq)
            torch.testing.assert_close(out, ref_out, **TOL)
            torch.testing.assert_close(lse, ref_lse, **TOL)
        if not n_out:  # remembered descriptions are the ones that needed no copy
            assert any(key[1] == id(hm.scale) and key[-1] is False for key in remembered if len(key) > 4)
