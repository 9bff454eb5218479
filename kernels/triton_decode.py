"""Triton kernels: block-sparse split-KV decode attention over the paged, mixed-tier KV cache.

Same semantics and data layouts as :mod:`kernels.reference` (read its module docstring): paged K/V
``[P, block_size, H_kv, D]``, block table ``[B, H_kv, M]`` (-1 = padding), ``seq_lens [B, H_kv]``
valid tokens over the listed blocks, queries ``[B, H_q, (Q,) D]`` with GQA, output + log-sum-exp.

One launch reads blocks of every tier. The block tables of the tiers (sources) are concatenated
column-wise into one table; a per-column source id tells the kernel which storage pool (full
precision, INT8, INT4, INT2 or FP8, each with its own group scales, zero points and outlier channels) the
block lives in. Per listed block the kernel branches (uniformly over the program) on that id, loads
and dequantizes the block tile in registers (INT4 nibbles, INT2 crumbs, FP8 e4m3 bits decoded arithmetically,
group scale/zero gathered per element, full-precision outlier channels patched in), and feeds it to
an online softmax. Keys and values may use different formats (e.g. INT8 keys, INT4 values).

Split-KV (flash-decoding): stage 1 gives each (batch, KV head, split, row tile) program a range of
the listed blocks and writes a normalised partial output and its LSE; stage 2 merges the splits by
log-sum-exp. All query heads of a KV head's group (and all queries of a chunk) are processed by the
same program as the rows of one tile, so each KV byte is read once per row tile (GQA packing).

Dequantized values are used in fp32 (the reference's attention path does the same).
"""

from __future__ import annotations

import functools
import math
import os
from typing import Sequence

import torch
import triton
import triton.language as tl

from kernels import reference as ref
from kernels.reference import AttentionPartial, GlobalSummary, PagedSource, QuantizedTensor
from kernels.formats import CODECS, FORMATS, BlockFormat

# KIND: the format's code (kernels.formats); the literals the device code branches on are checked against it.
KIND_FULL = int(BlockFormat.FULL)
KIND_INT8 = int(BlockFormat.INT8)
KIND_INT4 = int(BlockFormat.INT4)
KIND_FP8 = int(BlockFormat.FP8)
KIND_INT2 = int(BlockFormat.INT2)
_KIND_CODES = {f.name: f.code for f in CODECS}
MAX_SOURCES = len(FORMATS)  # one pool per format of the table, all read in one launch
_LOG2E = 1.4426950408889634


