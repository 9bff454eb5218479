"""The fused Triton Quest selection (kernels.triton_select) against the torch reference.

The oracle is ``reference.select_top_k_blocks(reference.quest_scores(...))`` with its one unspecified
choice pinned down: ``torch.topk`` breaks ties arbitrarily, the kernel (like the fused CPU kernel)
keeps the lower column. :func:`_oracle` is the reference with a stable sort in place of ``topk``;
each test also checks the reference itself agrees up to tie choice (same kept ranks, same number of
-1s). Queries and key bounds are multiples of 1/32, so every Quest bound is exact in fp32 in any
summation order: kernel and reference scores are equal and ties are real.

Without a GPU the kernel runs on the Triton interpreter (set up as in tests/test_kernels_triton.py);
shapes are small, the wider matrix is marked ``slow``.
"""

from __future__ import annotations

import importlib
import math
import os
import sys

import pytest
import torch

from kernels import reference as ref

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
DEVICE = torch.device("cuda" if ON_GPU else "cpu")


def _load_kernel():
    """Import kernels.triton_select (and kernels.triton_decode, the dispatch fallback's bounds) with
    their kernels defined for the interpreter when there is no GPU."""
    if ON_GPU:
        from kernels import triton_select

        return triton_select
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        from triton.runtime.interpreter import InterpretedFunction

        from kernels import triton_decode, triton_select

        if not isinstance(triton_select._select_kernel, InterpretedFunction):
            triton_select = importlib.reload(triton_select)
        if not isinstance(triton_decode._quest_kernel, InterpretedFunction):
            importlib.reload(triton_decode)
    finally:
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous
    return triton_select


def _library_twins() -> list[tuple[object, str, object]]:
    """Interpreted twins of Triton library functions defined without the interpreter (see
    tests/test_kernels_triton.py)."""
    if ON_GPU:
        return []
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    found = []
    for name, module in list(sys.modules.items()):
        if name.startswith("triton.language") and module is not None:
            for attr, value in list(vars(module).items()):
                if isinstance(value, JITFunction):
                    found.append((module, attr, InterpretedFunction(value.fn)))
    return found


ts = _load_kernel()
_TWINS = _library_twins()


@pytest.fixture(autouse=True)
def _triton_interpreter(monkeypatch):
    if not ON_GPU:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    for module, attr, twin in _TWINS:
        monkeypatch.setattr(module, attr, twin)
    yield


# ------------------------------------------------------------------------------------------------
# Problems and the oracle
# ------------------------------------------------------------------------------------------------


def _dyadic(shape, gen: torch.Generator, span: int = 64) -> torch.Tensor:
    """Multiples of 1/32 in [-span/32, span/32]: products and their sums stay exact in fp32."""
    return torch.randint(-span, span + 1, shape, generator=gen).float() / 32


def _problem(seed: int, batch: int, n_kv: int, groups: int, dim: int, listed: list[list[int]], width: int,
             n_queries: int | None = None, n_pages: int = 40):  # fmt: skip
    """q, kmin, kmax [P, Hkv, D] and a table whose row (b, h) lists ``listed[b][h]`` distinct pages
    then -1 padding."""
    gen = torch.Generator().manual_seed(seed)
    a, b = _dyadic((n_pages, n_kv, dim), gen), _dyadic((n_pages, n_kv, dim), gen)
    kmin, kmax = torch.minimum(a, b), torch.maximum(a, b)
    table = torch.full((batch, n_kv, width), -1, dtype=torch.long)
    for i in range(batch):
        for h in range(n_kv):
            count = listed[i][h]
            table[i, h, :count] = torch.randperm(n_pages, generator=gen)[:count]
    shape = (batch, n_kv * groups, dim) if n_queries is None else (batch, n_kv * groups, n_queries, dim)
    return _dyadic(shape, gen), kmin, kmax, table


def _ranked(q, kmin, kmax, table, always):
    ranked = ref.quest_scores(q, kmin, kmax, table).masked_fill(table < 0, -math.inf)
    if always is not None:
        ranked = torch.where(always & (table >= 0), torch.full_like(ranked, math.inf), ranked)
    return ranked


