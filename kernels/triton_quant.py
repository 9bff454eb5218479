"""Triton kernel: group-wise quantization and INT4 / INT2 packing, bit-identical to :func:`kernels.reference.quantize`.

``x`` (contiguous) is viewed as ``[A, L, C]`` around the quantized axis (length ``L``); each group of
``g`` consecutive elements along ``L`` gets one scale (and a zero point for the integer formats).
A program quantizes ``BLOCK_G`` groups; a group is loaded as runs of the elements one packed byte
holds (two; four for INT2), so INT4 codes pack two per byte and INT2 codes four per byte (the
first element in the low bits) without a second pass, exactly as :func:`kernels.reference.pack_codes`
lays them out. Outlier channels (per head of the second-to-last
axis) are zeroed before the statistics, as in the reference; their values are gathered separately.

Exactness: the reference rounds scales and zero points to ``param_dtype`` conservatively (zero
towards -inf, step towards +inf, by ``nextafter``); the kernel does the same on the 16-bit patterns.
Divisions use IEEE round-to-nearest (``div_rn``), codes round half to even like ``torch.round``.
"""

from __future__ import annotations

from typing import get_args

import torch
import triton
import triton.language as tl

from kernels import reference as ref
from kernels.reference import QuantizedTensor
from kernels.formats import CODECS

_PARAM_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_KINDS = {f.name: f.code for f in CODECS}  # KIND: the format's code (the literals below are checked against it)


@triton.jit
def _rint(x):
    """Round half to even (torch.round)."""
    f = tl.floor(x)
    d = x - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) != 0.0
    return tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)


@triton.jit
def _f32_to_fp8e4m3(y):
    """Round fp32 ``y`` (already clamped to +-448) to float8 e4m3fn bits, nearest-even (as torch does).

    Done on the bit pattern so it needs no FP8 hardware and gives the same bits everywhere."""
    sign = (y.to(tl.int32, bitcast=True) >> 31) & 1
    a = tl.abs(y)
    bits = a.to(tl.int32, bitcast=True)
    exp = (bits >> 23) - 127
    man = bits & 0x7FFFFF
    keep = man >> 20
    rem = man & 0xFFFFF
    up = ((rem > 0x80000) | ((rem == 0x80000) & ((keep & 1) == 1))).to(tl.int32)
    normal = ((exp + 7) << 3) + keep + up
    sub = _rint(a * 512.0).to(tl.int32)  # multiples of 2^-9 below 2^-6 (code 8 is the smallest normal)
    code = tl.minimum(tl.where(a < 0.015625, sub, normal), 126)
    return ((sign << 7) | code).to(tl.uint8)


@triton.jit
def _to_param(value, PARAM: tl.constexpr, UP: tl.constexpr):
    """Cast fp32 ``value`` to the parameter dtype, rounding towards +inf (UP) or -inf, as fp32 again
    plus the stored value in the parameter dtype."""
    if PARAM == 0:
        return value, value
    else:
        if PARAM == 1:
            stored = value.to(tl.float16)
            bits = stored.to(tl.int16, bitcast=True).to(tl.int32)
        else:
            stored = value.to(tl.bfloat16)
            bits = stored.to(tl.int16, bitcast=True).to(tl.int32)
        back = stored.to(tl.float32)
        if UP:
            wrong = back < value
            # nextafter(stored, +inf): positive -> bits + 1, zero -> smallest subnormal, negative -> bits - 1
            moved = tl.where(back > 0, bits + 1, tl.where(back == 0, 1, bits - 1))
        else:
            wrong = back > value
            moved = tl.where(back > 0, bits - 1, tl.where(back == 0, -32767, bits + 1))
        bits = tl.where(wrong, moved, bits).to(tl.int16)
        if PARAM == 1:
            stored = bits.to(tl.float16, bitcast=True)
        else:
            stored = bits.to(tl.bfloat16, bitcast=True)
        return stored.to(tl.float32), stored