def interpreting() -> bool:
    """Whether Triton kernels run on the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# --------------------------------------------------------------------------------------------------
# Device code
# --------------------------------------------------------------------------------------------------


@triton.jit
def _fp8e4m3_to_f32(byte):
    """Decode float8 e4m3fn bytes (uint8) to fp32 arithmetically (exact; no FP8 hardware needed)."""
    b = byte.to(tl.int32)
    sign = (b >> 7) & 1
    exp = (b >> 3) & 15
    man = b & 7
    normal = ((sign << 31) | ((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
    sub = man.to(tl.float32) * 0.001953125  # m * 2^-9
    sub = tl.where(sign == 1, -sub, sub)
    val = tl.where(exp == 0, sub, normal)
    return tl.where((exp == 15) & (man == 7), float("nan"), val)


@triton.jit
def _load_tile(op, slot, h, offs_t, offs_d, t_mask, d_mask, H: tl.constexpr, BS: tl.constexpr, D: tl.constexpr):
    """One block's ``[BLOCK_T, BLOCK_D]`` tile of K or V for KV head ``h``, dequantized to fp32.

    ``op`` = (data, scale, zero, outlier_idx, outlier_values, KIND, ALONG_T, GROUP, N_OUT, and the
    scale/zero strides of their first three dims). Layouts (contiguous): full ``[P, BS, H, D]``; codes
    ``[P, BS, H, D]`` (INT4 packed along the group axis: ``[P, BS/2, H, D]`` or ``[P, BS, H, D/2]``);
    outlier values ``[P, BS, H, N_OUT]``, outlier indices ``[H, N_OUT]``. Scale/zero (read through the
    strides, last dim contiguous: head-major value pools are read in place) ``[P, BS/GROUP, H, D]``
    when groups run along tokens (keys), ``[P, BS, H, D/GROUP]`` along channels (values).
    """
    data = op[0]
    scale = op[1]
    zero = op[2]
    oidx = op[3]
    oval = op[4]
    KIND: tl.constexpr = op[5]
    ALONG_T: tl.constexpr = op[6]
    GROUP: tl.constexpr = op[7]
    N_OUT: tl.constexpr = op[8]
    sp = op[9]
    st = op[10]
    sh = op[11]
    row = slot.to(tl.int64) * BS + offs_t  # token row in [P * BS]
    mask = t_mask[:, None] & d_mask[None, :]
    if KIND == 0:  # full
        x = tl.load(data + (row[:, None] * H + h) * D + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
    else:
        if KIND == 2:  # int4
            if ALONG_T:
                prow = slot.to(tl.int64) * (BS // 2) + offs_t // 2
                byte = tl.load(data + (prow[:, None] * H + h) * D + offs_d[None, :], mask=mask, other=0)
                shift = ((offs_t % 2) * 4)[:, None]
            else:
                byte = tl.load(data + (row[:, None] * H + h) * (D // 2) + offs_d[None, :] // 2, mask=mask, other=0)
                shift = ((offs_d % 2) * 4)[None, :]
            code = ((byte.to(tl.int32) >> shift) & 15).to(tl.float32)
        elif KIND == 4:  # int2: four codes per byte, the first in the low bits
            if ALONG_T:
                prow = slot.to(tl.int64) * (BS // 4) + offs_t // 4
                byte = tl.load(data + (prow[:, None] * H + h) * D + offs_d[None, :], mask=mask, other=0)
                shift = ((offs_t % 4) * 2)[:, None]
            else:
                byte = tl.load(data + (row[:, None] * H + h) * (D // 4) + offs_d[None, :] // 4, mask=mask, other=0)
                shift = ((offs_d % 4) * 2)[None, :]
            code = ((byte.to(tl.int32) >> shift) & 3).to(tl.float32)
        elif KIND == 1:  # int8
            code = tl.load(data + (row[:, None] * H + h) * D + offs_d[None, :], mask=mask, other=0).to(tl.float32)
        else:
            byte = tl.load(data + (row[:, None] * H + h) * D + offs_d[None, :], mask=mask, other=0)
            code = _fp8e4m3_to_f32(byte)
        if ALONG_T:
            poff = slot.to(tl.int64) * sp + (offs_t // GROUP)[:, None] * st + h * sh + offs_d[None, :]
        else:
            poff = slot.to(tl.int64) * sp + offs_t[:, None] * st + h * sh + (offs_d // GROUP)[None, :]
        s = tl.load(scale + poff, mask=mask, other=0.0).to(tl.float32)
        if KIND == 3:  # fp8
            x = code * s
        else:
            z = tl.load(zero + poff, mask=mask, other=0.0).to(tl.float32)
            x = code * s + z
        for j in tl.static_range(N_OUT):
            channel = tl.load(oidx + h * N_OUT + j)
            ov = tl.load(oval + (row * H + h) * N_OUT + j, mask=t_mask, other=0.0).to(tl.float32)
            x = tl.where(offs_d[None, :] == channel, ov[:, None], x)
    return x


@triton.jit
def _decode_stage1(
    q_ptr,  # [B*H, R, DK] fp32 (the group's query heads x queries as rows)
    srcs,  # tuple of (k_op, v_op, table [B*H, W] (-1 = padding), seq_lens [B*H], W, first column) per source
    o_part_ptr,  # [B*H, S, R, DV] fp32
    lse_part_ptr,  # [B*H, S, R] fp32
    blk_lse_ptr,  # [B*H, R, M] fp32 (only with WRITE_BLK)
    M,
    R,
    per_split,
    n_splits,
    sm_scale,
    softcap,
    H: tl.constexpr,
    BS: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_DK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    NS: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    WRITE_BLK: tl.constexpr,
    PRECISION: tl.constexpr,
):
    bh = tl.program_id(0)
    split = tl.program_id(1)
    rt = tl.program_id(2)
    h = bh % H
    offs_r = rt * BLOCK_R + tl.arange(0, BLOCK_R)
    r_mask = offs_r < R
    offs_dk = tl.arange(0, BLOCK_DK)
    offs_dv = tl.arange(0, BLOCK_DV)
    dk_mask = offs_dk < DK
    dv_mask = offs_dv < DV
    q = tl.load(
        q_ptr + (bh.to(tl.int64) * R + offs_r[:, None]) * DK + offs_dk[None, :],
        mask=r_mask[:, None] & dk_mask[None, :],
        other=0.0,
    )
    m_i = tl.full([BLOCK_R], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_DV], tl.float32)
    start = split * per_split
    end = tl.minimum(start + per_split, M)
    for e in range(start, end):
        # Column e of the concatenated tables: its source, physical block and valid tokens, read from the
        # sources' own tables and lengths (no per-call concatenation on the host).
        slot = e * 0 - 1
        nv = e * 0
        src = e * 0 - 1
        for i in tl.static_range(NS):
            width = srcs[i][4]
            col = e - srcs[i][5]
            inside = (col >= 0) & (col < width)
            s_i = tl.load(srcs[i][2] + bh.to(tl.int64) * width + col, mask=inside, other=-1).to(tl.int32)
            seq = tl.load(srcs[i][3] + bh, mask=inside, other=0).to(tl.int32)
            nv_i = tl.minimum(tl.maximum(seq - col * BS, 0), BS)
            slot = tl.where(inside, s_i, slot)
            nv = tl.where(inside & (s_i >= 0), nv_i, nv)
            src = tl.where(inside, i, src)
        blk_m = tl.full([BLOCK_R], float("-inf"), tl.float32)
        blk_l = tl.zeros([BLOCK_R], tl.float32)
        if nv > 0:
            for t0 in tl.static_range(0, BS, BLOCK_T):
                if t0 < nv:
                    offs_t = t0 + tl.arange(0, BLOCK_T)
                    t_mask = offs_t < nv
                    k = tl.zeros([BLOCK_T, BLOCK_DK], tl.float32)
                    v = tl.zeros([BLOCK_T, BLOCK_DV], tl.float32)
                    for i in tl.static_range(NS):
                        if src == i:
                            k = _load_tile(srcs[i][0], slot, h, offs_t, offs_dk, t_mask, dk_mask, H, BS, DK)
                            v = _load_tile(srcs[i][1], slot, h, offs_t, offs_dv, t_mask, dv_mask, H, BS, DV)
                    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale
                    if HAS_SOFTCAP:
                        # tanh(x) = 1 - 2 / (exp(2x) + 1), saturating correctly at +-inf.
                        s = softcap * (1.0 - 2.0 / (tl.exp(2.0 * (s / softcap)) + 1.0))
                    s = tl.where(t_mask[None, :], s, float("-inf"))
                    tile_max = tl.max(s, 1)
                    m_new = tl.maximum(m_i, tile_max)
                    alpha = tl.exp2((m_i - m_new) * 1.4426950408889634)
                    p = tl.exp2((s - m_new[:, None]) * 1.4426950408889634)
                    l_i = l_i * alpha + tl.sum(p, 1)
                    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
                    m_i = m_new
                    if WRITE_BLK:
                        bm_new = tl.maximum(blk_m, tile_max)
                        blk_l = blk_l * tl.exp2((blk_m - bm_new) * 1.4426950408889634) + tl.sum(
                            tl.exp2((s - bm_new[:, None]) * 1.4426950408889634), 1
                        )
                        blk_m = bm_new
        if WRITE_BLK:
            blk_lse = tl.where(blk_l > 0, blk_m + tl.log(tl.where(blk_l > 0, blk_l, 1.0)), float("-inf"))
            tl.store(blk_lse_ptr + (bh.to(tl.int64) * R + offs_r) * M + e, blk_lse, mask=r_mask)
    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
    base = bh.to(tl.int64) * n_splits + split
    tl.store(
        o_part_ptr + (base * R + offs_r[:, None]) * DV + offs_dv[None, :],
        out,
        mask=r_mask[:, None] & dv_mask[None, :],
    )
    tl.store(lse_part_ptr + base * R + offs_r, lse, mask=r_mask)


@triton.jit
def _merge_in(m, total, acc, lse_i, out_i):
    """Fold one normalised partial ``(lse_i, out_i)`` into a running log-sum-exp merge ``(m, total, acc)``
    (``acc / total`` is the merged output, ``m + log(total)`` its lse); empty partials have lse -inf."""
    m_new = tl.maximum(m, lse_i)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m - m_safe)
    w = tl.exp(lse_i - m_safe)
    return m_new, total * alpha + w, acc * alpha[:, None] + w[:, None] * out_i


@triton.jit
def _decode_stage2(
    o_part_ptr,  # [B*H, S, R, DV] fp32
    lse_part_ptr,  # [B*H, S, R] fp32
    out_ptr,  # [B*H, R, DV] fp32
    lse_ptr,  # [B*H, R] fp32
    q_ptr,  # [B*H, R, DK] fp32 (HAS_SUMMARY)
    key_sum_ptr,  # [B*H, DK] fp32 (HAS_SUMMARY)
    value_sum_ptr,  # [B*H, DV] fp32 (HAS_SUMMARY)
    count_ptr,  # [B*H] fp32 (HAS_SUMMARY)
    extras,  # tuple of (out [B*H, R, DV] fp32, lse [B*H, R] fp32), NE of them
    blk_lse_ptr,  # [B*H, R, M] fp32 (WRITE_MASS)
    mass_ptr,  # [B*H, M] fp32 (WRITE_MASS)
    R,
    n_splits,
    M,
    sm_scale,
    softcap,
    DK: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_DK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    NE: tl.constexpr,
    HAS_SUMMARY: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    WRITE_MASS: tl.constexpr,
):
    """Merge the splits of one (batch, KV head, row tile) by log-sum-exp, then the Global Summary
    Vector's virtual token and the ``extras`` (e.g. the current chunk's own attention), and with
    ``WRITE_MASS`` (one row tile holds every row) each listed block's share of the merged softmax summed
    over the rows. Why here: as torch ops on the host these were ~30 small launches per decode step, more
    than both kernels' GPU time (docs/benchmarks.md, GPU)."""
    bh = tl.program_id(0)
    rt = tl.program_id(1)
    offs_r = rt * BLOCK_R + tl.arange(0, BLOCK_R)
    r_mask = offs_r < R
    offs_dv = tl.arange(0, BLOCK_DV)
    dv_mask = offs_dv < DV
    rd_mask = r_mask[:, None] & dv_mask[None, :]
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_DV], tl.float32)
    for s in range(n_splits):
        base = bh.to(tl.int64) * n_splits + s
        lse_s = tl.load(lse_part_ptr + base * R + offs_r, mask=r_mask, other=float("-inf"))
        o = tl.load(o_part_ptr + (base * R + offs_r[:, None]) * DV + offs_dv[None, :], mask=rd_mask, other=0.0)
        m, total, acc = _merge_in(m, total, acc, lse_s, o)
    if HAS_SUMMARY:
        # The dropped tokens as one virtual token: mean key and value, logit + log(count) (reference.summary_partial).
        offs_dk = tl.arange(0, BLOCK_DK)
        dk_mask = offs_dk < DK
        count = tl.load(count_ptr + bh)
        safe = tl.maximum(count, 1.0)
        mean_k = tl.load(key_sum_ptr + bh.to(tl.int64) * DK + offs_dk, mask=dk_mask, other=0.0) / safe
        mean_v = tl.load(value_sum_ptr + bh.to(tl.int64) * DV + offs_dv, mask=dv_mask, other=0.0) / safe
        q = tl.load(q_ptr + (bh.to(tl.int64) * R + offs_r[:, None]) * DK + offs_dk[None, :],
                    mask=r_mask[:, None] & dk_mask[None, :], other=0.0)
        logit = tl.sum(q * mean_k[None, :], 1) * sm_scale
        if HAS_SOFTCAP:
            logit = softcap * (1.0 - 2.0 / (tl.exp(2.0 * (logit / softcap)) + 1.0))
        lse_g = tl.where(count > 0, logit + tl.log(safe), float("-inf"))
        m, total, acc = _merge_in(m, total, acc, lse_g, tl.zeros([BLOCK_R, BLOCK_DV], tl.float32) + mean_v[None, :])
    for i in tl.static_range(NE):
        lse_e = tl.load(extras[i][1] + bh.to(tl.int64) * R + offs_r, mask=r_mask, other=float("-inf"))
        o_e = tl.load(extras[i][0] + (bh.to(tl.int64) * R + offs_r[:, None]) * DV + offs_dv[None, :],
                      mask=rd_mask, other=0.0)
        m, total, acc = _merge_in(m, total, acc, lse_e, o_e)
    has = total > 0
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    out = acc / tl.where(has, total, 1.0)[:, None]
    lse = tl.where(has, m_safe + tl.log(tl.where(has, total, 1.0)), float("-inf"))
    tl.store(out_ptr + (bh.to(tl.int64) * R + offs_r[:, None]) * DV + offs_dv[None, :], out, mask=rd_mask)
    tl.store(lse_ptr + bh.to(tl.int64) * R + offs_r, lse, mask=r_mask)
    if WRITE_MASS:
        finite = has & r_mask
        lse_safe = tl.where(finite, lse, 0.0)
        for m0 in range(0, M, BLOCK_M):
            offs_m = m0 + tl.arange(0, BLOCK_M)
            m_mask = offs_m < M
            blk = tl.load(blk_lse_ptr + (bh.to(tl.int64) * R + offs_r[:, None]) * M + offs_m[None, :],
                          mask=finite[:, None] & m_mask[None, :], other=float("-inf"))
            share = tl.where(finite[:, None], tl.exp(blk - lse_safe[:, None]), 0.0)
            tl.store(mass_ptr + bh.to(tl.int64) * M + offs_m, tl.sum(share, 0), mask=m_mask)