def _oracle(q, kmin, kmax, table, k, always=None) -> torch.Tensor:
    """The reference selection with ties to the lower column (a stable descending sort; NaN first)."""
    k = min(k, table.shape[-1])
    if k == table.shape[-1]:
        return table
    ranked = _ranked(q, kmin, kmax, table, always)
    chosen = torch.sort(ranked, dim=-1, descending=True, stable=True).indices[..., :k].sort(-1).values
    picked = torch.gather(table, -1, chosen)
    return picked.masked_fill(torch.gather(ranked, -1, chosen) == -math.inf, -1)


def _check(q, kmin, kmax, table, k, always=None) -> torch.Tensor:
    """The kernel equals the oracle exactly, and the reference composition up to tie choice."""
    dev = lambda x: None if x is None else x.to(DEVICE)  # noqa: E731
    got = ts.quest_top_k(dev(q), dev(kmin), dev(kmax), dev(table), k, dev(always)).cpu()
    exp = _oracle(q, kmin, kmax, table, k, always)
    assert got.shape == exp.shape and got.dtype == exp.dtype
    assert torch.equal(got, exp), (got, exp)
    # The reference itself: same kept ranks (as multisets) and the same number of -1 picks.
    composed = ref.select_top_k_blocks(ref.quest_scores(q, kmin, kmax, table), table, k, always)
    assert composed.shape == got.shape and composed.dtype == got.dtype
    ranked = _ranked(q, kmin, kmax, table, always)
    for row in range(math.prod(table.shape[:-1])):
        b, h = divmod(row, table.shape[1])
        col_of = {int(s): c for c, s in enumerate(table[b, h].tolist()) if s >= 0}

        def kept_ranks(sel):
            values = (float(ranked[b, h, col_of[int(s)]]) for s in sel.tolist() if s >= 0)
            return sorted((math.isnan(v), 0.0 if math.isnan(v) else v) for v in values)

        assert kept_ranks(got[b, h]) == kept_ranks(composed[b, h])
        assert got[b, h].tolist().count(-1) == composed[b, h].tolist().count(-1)
    return got


# ------------------------------------------------------------------------------------------------
# Against the reference
# ------------------------------------------------------------------------------------------------

_LISTED = [[13, 9], [5, 13]]  # ragged: -1 padding after the listed pages, one row full


def _always_mask(table: torch.Tensor) -> torch.Tensor:
    always = torch.zeros(table.shape, dtype=torch.bool)
    always[..., 0] = True  # a sink
    always[0, 1, 2] = always[1, 0, 4] = True
    always[1, 0, 10] = True  # padding (row (1, 0) lists 5 pages): never kept
    return always


@pytest.mark.parametrize("groups,dim,n_queries", [(1, 64, None), (4, 128, None), (8, 64, None), (4, 64, 3), (2, 48, 2)])
def test_matches_reference(groups: int, dim: int, n_queries: int | None) -> None:
    q, kmin, kmax, table = _problem(groups * 10 + dim, 2, 2, groups, dim, _LISTED, 13, n_queries)
    always = _always_mask(table)
    for k in (1, 4, 7):
        _check(q, kmin, kmax, table, k)
        _check(q, kmin, kmax, table, k, always)


@pytest.mark.slow
@pytest.mark.parametrize("groups", [1, 4, 8])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("n_queries", [None, 1, 2])
def test_matches_reference_matrix(groups: int, dim: int, n_queries: int | None) -> None:
    listed = [[40, 3], [0, 25]]
    q, kmin, kmax, table = _problem(groups + dim + (n_queries or 0), 2, 2, groups, dim, listed, 40, n_queries, 64)
    always = _always_mask(table)
    for k in (1, 5, 20, 30, 39):
        _check(q, kmin, kmax, table, k)
        _check(q, kmin, kmax, table, k, always)


def test_wide_table_spans_several_column_tiles() -> None:
    # 300 columns at head dim 64: tiles of 128 columns, the last one partial; keys padded to 512.
    q, kmin, kmax, table = _problem(9, 1, 2, 2, 64, [[300, 170]], 300, n_pages=320)
    always = torch.zeros(table.shape, dtype=torch.bool)
    always[..., 0] = always[..., 299] = always[0, 1, 150] = True
    for k in (1, 37, 200):
        _check(q, kmin, kmax, table, k, always)
    _check(q, kmin, kmax, table, 250)