@triton.jit
def _load_part(x_ptr, mask_ptr, off, mask, HO: tl.constexpr, DL: tl.constexpr, HAS_OUT: tl.constexpr):
    """Elements at ``off`` as fp32, outlier channels zeroed (they are kept apart at full precision)."""
    v = tl.load(x_ptr + off, mask=mask, other=0.0).to(tl.float32)
    if HAS_OUT:
        m = tl.load(mask_ptr + ((off // DL) % HO) * DL + off % DL, mask=mask, other=0)
        v = tl.where(m != 0, 0.0, v)
    return v


@triton.jit
def _int_codes(v, zero_f, safe, levels):
    c = _rint(tl.math.div_rn(v - zero_f[:, None], safe[:, None]))
    return tl.minimum(tl.maximum(c, 0.0), levels).to(tl.uint8)


@triton.jit
def _quantize_kernel(
    x_ptr,  # [A, L, C] contiguous, any float dtype
    mask_ptr,  # [HO, DL] uint8 outlier channels (only with HAS_OUT)
    codes_ptr,  # [A, L / codes per byte, C] uint8
    scale_ptr,  # [A, L/G, C] param dtype
    zero_ptr,  # [A, L/G, C] param dtype (integer kinds)
    n_rows,  # A * (L / G) * C groups
    L: tl.constexpr,
    C: tl.constexpr,
    G: tl.constexpr,
    HO: tl.constexpr,
    DL: tl.constexpr,
    KIND: tl.constexpr,
    PARAM: tl.constexpr,
    HAS_OUT: tl.constexpr,
    PER: tl.constexpr,  # elements loaded per run: 4 for INT2 (one packed byte), else 2
    BLOCK_G: tl.constexpr,
    BLOCK_J: tl.constexpr,
):
    NG: tl.constexpr = L // G
    SUB: tl.constexpr = G // PER
    rows = tl.program_id(0).to(tl.int64) * BLOCK_G + tl.arange(0, BLOCK_G)
    row_mask = rows < n_rows
    c = rows % C
    gi = (rows // C) % NG
    a = rows // (C * NG)
    j = tl.arange(0, BLOCK_J)
    mask = row_mask[:, None] & (j < SUB)[None, :]
    off0 = (a[:, None] * L + gi[:, None] * G + PER * j[None, :]) * C + c[:, None]  # first element of each run
    x0 = _load_part(x_ptr, mask_ptr, off0, mask, HO, DL, HAS_OUT)
    x1 = _load_part(x_ptr, mask_ptr, off0 + C, mask, HO, DL, HAS_OUT)
    if PER == 4:
        x2 = _load_part(x_ptr, mask_ptr, off0 + 2 * C, mask, HO, DL, HAS_OUT)
        x3 = _load_part(x_ptr, mask_ptr, off0 + 3 * C, mask, HO, DL, HAS_OUT)
    else:  # repeats: the group statistics below stay the same
        x2 = x0
        x3 = x1
    if KIND == 3:  # fp8
        absmax = tl.maximum(tl.max(tl.where(mask, tl.abs(x0), 0.0), 1), tl.max(tl.where(mask, tl.abs(x1), 0.0), 1))
        scale_f, scale_s = _to_param(tl.math.div_rn(absmax, tl.full(absmax.shape, 448.0, tl.float32)), PARAM, True)
        safe = tl.where(scale_f > 0, scale_f, 1.0)
        c0 = _f32_to_fp8e4m3(tl.minimum(tl.maximum(tl.math.div_rn(x0, safe[:, None]), -448.0), 448.0))
        c1 = _f32_to_fp8e4m3(tl.minimum(tl.maximum(tl.math.div_rn(x1, safe[:, None]), -448.0), 448.0))
        tl.store(codes_ptr + off0, c0, mask=mask)
        tl.store(codes_ptr + off0 + C, c1, mask=mask)
    else:
        if KIND == 4:  # int2
            levels = 3.0
        elif KIND == 2:  # int4
            levels = 15.0
        else:
            levels = 255.0
        lo = tl.minimum(tl.minimum(tl.min(tl.where(mask, x0, float("inf")), 1), tl.min(tl.where(mask, x1, float("inf")), 1)),
                        tl.minimum(tl.min(tl.where(mask, x2, float("inf")), 1), tl.min(tl.where(mask, x3, float("inf")), 1)))
        hi = tl.maximum(tl.maximum(tl.max(tl.where(mask, x0, float("-inf")), 1), tl.max(tl.where(mask, x1, float("-inf")), 1)),
                        tl.maximum(tl.max(tl.where(mask, x2, float("-inf")), 1), tl.max(tl.where(mask, x3, float("-inf")), 1)))
        lo = tl.where(row_mask, lo, 0.0)  # rows past the end: keep the arithmetic finite
        hi = tl.where(row_mask, hi, 0.0)
        zero_f, zero_s = _to_param(lo, PARAM, False)
        scale_f, scale_s = _to_param(tl.math.div_rn(hi - zero_f, tl.full(hi.shape, levels, tl.float32)), PARAM, True)
        safe = tl.where(scale_f > 0, scale_f, 1.0)
        c0 = _int_codes(x0, zero_f, safe, levels)
        c1 = _int_codes(x1, zero_f, safe, levels)
        tl.store(zero_ptr + rows, zero_s, mask=row_mask)
        if KIND == 1:  # int8
            tl.store(codes_ptr + off0, c0, mask=mask)
            tl.store(codes_ptr + off0 + C, c1, mask=mask)
        else:  # packed: the first code of each run in the low bits, as kernels.reference.pack_codes lays them out
            off_packed = (a[:, None] * (L // PER) + gi[:, None] * SUB + j[None, :]) * C + c[:, None]
            if KIND == 4:  # int2
                c2 = _int_codes(x2, zero_f, safe, levels)
                c3 = _int_codes(x3, zero_f, safe, levels)
                packed = c0 | (c1 << 2) | (c2 << 4) | (c3 << 6)
            else:
                packed = (c0 & 15) | ((c1 & 15) << 4)
            tl.store(codes_ptr + off_packed, packed, mask=mask)
    tl.store(scale_ptr + rows, scale_s, mask=row_mask)


def quantize(
    x: torch.Tensor,
    kind: ref.QuantKind,
    axis: int,
    group_size: int,
    outlier_idx: torch.Tensor | None = None,
    param_dtype: torch.dtype = torch.float32,
) -> QuantizedTensor:
    """Triton version of :func:`kernels.reference.quantize` (same :class:`QuantizedTensor`, same bits).

    Raises ``NotImplementedError`` for what the kernel does not cover (odd group sizes, outlier
    indices that are not per head of the second-to-last axis, other parameter dtypes).
    """
    if kind not in _KINDS:
        if kind in get_args(ref.QuantKind):
            raise NotImplementedError(f"no Triton quantize kernel for {kind}")
        raise ValueError(f"unknown quantization kind {kind!r}")
    if param_dtype not in _PARAM_CODES:
        raise NotImplementedError(f"param dtype {param_dtype}")
    axis = axis % x.ndim
    length = x.shape[axis]
    if group_size <= 0 or length % group_size:
        raise ValueError(f"group_size {group_size} must divide the axis length {length}")
    per = 4 if kind == "int2" else 2
    if group_size % per:
        raise NotImplementedError(f"the kernel loads groups in runs of {per}: group size must be a multiple of {per}")
    device = x.device
    xc = x.contiguous()
    outer = 1
    for n in x.shape[:axis]:
        outer *= n
    inner = 1
    for n in x.shape[axis + 1 :]:
        inner *= n
    n_groups = length // group_size
    n_rows = outer * n_groups * inner
    outlier_values = None
    mask = torch.zeros(1, dtype=torch.uint8, device=device)
    heads = channels = 1
    if outlier_idx is not None:
        if x.ndim < 2:
            raise NotImplementedError("outliers need a head axis")
        heads, channels = x.shape[-2], x.shape[-1]
        n_out = outlier_idx.shape[-1]
        if outlier_idx.numel() // n_out not in (1, heads) or any(s != 1 for s in outlier_idx.shape[:-2]):
            raise NotImplementedError("outlier indices must be per head of the second-to-last axis")
        per_head = outlier_idx.to(device).reshape(-1, n_out).expand(heads, n_out)
        mask = torch.zeros(heads, channels, dtype=torch.uint8, device=device)
        mask.scatter_(1, per_head.long(), 1)
        idx = outlier_idx.to(device).expand(*x.shape[:-1], n_out)
        outlier_values = torch.gather(x, -1, idx)
    packed_len = length // ref.codes_per_byte(kind)
    code_shape = list(x.shape)
    code_shape[axis] = packed_len
    param_shape = list(x.shape)
    param_shape[axis] = n_groups
    codes = torch.empty(code_shape, dtype=torch.uint8, device=device)
    scale = torch.empty(param_shape, dtype=param_dtype, device=device)
    zero = None if kind == "fp8" else torch.empty(param_shape, dtype=param_dtype, device=device)
    if n_rows:
        block_j = max(1, 1 << (group_size // per - 1).bit_length())
        block_g = max(1, min(128, 4096 // block_j))
        _quantize_kernel[(triton.cdiv(n_rows, block_g),)](
            xc,
            mask,
            codes,
            scale,
            zero if zero is not None else scale,
            n_rows,
            L=length,
            C=inner,
            G=group_size,
            HO=heads,
            DL=channels,
            KIND=_KINDS[kind],
            PARAM=_PARAM_CODES[param_dtype],
            HAS_OUT=outlier_idx is not None,
            PER=per,
            BLOCK_G=block_g,
            BLOCK_J=block_j,
        )
    data = codes.view(ref.FP8_DTYPE) if kind == "fp8" else codes
    return QuantizedTensor(
        data=data,
        scale=scale,
        zero=zero,
        kind=kind,
        axis=axis,
        group_size=group_size,
        shape=tuple(x.shape),
        dtype=x.dtype,
        outlier_idx=outlier_idx,
        outlier_values=outlier_values,
    )


def quantize_keys(
    k: torch.Tensor,
    kind: ref.QuantKind,
    group_size: int,
    token_axis: int,
    outlier_idx: torch.Tensor | None = None,
    param_dtype: torch.dtype = torch.float32,
) -> QuantizedTensor:
    """KIVI keys (per-channel scales, groups along ``token_axis``), Triton kernel."""
    return quantize(k, kind, token_axis, group_size, outlier_idx, param_dtype)


def quantize_values(
    v: torch.Tensor,
    kind: ref.QuantKind,
    group_size: int,
    outlier_idx: torch.Tensor | None = None,
    param_dtype: torch.dtype = torch.float32,
) -> QuantizedTensor:
    """KIVI values (per-token scales, groups along the channels), Triton kernel."""
    return quantize(v, kind, -1, group_size, outlier_idx, param_dtype)


__all__ = ["quantize", "quantize_keys", "quantize_values"]
