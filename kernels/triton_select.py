"""Triton kernel: Quest block bounds and top-k block selection in one launch.

:func:`quest_top_k` returns exactly ``reference.select_top_k_blocks(reference.quest_scores(q, kmin,
kmax, block_table), block_table, k, always)``. Per decode step the two-step path (Triton bounds, then
``torch.topk`` / sort / gather / masks) is several launches, and on a GPU the step is launch-bound;
here one program per (batch, KV head) scores every listed block and writes the kept table.

Selection, per program: each column gets a 32-bit key that orders like its rank (the Quest bound;
``+inf`` for ``always`` blocks, ``-inf`` for padding, NaN above everything, as ``torch.topk`` orders
it). A bisection over the key range finds the k-th largest key ``T``; the kept columns are those
above ``T`` plus, of those equal to ``T``, the lowest columns (the rule of the fused CPU kernel,
:func:`kernels.cpu_decode.quest_top_k`; ``torch.topk`` leaves ties unspecified). A prefix sum over
the kept mask gives each kept column its output slot, so the table comes out in column order, as
the reference returns it, with -1 for kept columns whose rank is ``-inf`` (padding picked when
``k`` exceeds the listed blocks). No sort, no scratch memory: the keys of all columns stay in
registers, which caps the columns at :data:`MAX_BLOCKS` (wider tables raise ``NotImplementedError``;
:mod:`kernels.dispatch` then runs the two-step path).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_BLOCKS = 4096  # columns held in registers per (batch, KV head): 256K tokens at 64-token blocks
MAX_ROWS = 64  # query rows (group heads x queries) per program; a prefill chunk's many rows go two-step


@triton.jit
def _select_kernel(
    q_ptr,  # [B, Hq, Q, D] (any strides), Hq = H * G
    kmin_ptr,  # [P, H, D]
    kmax_ptr,  # [P, H, D], kmin's strides
    table_ptr,  # [B, H, M]
    always_ptr,  # [B, H, M] uint8 (bool), or a dummy
    out_ptr,  # [B, H, K] contiguous, the table's dtype
    M,
    K,
    G,
    NQ,
    sq_b,
    sq_h,
    sq_q,
    sq_d,
    sk_p,
    sk_h,
    sk_d,
    st_b,
    st_h,
    st_m,
    sa_b,
    sa_h,
    sa_m,
    H,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    M_PAD: tl.constexpr,
    HAS_ALWAYS: tl.constexpr,
):
    """Keys of all columns (tile by tile), the k-th largest by bisection, then the kept columns in order."""
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    tile_ids = tl.arange(0, M_PAD // BLOCK_M)
    keys = tl.full([M_PAD // BLOCK_M, BLOCK_M], -2147483648, tl.int32)  # below every real key (that of -inf included)
    table_row = table_ptr + b * st_b + h * st_h
    q_head = q_ptr + b * sq_b + h * G * sq_h
    rows = G * NQ
    for t in range(0, tl.cdiv(M, BLOCK_M)):
        offs_m = t * BLOCK_M + tl.arange(0, BLOCK_M)
        m_mask = offs_m < M
        slot = tl.load(table_row + offs_m * st_m, mask=m_mask, other=-1)
        valid = slot >= 0
        off = tl.where(valid, slot, 0).to(tl.int64)[:, None] * sk_p + h * sk_h + offs_d[None, :] * sk_d
        mask = valid[:, None] & d_mask[None, :]
        lo = tl.load(kmin_ptr + off, mask=mask, other=0.0).to(tl.float32)
        hi = tl.load(kmax_ptr + off, mask=mask, other=0.0).to(tl.float32)
        best = tl.full([BLOCK_M], float("-inf"), tl.float32)
        for r in range(0, rows):
            qr = tl.load(q_head + (r // NQ) * sq_h + (r % NQ) * sq_q + offs_d * sq_d, mask=d_mask, other=0.0)
            qr = qr.to(tl.float32)[None, :]
            # NaN-propagating like torch.maximum / amax (0 * inf on an empty block's infinite bounds).
            bound = tl.sum(tl.maximum(qr * lo, qr * hi, propagate_nan=tl.PropagateNan.ALL), 1)
            best = tl.maximum(best, bound, propagate_nan=tl.PropagateNan.ALL)
        rank = tl.where(valid, best, float("-inf"))
        if HAS_ALWAYS:
            forced = tl.load(always_ptr + b * sa_b + h * sa_h + offs_m * sa_m, mask=m_mask, other=0) != 0
            rank = tl.where(forced & valid, float("inf"), rank)
        # Monotone float -> int32: negative floats flip their magnitude bits; -0.0 joins +0.0 (they
        # tie); any NaN becomes the largest key.
        bits = rank.to(tl.int32, bitcast=True)
        bits = tl.where(bits == -2147483648, 0, bits)
        key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
        key = tl.where((bits & 0x7FFFFFFF) > 0x7F800000, 0x7FFFFFFF, key)
        key = tl.where(m_mask, key, -2147483648)
        keys = tl.where(tile_ids[:, None] == t, key[None, :], keys)

    keys = tl.reshape(keys, [M_PAD])
    cols = tl.arange(0, M_PAD)
    # Largest T with at least K keys >= T: the K-th largest key (32 halvings of the int32 range).
    lo_t = tl.min(keys, 0).to(tl.int64)
    hi_t = tl.max(keys, 0).to(tl.int64)
    for _ in range(0, 32):
        mid = lo_t + ((hi_t - lo_t + 1) >> 1)
        enough = tl.sum((keys >= mid.to(tl.int32)).to(tl.int32), 0) >= K
        lo_t = tl.where(enough, mid, lo_t)
        hi_t = tl.where(enough, hi_t, mid - 1)
    kth = lo_t.to(tl.int32)
    above = keys > kth
    tied = keys == kth
    need = K - tl.sum(above.to(tl.int32), 0)
    keep = above | (tied & (tl.cumsum(tied.to(tl.int32), 0) <= need))
    pos = tl.cumsum(keep.to(tl.int32), 0) - 1
    slot = tl.load(table_row + cols * st_m, mask=keep, other=-1)
    neg_inf_key = -2139095041  # key of -inf: 0xFF800000 ^ 0x7FFFFFFF as int32
    slot = tl.where(keys == neg_inf_key, -1, slot)
    tl.store(out_ptr + bh.to(tl.int64) * K + pos, slot, mask=keep)


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def quest_top_k(
    q: torch.Tensor,
    kmin: torch.Tensor,
    kmax: torch.Tensor,
    block_table: torch.Tensor,
    k: int,
    always: torch.Tensor | None = None,
) -> torch.Tensor:
    """Fused :func:`kernels.reference.quest_scores` + :func:`kernels.reference.select_top_k_blocks`:
    the ``[B, Hkv, min(k, M)]`` kept blocks in column order, -1 for picks ranked ``-inf`` (padding);
    ties go to the lower column. ``k >= M`` returns ``block_table`` itself, as the reference does.

    Raises ``NotImplementedError`` for shapes the kernel does not take (more than :data:`MAX_BLOCKS`
    columns or :data:`MAX_ROWS` query rows per KV head, mismatched shapes or devices)."""
    if block_table.ndim != 3:
        raise NotImplementedError("expected a [B, Hkv, M] block table")
    batch, n_kv, width = block_table.shape
    k = min(int(k), width)
    if k == width:
        return block_table
    if k < 0:
        raise ValueError("k must be >= 0")
    if q.ndim not in (3, 4) or kmin.ndim != 3 or kmin.shape != kmax.shape or kmin.stride() != kmax.stride():
        raise NotImplementedError("expected q [B, Hq, (Q,) D] and kmin/kmax [P, Hkv, D] with equal strides")
    dim = q.shape[-1]
    if q.shape[0] != batch or n_kv == 0 or q.shape[1] % n_kv or tuple(kmin.shape[1:]) != (n_kv, dim):
        raise NotImplementedError("q, bounds and block table disagree on batch, heads or head dim")
    device = q.device
    if any(t is not None and t.device != device for t in (kmin, kmax, block_table, always)):
        raise NotImplementedError("q, bounds, block table and always must share a device")
    groups = q.shape[1] // n_kv
    n_queries = q.shape[2] if q.ndim == 4 else 1
    if width > MAX_BLOCKS or groups * n_queries > MAX_ROWS:
        raise NotImplementedError(f"more than {MAX_BLOCKS} blocks or {MAX_ROWS} query rows per KV head")
    out = torch.empty((batch, n_kv, k), dtype=block_table.dtype, device=device)
    if k == 0 or batch * n_kv == 0:
        return out
    sq = q.stride()
    sq_q = sq[2] if q.ndim == 4 else 0
    if always is None:
        flags, sa = block_table, (0, 0, 0)
    else:
        if tuple(always.shape) != (batch, n_kv, width):
            raise NotImplementedError("always must be a [B, Hkv, M] mask")
        flags = (always if always.dtype == torch.bool else always != 0).view(torch.uint8)
        sa = flags.stride()
    m_pad = _pow2(width)
    block_d = max(16, _pow2(dim))
    # One program walks all of its columns: wide tiles keep more bound loads in flight per step.
    block_m = min(m_pad, 8192 // block_d)
    _select_kernel[(batch * n_kv,)](
        q, kmin, kmax, block_table, flags, out,
        width, k, groups, n_queries,
        sq[0], sq[1], sq_q, sq[-1],
        *kmin.stride(),
        *block_table.stride(),
        *sa,
        n_kv,
        D=dim, BLOCK_D=block_d, BLOCK_M=block_m, M_PAD=m_pad, HAS_ALWAYS=always is not None,
        num_warps=8,
    )  # fmt: skip
    return out


__all__ = ["MAX_BLOCKS", "MAX_ROWS", "quest_top_k"]