def test_k_beyond_the_listed_blocks_and_edge_sizes() -> None:
    q, kmin, kmax, table = _problem(3, 2, 2, 4, 64, _LISTED, 13)
    got = _check(q, kmin, kmax, table, 11)  # more picks than rows (1, 0) and (0, 1) list: -1 at the end
    assert got[1, 0].tolist()[5:] == [-1] * 6 and got[0, 1].tolist()[9:] == [-1, -1]
    assert ts.quest_top_k(q, kmin, kmax, table, 13) is table  # k = M: the table itself
    assert ts.quest_top_k(q, kmin, kmax, table, 50) is table  # k > M too
    assert _check(q, kmin, kmax, table, 0).shape == (2, 2, 0)
    with pytest.raises(ValueError):
        ts.quest_top_k(q, kmin, kmax, table, -1)
    empty = torch.full((2, 2, 6), -1, dtype=torch.long)
    assert _check(q, kmin, kmax, empty, 3).eq(-1).all()
    assert ts.quest_top_k(q, kmin, kmax, table[..., :0], 2).shape == (2, 2, 0)
    got32 = _check(q, kmin, kmax, table.int(), 5)  # an int32 table keeps its dtype
    assert got32.dtype == torch.int32
    one = _problem(4, 1, 1, 1, 64, [[1]], 1)
    assert _check(*one, 1) is not None  # a single column: k = M


def test_ties_go_to_the_lower_column_and_padding_picks_are_in_place() -> None:
    # Pages 0..3 have equal bounds, so equal scores; pages 4..7 score 0.
    dim = 32
    kmin, kmax = torch.zeros(8, 1, dim), torch.zeros(8, 1, dim)
    kmin[:4], kmax[:4] = -1.0, 1.0  # score sum |q_d| > 0
    q = torch.randint(-8, 9, (1, 2, dim), generator=torch.Generator().manual_seed(5)).float() / 4
    table = torch.tensor([[[5, 3, -1, 1, 0, 2, 4]]])
    assert _check(q, kmin, kmax, table, 2).tolist() == [[[3, 1]]]  # columns 1 and 3 of the tied 1, 3, 4, 5
    assert _check(q, kmin, kmax, table, 5).tolist() == [[[5, 3, 1, 0, 2]]]  # then the lowest of the 0 scores
    # Padding in the middle of a row: the picked padding is the lowest padding column, in place.
    few = torch.tensor([[[-1, 6, -1, -1, 7]]])
    assert _check(q, kmin, kmax, few, 3).tolist() == [[[-1, 6, 7]]]
    # A forced block beats every score; ties among forced blocks do not matter (all kept or k too small).
    always = torch.zeros(table.shape, dtype=torch.bool)
    always[0, 0, 6] = always[0, 0, 2] = True  # column 2 is padding: ignored
    assert _check(q, kmin, kmax, table, 2, always).tolist() == [[[3, 4]]]
    # -0.0 and +0.0 are the same score: the lower column wins whatever the sign. With q_d = -1, page
    # 0's bound sums -0.0 terms (-0.0); page 1's holds -1 and +1 (+0.0).
    neg_q = -torch.ones(1, 1, dim)
    bounds = torch.zeros(2, 1, dim)
    bounds[1, 0, 0], bounds[1, 0, 1] = 1.0, -1.0
    assert _check(neg_q, bounds, bounds, torch.tensor([[[0, 1]]]), 1).tolist() == [[[0]]]
    assert _check(neg_q, bounds, bounds, torch.tensor([[[1, 0]]]), 1).tolist() == [[[1]]]


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # 0 * inf, on the interpreter
def test_empty_blocks_infinite_and_nan_bounds() -> None:
    # An empty block's bounds are (+inf, -inf): its bound is +inf, or NaN where a q_d is 0 (0 * inf),
    # and NaN ranks above everything (as torch.topk orders it), forced blocks included.
    dim = 16
    k_pages = _dyadic((6, 4, 1, dim), torch.Generator().manual_seed(7))
    kmin, kmax = ref.block_key_bounds(k_pages, torch.tensor([4, 0, 4, 4, 0, 4]))
    q = _dyadic((1, 2, dim), torch.Generator().manual_seed(8))
    q[q == 0] = 0.25  # no zeros: pages 1 and 4 score +inf
    table = torch.tensor([[[0, 1, 2, 3, 4, 5]]])
    assert ref.quest_scores(q, kmin, kmax, table).isinf().sum() == 2
    assert _check(q, kmin, kmax, table, 2).tolist() == [[[1, 4]]]
    q_zero = q.clone()
    q_zero[0, 1, 3] = 0.0
    assert ref.quest_scores(q_zero, kmin, kmax, table).isnan().sum() == 2
    always = torch.zeros(table.shape, dtype=torch.bool)
    always[0, 0, 5] = True
    assert _check(q_zero, kmin, kmax, table, 2, always).tolist() == [[[1, 4]]]
    assert _check(q_zero, kmin, kmax, table, 3, always).tolist() == [[[1, 4, 5]]]
    # A listed block whose bound is -inf ranks with the padding: picked, it comes back as -1.
    low = torch.full((2, 1, dim), -math.inf)
    low[1] = 0.0
    positive = torch.ones(1, 1, dim)
    assert _check(positive, low, low, torch.tensor([[[0, -1, 1]]]), 2).tolist() == [[[-1, 1]]]