@triton.jit
def _quest_kernel(
    q_ptr,  # [B*H, R, D] fp32
    kmin_ptr,  # [P, H, D]
    kmax_ptr,  # [P, H, D]
    table_ptr,  # [B*H, M] int32
    out_ptr,  # [B*H, M] fp32
    M,
    R,
    H: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Quest bound ``sum_d max(q_d kmin_d, q_d kmax_d)``, max over the group's rows; -inf on padding."""
    bh = tl.program_id(0)
    mt = tl.program_id(1)
    h = bh % H
    offs_m = mt * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    slot = tl.load(table_ptr + bh.to(tl.int64) * M + offs_m, mask=m_mask, other=-1)
    valid = slot >= 0
    safe = tl.where(valid, slot, 0).to(tl.int64)
    off = (safe[:, None] * H + h) * D + offs_d[None, :]
    mask = (m_mask & valid)[:, None] & d_mask[None, :]
    lo = tl.load(kmin_ptr + off, mask=mask, other=0.0).to(tl.float32)
    hi = tl.load(kmax_ptr + off, mask=mask, other=0.0).to(tl.float32)
    best = tl.full([BLOCK_M], float("-inf"), tl.float32)
    for r in range(R):
        qr = tl.load(q_ptr + (bh.to(tl.int64) * R + r) * D + offs_d, mask=d_mask, other=0.0)
        bound = tl.sum(tl.maximum(qr[None, :] * lo, qr[None, :] * hi), 1)
        best = tl.maximum(best, bound)
    best = tl.where(valid, best, float("-inf"))
    tl.store(out_ptr + bh.to(tl.int64) * M + offs_m, best, mask=m_mask)


# --------------------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------------------


def _dummy(device: torch.device) -> torch.Tensor:
    return torch.zeros(1, dtype=torch.float32, device=device)


def _operand(source: torch.Tensor | QuantizedTensor, device: torch.device) -> tuple[tuple, tuple[int, int, int, int]]:
    """Kernel operand tuple for one paged K or V storage, and its ``(P, block_size, H, D)``."""
    cx = tl.constexpr
    if not isinstance(source, QuantizedTensor):
        if source.ndim != 4:
            raise NotImplementedError("paged storage must be [P, block_size, H, D]")
        pages = source.contiguous()
        dummy = _dummy(device)
        return (pages, dummy, dummy, dummy, dummy, cx(KIND_FULL), cx(True), cx(1), cx(0), 0, 0, 0), tuple(pages.shape)
    if len(source.shape) != 4 or source.axis not in (1, 3) or source.kind not in _KIND_CODES:
        raise NotImplementedError("quantized storage must be paged [P, block_size, H, D], quantized along axis 1 or 3")
    n_pages, block_size, n_heads, dim = source.shape
    along_tokens = source.axis == 1
    group = source.group_size
    length = block_size if along_tokens else dim
    if group <= 0 or length % group:
        raise NotImplementedError("group size must divide the quantized axis")
    kind = _KIND_CODES[source.kind]
    data = source.data
    if kind == KIND_FP8:
        data = data.view(torch.uint8)
    expected = [n_pages, block_size, n_heads, dim]
    per_byte = ref.codes_per_byte(source.kind)
    if per_byte > 1:
        if length % per_byte:
            raise NotImplementedError(f"{source.kind} needs a length divisible by {per_byte} along the packed axis")
        expected[source.axis] //= per_byte
    if list(data.shape) != expected:
        raise NotImplementedError(f"unexpected code shape {tuple(data.shape)}, wanted {tuple(expected)}")
    dummy = _dummy(device)
    # Params are read through their strides (no copy of head-major value pools) when the last dim is
    # contiguous and zero's strides match scale's.
    scale, zero = source.scale, source.zero
    if scale.stride(3) != 1 or (zero is not None and zero.stride() != scale.stride()):
        scale = scale.contiguous()
        zero = None if zero is None else zero.contiguous()
    zero = dummy if zero is None else zero
    n_out, oidx, oval = 0, dummy, dummy
    if source.outlier_idx is not None and source.outlier_values is not None:
        idx = source.outlier_idx
        n_out = idx.shape[-1]
        rows = idx.reshape(-1, n_out)
        if rows.shape[0] not in (1, n_heads):
            raise NotImplementedError("outlier indices must be per KV head")
        oidx = rows.expand(n_heads, n_out).to(device=device, dtype=torch.int32).contiguous()
        oval = source.outlier_values.contiguous()
    strides = scale.stride()[:3]
    op = (data.contiguous(), scale, zero, oidx, oval, cx(kind), cx(along_tokens), cx(group), cx(n_out), *strides)
    return op, (n_pages, block_size, n_heads, dim)


def _compiled_for(device: torch.device) -> bool:
    """Whether kernels for ``device`` are compiled (CUDA) rather than interpreted (CPU): picks tile
    sizes and the dot precision (TF32 tensor cores on the GPU)."""
    return device.type == "cuda"


def _pow2(n: int, least: int = 1) -> int:
    return max(least, 1 << max(0, (int(n) - 1).bit_length()))


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _default_splits(n_entries: int, programs: int, device: torch.device) -> int:
    """Splits per (batch, KV head, row tile): about four programs per SM on a GPU, a few on the interpreter."""
    if n_entries <= 0:
        return 1
    if device.type == "cuda":
        sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
        want = max(1, (4 * sms) // max(1, programs))
        return max(1, min(n_entries, want, 256))
    return max(1, min(n_entries, 3))


MAX_EXTRAS = 2  # extra partials merged inside stage 2; more are merged on the host


def _launch(
    q: torch.Tensor,
    sources: Sequence[PagedSource],
    scale: float,
    softcap: float | None,
    want_block_lse: bool,
    num_splits: int | None = None,
    summary: GlobalSummary | None = None,
    extras: Sequence[AttentionPartial] = (),
    want_mass: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, list[int], torch.Tensor | None]:
    """Run both stages over all sources in one launch each; stage 2 also merges ``summary`` and
    ``extras`` (at most :data:`MAX_EXTRAS`) and, with ``want_mass``, sums each block's share of the
    merged softmax over the rows when one row tile holds them all.

    Returns out ``[B, Hq, Q, DV]`` fp32, lse ``[B, Hq, Q]``, per-block LSE ``[B, Hkv, R, M]`` (or
    None), the column offsets of the sources in the concatenated table, and the block masses
    ``[B, Hkv, M]`` (None when not asked for or not computed in the kernel).
    """
    if not sources:
        raise ValueError("no sources")
    if len(sources) > MAX_SOURCES:
        raise NotImplementedError(f"at most {MAX_SOURCES} sources per launch")
    device = q.device
    single = q.ndim == 3
    q4 = q.unsqueeze(2) if single else q
    batch, n_q, n_queries, dk = q4.shape
    n_kv = sources[0].block_table.shape[1]
    if n_q % n_kv:
        raise ValueError(f"{n_q} query heads are not a multiple of {n_kv} KV heads")
    groups = n_q // n_kv
    rows = groups * n_queries
    ops = []
    offsets = [0]
    block_size = dv = None
    for source in sources:
        k_op, k_shape = _operand(source.k_pages, device)
        v_op, v_shape = _operand(source.v_pages, device)
        if k_shape[1] != v_shape[1] or k_shape[2] != n_kv or v_shape[2] != n_kv or k_shape[3] != dk:
            raise ValueError("K/V pages, block table and queries disagree on block size, heads or head dim")
        if block_size is None:
            block_size, dv = k_shape[1], v_shape[3]
        elif (block_size, dv) != (k_shape[1], v_shape[3]):
            raise NotImplementedError("all sources of one launch need the same block size and value dim")
        table = source.block_table.to(device)
        if table.shape[:2] != (batch, n_kv):
            raise ValueError("block table must be [B, H_kv, M]")
        if table.dtype not in (torch.int32, torch.int64):
            table = table.long()
        width = table.shape[2]
        seq_lens = source.seq_lens.to(device).reshape(batch * n_kv).contiguous()
        # The kernel reads each source's table and lengths itself: a host-side concatenation cost ~10 tiny
        # launches per source, more than the kernel's own time on a GPU (docs/benchmarks.md, GPU).
        ops.append((k_op, v_op, table.contiguous(), seq_lens, width, offsets[-1]))
        offsets.append(offsets[-1] + width)
    total = offsets[-1]
    if len(extras) > MAX_EXTRAS:
        raise NotImplementedError(f"at most {MAX_EXTRAS} extra partials per launch")
    if total == 0:
        if summary is not None or extras:
            raise NotImplementedError("nothing listed: the caller merges the summary and extras")
        out = torch.zeros(batch, n_q, n_queries, dv, dtype=torch.float32, device=device)
        blk_lse = torch.zeros(batch, n_kv, rows, 0, device=device) if want_block_lse else None
        return out, torch.full((batch, n_q, n_queries), -math.inf, device=device), blk_lse, offsets, None
    # stage 1 writes every (row, column) of the block LSEs: no pre-fill
    blk_lse = torch.empty(batch, n_kv, rows, total, dtype=torch.float32, device=device) if want_block_lse else None
    out = torch.empty(batch, n_kv, rows, dv, dtype=torch.float32, device=device)  # stage 2 writes every row
    lse = torch.empty(batch, n_kv, rows, dtype=torch.float32, device=device)
    qf = q4.float().reshape(batch, n_kv, rows, dk).contiguous()
    block_r = min(64, _pow2(rows, 16))
    row_tiles = triton.cdiv(rows, block_r)
    n_splits = num_splits or _default_splits(total, batch * n_kv * row_tiles, device)
    n_splits = max(1, min(int(n_splits), total))
    per_split = triton.cdiv(total, n_splits)
    n_splits = triton.cdiv(total, per_split)
    block_dk, block_dv = _pow2(dk, 16), _pow2(dv, 16)
    on_gpu = _compiled_for(device)
    if block_size & (block_size - 1) or (on_gpu and block_size < 16):
        raise NotImplementedError("the kernel needs a power-of-two block size (at least 16 on the GPU: tl.dot tiles)")
    if on_gpu:
        block_t = min(block_size, 64 if max(block_dk, block_dv) <= 128 else 32)
    else:  # the interpreter: whole blocks per step (fewer, larger numpy ops)
        block_t = block_size
    block_t = max(16, block_t) if block_size >= 16 else block_size
    o_part = torch.empty(batch * n_kv, n_splits, rows, dv, dtype=torch.float32, device=device)
    lse_part = torch.empty(batch * n_kv, n_splits, rows, dtype=torch.float32, device=device)
    num_warps = 8 if max(block_dk, block_dv) >= 256 else 4
    _decode_stage1[(batch * n_kv, n_splits, row_tiles)](
        qf,
        tuple(ops),
        o_part,
        lse_part,
        blk_lse if blk_lse is not None else o_part,
        total,
        rows,
        per_split,
        n_splits,
        float(scale),
        float(softcap) if softcap is not None else 1.0,
        H=n_kv,
        BS=block_size,
        DK=dk,
        DV=dv,
        BLOCK_T=block_t,
        BLOCK_R=block_r,
        BLOCK_DK=block_dk,
        BLOCK_DV=block_dv,
        NS=len(ops),
        HAS_SOFTCAP=softcap is not None,
        WRITE_BLK=want_block_lse,
        PRECISION="tf32" if on_gpu else "ieee",
        num_warps=num_warps,
    )
    fused_mass = want_mass and blk_lse is not None and row_tiles == 1
    mass = torch.empty(batch, n_kv, total, dtype=torch.float32, device=device) if fused_mass else None
    extra_ops = tuple(
        (e.out.reshape(batch * n_kv, rows, dv).float().contiguous(), e.lse.reshape(batch * n_kv, rows).float().contiguous())
        for e in extras
    )
    if summary is not None:
        key_sum = summary.key_sum.reshape(batch * n_kv, dk).float().contiguous()
        value_sum = summary.value_sum.reshape(batch * n_kv, dv).float().contiguous()
        count = summary.count.reshape(batch * n_kv).float().contiguous()
    else:
        key_sum = value_sum = count = lse_part
    _decode_stage2[(batch * n_kv, row_tiles)](
        o_part,
        lse_part,
        out,
        lse,
        qf,
        key_sum,
        value_sum,
        count,
        extra_ops,
        blk_lse if fused_mass else lse_part,
        mass if fused_mass else lse_part,
        rows,
        n_splits,
        total,
        float(scale),
        float(softcap) if softcap is not None else 1.0,
        DK=dk,
        DV=dv,
        BLOCK_R=block_r,
        BLOCK_DK=block_dk,
        BLOCK_DV=block_dv,
        BLOCK_M=64,
        NE=len(extra_ops),
        HAS_SUMMARY=summary is not None,
        HAS_SOFTCAP=softcap is not None,
        WRITE_MASS=fused_mass,
        num_warps=4,
    )
    return out.view(batch, n_q, n_queries, dv), lse.view(batch, n_q, n_queries), blk_lse, offsets, mass


def paged_attention_partial(
    q: torch.Tensor,
    k_source: torch.Tensor | QuantizedTensor,
    v_source: torch.Tensor | QuantizedTensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    softcap: float | None = None,
    return_block_mass: bool = False,
    num_splits: int | None = None,
) -> tuple[AttentionPartial, torch.Tensor | None]:
    """Triton version of :func:`kernels.reference.paged_attention_partial` (same outputs)."""
    source = PagedSource(k_source, v_source, block_table, seq_lens)
    out, lse, blk_lse, _, _ = _launch(q, [source], scale, softcap, return_block_mass, num_splits)
    mass = None
    if return_block_mass:
        batch, n_kv, rows, width = blk_lse.shape
        n_queries = 1 if q.ndim == 3 else q.shape[2]
        part_lse = lse.reshape(batch, n_kv, rows, 1)
        finite = torch.isfinite(part_lse)
        ratio = torch.exp(blk_lse - torch.where(finite, part_lse, torch.zeros_like(part_lse)))
        ratio = torch.where(finite, ratio, torch.zeros_like(ratio))
        mass = ratio.view(batch, n_kv, rows // n_queries, n_queries, width)
    return AttentionPartial(out=out, lse=lse), mass


def sparse_decode_attention(
    q: torch.Tensor,
    k_pages: torch.Tensor | QuantizedTensor,
    v_pages: torch.Tensor | QuantizedTensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    summary: GlobalSummary | None = None,
    softcap: float | None = None,
    num_splits: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`kernels.reference.sparse_decode_attention`: ``(output, lse)``."""
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    fused = summary if block_table.shape[2] else None  # stage 2 merges the summary when there is a launch
    out, lse, _, _, _ = _launch(q, [PagedSource(k_pages, v_pages, block_table, seq_lens)], scale, softcap, False,
                                num_splits, fused)
    return ref.finish_decode(q, AttentionPartial(out=out, lse=lse), scale, None if fused else summary, softcap)


def mixed_sparse_attention(
    q: torch.Tensor,
    sources: Sequence[PagedSource],
    scale: float | None = None,
    summary: GlobalSummary | None = None,
    softcap: float | None = None,
    extra: Sequence[AttentionPartial] = (),
    num_splits: int | None = None,
) -> tuple[AttentionPartial, list[torch.Tensor]]:
    """Triton version of :func:`kernels.reference.mixed_sparse_attention`: all tiers in one launch.

    Returns the merged fp32 partial ``[B, Hq, Q, D]`` and per source the attention mass of each
    listed block under the merged softmax, summed over the group's query heads and queries.
    """
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    sources = list(sources)
    extra = list(extra)
    if sources and sum(s.block_table.shape[2] for s in sources) and len(extra) <= MAX_EXTRAS:
        # the common decode step: everything, summary, extras and block masses included, in two launches
        out, lse, blk_lse, offsets, mass = _launch(q, sources, scale, softcap, True, num_splits, summary, extra, True)
        merged = AttentionPartial(out=out, lse=lse)
        if mass is not None:
            return merged, [mass[..., offsets[i] : offsets[i + 1]] for i in range(len(sources))]
    else:
        partials: list[AttentionPartial] = []
        blk_lse = None
        offsets = [0]
        if sources:
            out, lse, blk_lse, offsets, _ = _launch(q, sources, scale, softcap, True, num_splits)
            partials.append(AttentionPartial(out=out, lse=lse))
        _, merged = ref.merge_with_extras(q, partials, scale, summary, softcap, extra)
    masses: list[torch.Tensor] = []
    if sources:
        batch, n_kv, rows, _ = blk_lse.shape
        merged_lse = merged.lse.reshape(batch, n_kv, rows, 1)
        finite = torch.isfinite(merged_lse)
        ratio = torch.exp(blk_lse - torch.where(finite, merged_lse, torch.zeros_like(merged_lse)))
        ratio = torch.where(finite, ratio, torch.zeros_like(ratio)).sum(2)  # [B, Hkv, M]
        masses = [ratio[..., offsets[i] : offsets[i + 1]] for i in range(len(sources))]
    return merged, masses


def quest_scores(q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """Triton version of :func:`kernels.reference.quest_scores`: ``[B, Hkv, M]``, -inf on padding."""
    device = q.device
    single = q.ndim == 3
    q4 = q.unsqueeze(2) if single else q
    batch, n_q, n_queries, dim = q4.shape
    n_kv, width = block_table.shape[1], block_table.shape[2]
    if n_q % n_kv:
        raise ValueError(f"{n_q} query heads are not a multiple of {n_kv} KV heads")
    if kmin.shape[1:] != (n_kv, dim) or kmax.shape != kmin.shape:
        raise ValueError("kmin/kmax must be [P, H_kv, D]")
    rows = (n_q // n_kv) * n_queries
    out = torch.full((batch, n_kv, width), -math.inf, dtype=torch.float32, device=device)
    if width == 0:
        return out
    qf = q4.float().reshape(batch, n_kv, rows, dim).contiguous()
    table = block_table.to(device=device, dtype=torch.int32).contiguous()
    block_d = _pow2(dim, 16)
    block_m = 16 if block_d >= 256 else 32
    _quest_kernel[(batch * n_kv, triton.cdiv(width, block_m))](
        qf, kmin.contiguous(), kmax.contiguous(), table, out, width, rows, H=n_kv, D=dim, BLOCK_M=block_m, BLOCK_D=block_d
    )
    return out


def quest_top_k(
    q: torch.Tensor,
    kmin: torch.Tensor,
    kmax: torch.Tensor,
    block_table: torch.Tensor,
    k: int,
    always: torch.Tensor | None = None,
) -> torch.Tensor:
    """Quest scores (Triton) followed by top-k selection (``torch.topk``): the selected block table."""
    return ref.select_top_k_blocks(quest_scores(q, kmin, kmax, block_table), block_table, k, always)


__all__ = [
    "KIND_FP8",
    "KIND_FULL",
    "KIND_INT2",
    "KIND_INT4",
    "KIND_INT8",
    "MAX_SOURCES",
    "interpreting",
    "mixed_sparse_attention",
    "paged_attention_partial",
    "quest_scores",
    "quest_top_k",
    "sparse_decode_attention",
]