def test_strided_and_low_precision_inputs() -> None:
    q, kmin, kmax, table = _problem(11, 2, 2, 4, 64, _LISTED, 13, n_queries=2)
    always = _always_mask(table)
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)  # [B, Hq, Q, D] view over [B, Q, Hq, D] storage
    assert not q_t.is_contiguous()
    _check(q_t, kmin, kmax, table, 6, always)
    table_t = table.transpose(0, 1).contiguous().transpose(0, 1)
    sink = torch.zeros(1, 1, 13, dtype=torch.bool)
    sink[..., 0] = True
    _check(q, kmin, kmax, table_t, 6, sink.expand(2, 2, 13))  # a broadcast mask
    # bf16 queries and fp16 bounds: multiples of 1/32 in [-2, 2] are exact in both.
    _check(q.bfloat16(), kmin.half(), kmax.half(), table, 5)


def test_unsupported_shapes_raise_not_implemented(monkeypatch) -> None:
    q, kmin, kmax, table = _problem(12, 1, 2, 4, 64, [[9, 9]], 9)
    monkeypatch.setattr(ts, "MAX_BLOCKS", 8)
    with pytest.raises(NotImplementedError):
        ts.quest_top_k(q, kmin, kmax, table, 3)
    monkeypatch.setattr(ts, "MAX_BLOCKS", 4096)
    monkeypatch.setattr(ts, "MAX_ROWS", 2)
    with pytest.raises(NotImplementedError):
        ts.quest_top_k(q, kmin, kmax, table, 3)


# ------------------------------------------------------------------------------------------------
# The dispatch point
# ------------------------------------------------------------------------------------------------


def test_dispatch_routes_selection_through_the_fused_kernel(monkeypatch) -> None:
    from kernels import dispatch

    q, kmin, kmax, table = _problem(13, 1, 2, 4, 64, [[9, 6]], 9)
    exp = _oracle(q, kmin, kmax, table, 4)
    calls = []
    real = ts.quest_top_k
    monkeypatch.setattr(ts, "quest_top_k", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    dev = lambda x: x.to(DEVICE)  # noqa: E731
    for mode in ("triton", "auto"):
        monkeypatch.setenv("MINUTIA_KERNELS", mode)
        calls.clear()
        assert torch.equal(dispatch.quest_top_k(dev(q), dev(kmin), dev(kmax), dev(table), 4).cpu(), exp)
        assert calls == [1], mode
    # Wider than the kernel takes: the two-step path (Triton bounds, torch top-k), same selection.
    monkeypatch.setattr(ts, "MAX_BLOCKS", 8)
    calls.clear()
    got = dispatch.quest_top_k(dev(q), dev(kmin), dev(kmax), dev(table), 4).cpu()
    assert calls == [1]  # tried, raised NotImplementedError, fell back
    composed = ref.select_top_k_blocks(ref.quest_scores(q, kmin, kmax, table), table, 4)
    assert sorted(got.flatten().tolist()) == sorted(composed.flatten().tolist())
    monkeypatch.setenv("MINUTIA_KERNELS", "reference")
    calls.clear()
    dispatch.quest_top_k(q, kmin, kmax, table, 4)
    assert calls == []
