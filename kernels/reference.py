"""Plain torch reference ops for the KV store: (de)quantization and block-sparse decode attention.

These run on any device and are the oracle the Triton kernels are tested against, and the CPU fast
path: every op is vectorised (gather + batched matmul), there is no Python loop over blocks.

Layout conventions
------------------
* Paged KV storage: ``[num_physical_blocks, block_size, n_kv_heads, head_dim]`` (one block holds one
  batch row's tokens for all KV heads).
* Block table: ``[batch, n_kv_heads, max_blocks]`` physical block ids, ``-1`` for padding. Each
  (batch, KV head) lists its active blocks; the listed blocks are full except possibly the last
  listed one, whose valid length follows from ``seq_lens[b, h]`` (number of valid tokens over the
  listed blocks), as in paged-attention decoders.
* Queries: ``[batch, n_q_heads, head_dim]`` (one decode step) or ``[batch, n_q_heads, n_queries,
  head_dim]`` (several queries that all see every listed token, e.g. a prefill chunk over its past).
  ``n_q_heads`` is a multiple of ``n_kv_heads`` (GQA); query head ``h`` reads KV head
  ``h // (n_q_heads // n_kv_heads)``, as in transformers' ``repeat_kv``.

Quantization (KIVI style)
-------------------------
Groups of ``group_size`` consecutive elements along one axis share a scale: keys are quantized per
channel (groups run along the token axis), values per token (groups run along the channel axis).
Integer formats are asymmetric (per-group minimum and step), codes are ``uint8``; INT4 codes are
packed two per byte along the group axis (even element in the low nibble). FP8 e4m3 uses one
absmax scale per group. Outlier channels (indices per KV head) are cut out before quantization,
kept in the source precision, and written back on dequantization, so a few large channels do not
inflate every group's step (source 8.2).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from kernels.formats import BY_NAME, CODEC_NAMES, CODECS

QuantKind = Literal[CODEC_NAMES]  # a split format (kernels.formats) is two of these
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(torch.float8_e4m3fn).max)  # 448
# The integer formats: asymmetric with 2^bits levels (FP8 is the one float format, absmax-scaled).
_INT_LEVELS = {f.name: (1 << f.bits) - 1 for f in CODECS if f.name != "fp8"}


def codes_per_byte(kind: str) -> int:
    """How many codes one stored byte holds: 2 for INT4, 4 for INT2, else 1."""
    return BY_NAME[kind].codes_per_byte if kind in BY_NAME else 1


# --------------------------------------------------------------------------------------------------
# Quantization
# --------------------------------------------------------------------------------------------------


@dataclass
class QuantizedTensor:
    """A tensor stored in a compressed form plus what is needed to restore it.

    ``data`` keeps the original axis order; only the size of ``axis`` changes for INT4 (halved by
    packing). ``scale``/``zero`` have the original shape with ``axis`` reduced to the group count.
    """

    data: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor | None
    kind: str
    axis: int
    group_size: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    outlier_idx: torch.Tensor | None = None
    outlier_values: torch.Tensor | None = None

    def nbytes(self) -> int:
        """Bytes of the per-element payload (codes, scales, zero points, outlier values).

        The outlier index is shared by every block of a layer and is not counted here.
        """
        tensors = [self.data, self.scale, self.zero, self.outlier_values]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _normalize_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for a {ndim}-d tensor")
    return axis % ndim


def _round_down(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Cast to ``dtype`` rounding towards -inf, so a stored minimum never exceeds the true one."""
    stored = value.to(dtype)
    too_big = stored.float() > value
    if too_big.any():
        stored = torch.where(too_big, torch.nextafter(stored, torch.full_like(stored, -math.inf)), stored)
    return stored


def _round_up(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Cast to ``dtype`` rounding towards +inf, so a stored step always covers the group's range."""
    stored = value.to(dtype)
    too_small = stored.float() < value
    if too_small.any():
        stored = torch.where(too_small, torch.nextafter(stored, torch.full_like(stored, math.inf)), stored)
    return stored


def pack_codes(codes: torch.Tensor, bits: int, axis: int = -1) -> torch.Tensor:
    """Pack ``bits``-bit codes (uint8) ``8 // bits`` per byte along ``axis``; code ``i`` of each run
    of ``8 // bits`` goes to bits ``i * bits`` (the first code in the low bits)."""
    axis = _normalize_axis(axis, codes.ndim)
    per_byte = 8 // bits
    moved = codes.movedim(axis, -1)
    if moved.shape[-1] % per_byte:
        raise ValueError(f"{bits}-bit packing needs a length along the packed axis divisible by {per_byte}")
    mask = (1 << bits) - 1
    packed = moved[..., 0::per_byte] & mask
    for i in range(1, per_byte):
        packed = packed | ((moved[..., i::per_byte] & mask) << (i * bits))
    return packed.movedim(-1, axis).contiguous()


def unpack_codes(packed: torch.Tensor, bits: int, axis: int = -1) -> torch.Tensor:
    """Inverse of :func:`pack_codes`: uint8 codes, ``8 // bits`` times as long along ``axis``."""
    axis = _normalize_axis(axis, packed.ndim)
    per_byte = 8 // bits
    mask = (1 << bits) - 1
    moved = packed.movedim(axis, -1)
    parts = [(moved >> (i * bits)) & mask for i in range(per_byte)]
    codes = torch.stack(parts, dim=-1).reshape(*moved.shape[:-1], moved.shape[-1] * per_byte)
    return codes.movedim(-1, axis)


def pack_int4(codes: torch.Tensor, axis: int = -1) -> torch.Tensor:
    """Pack 4-bit codes (uint8 values 0..15) two per byte along ``axis`` (even index in the low nibble)."""
    return pack_codes(codes, 4, axis)


def unpack_int4(packed: torch.Tensor, axis: int = -1) -> torch.Tensor:
    """Inverse of :func:`pack_int4`: uint8 codes 0..15, twice as long along ``axis``."""
    return unpack_codes(packed, 4, axis)


def select_outlier_channels(x: torch.Tensor, count: int, head_axis: int = -2) -> torch.Tensor:
    """Pick, per KV head, the ``count`` channels (last axis) with the largest absolute value.

    Returns int64 indices ``[n_heads, count]`` (sorted), to be computed once per layer (e.g. on the
    first prefill chunk) and then passed to :func:`quantize` for every block of that layer.
    """
    head_axis = _normalize_axis(head_axis, x.ndim)
    if head_axis == x.ndim - 1:
        raise ValueError("the head axis cannot be the channel axis")
    moved = x.movedim(head_axis, 0).abs()  # [H, ..., D]
    per_channel = moved.reshape(moved.shape[0], -1, moved.shape[-1]).amax(dim=1)  # [H, D]
    count = min(count, x.shape[-1])
    return per_channel.topk(count, dim=-1).indices.sort(dim=-1).values


def outlier_index_for(outlier_idx: torch.Tensor, ndim: int, head_axis: int) -> torch.Tensor:
    """Reshape per-head indices ``[H, n]`` so they broadcast against a tensor whose heads sit at ``head_axis``."""
    head_axis = _normalize_axis(head_axis, ndim)
    shape = [1] * ndim
    shape[head_axis] = outlier_idx.shape[0]
    shape[-1] = outlier_idx.shape[1]
    return outlier_idx.reshape(shape)


def _groups(x: torch.Tensor, axis: int, group_size: int) -> torch.Tensor:
    """View ``x`` as ``[..., n_groups, group_size]`` with the group axis moved last."""
    moved = x.movedim(axis, -1)
    length = moved.shape[-1]
    if group_size <= 0 or length % group_size:
        raise ValueError(f"group_size {group_size} must divide the axis length {length}")
    return moved.reshape(*moved.shape[:-1], length // group_size, group_size)


def quantize(
    x: torch.Tensor,
    kind: QuantKind,
    axis: int,
    group_size: int,
    outlier_idx: torch.Tensor | None = None,
    param_dtype: torch.dtype = torch.float32,
) -> QuantizedTensor:
    """Quantize ``x`` group-wise along ``axis``.

    ``outlier_idx`` (int64, broadcastable to ``x.shape[:-1] + (n,)``, see :func:`outlier_index_for`)
    names channels of the last axis kept at full precision. ``param_dtype`` is the dtype of scales
    and zero points; they are rounded conservatively so the per-element error bound of the integer
    formats (half a step) holds with the stored parameters.
    """
    if kind not in CODEC_NAMES:
        raise ValueError(f"unknown quantization kind {kind!r}")
    axis = _normalize_axis(axis, x.ndim)
    outlier_values = None
    if outlier_idx is not None:
        idx = outlier_idx.to(x.device).expand(*x.shape[:-1], outlier_idx.shape[-1])
        outlier_values = torch.gather(x, -1, idx)
        x = x.scatter(-1, idx, 0.0)
    groups = _groups(x.float(), axis, group_size)  # [..., G, g]

    if kind == "fp8":
        absmax = groups.abs().amax(dim=-1)
        scale = _round_up(absmax / FP8_MAX, param_dtype)
        safe = torch.where(scale.float() > 0, scale.float(), torch.ones_like(absmax))
        scaled = (groups / safe.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX)
        data = scaled.to(FP8_DTYPE).reshape(*groups.shape[:-2], -1).movedim(-1, axis).contiguous()
        zero = None
    else:
        levels = _INT_LEVELS[kind]
        minimum = groups.amin(dim=-1)
        maximum = groups.amax(dim=-1)
        zero = _round_down(minimum, param_dtype)
        scale = _round_up((maximum - zero.float()) / levels, param_dtype)
        safe = torch.where(scale.float() > 0, scale.float(), torch.ones_like(minimum))
        codes = ((groups - zero.float().unsqueeze(-1)) / safe.unsqueeze(-1)).round().clamp(0, levels)
        codes = codes.to(torch.uint8).reshape(*groups.shape[:-2], -1)  # group axis last
        if codes_per_byte(kind) > 1:
            codes = pack_codes(codes, BY_NAME[kind].bits, -1)
        data = codes.movedim(-1, axis).contiguous()
        zero = zero.movedim(-1, axis).contiguous()
    return QuantizedTensor(
        data=data,
        scale=scale.movedim(-1, axis).contiguous(),
        zero=zero,
        kind=kind,
        axis=axis,
        group_size=group_size,
        shape=tuple(x.shape),
        dtype=x.dtype,
        outlier_idx=outlier_idx,
        outlier_values=outlier_values,
    )


def dequantize(qt: QuantizedTensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Restore a :class:`QuantizedTensor` (computed in fp32, returned in ``dtype`` or the source dtype)."""
    axis = qt.axis
    if qt.kind == "fp8":
        values = qt.data.movedim(axis, -1).float()
    else:
        codes = qt.data.movedim(axis, -1)
        if codes_per_byte(qt.kind) > 1:
            codes = unpack_codes(codes, BY_NAME[qt.kind].bits, -1)
        values = codes.float()
    length = values.shape[-1]
    values = values.reshape(*values.shape[:-1], length // qt.group_size, qt.group_size)
    scale = qt.scale.movedim(axis, -1).float().unsqueeze(-1)
    if qt.kind == "fp8":
        out = values * scale
    else:
        out = values * scale + qt.zero.movedim(axis, -1).float().unsqueeze(-1)
    out = out.reshape(*out.shape[:-2], length).movedim(-1, axis)
    out = out.to(dtype or qt.dtype)
    if qt.outlier_idx is not None and qt.outlier_values is not None:
        idx = qt.outlier_idx.to(out.device).expand(*out.shape[:-1], qt.outlier_idx.shape[-1])
        out = out.scatter(-1, idx, qt.outlier_values.to(out.dtype))
    return out


def quantize_keys(
    k: torch.Tensor,
    kind: QuantKind,
    group_size: int,
    token_axis: int,
    outlier_idx: torch.Tensor | None = None,
    param_dtype: torch.dtype = torch.float32,
) -> QuantizedTensor:
    """KIVI keys: per-channel scales, groups of ``group_size`` tokens along ``token_axis``."""
    return quantize(k, kind, token_axis, group_size, outlier_idx, param_dtype)


def quantize_values(
    v: torch.Tensor,
    kind: QuantKind,
    group_size: int,
    outlier_idx: torch.Tensor | None = None,
    param_dtype: torch.dtype = torch.float32,
) -> QuantizedTensor:
    """KIVI values: per-token scales, groups of ``group_size`` channels along the last axis."""
    return quantize(v, kind, -1, group_size, outlier_idx, param_dtype)


def element_step(qt: QuantizedTensor) -> torch.Tensor:
    """The quantization step of every element, in the source shape (for error bounds and tests)."""
    scale = qt.scale.float().movedim(qt.axis, -1)
    scale = scale.repeat_interleave(qt.group_size, dim=-1).movedim(-1, qt.axis)
    if qt.outlier_idx is not None:
        idx = qt.outlier_idx.to(scale.device).expand(*scale.shape[:-1], qt.outlier_idx.shape[-1])
        scale = scale.scatter(-1, idx, 0.0)
    return scale


# --------------------------------------------------------------------------------------------------
# Paged gathers
# --------------------------------------------------------------------------------------------------


def gather_pages(pages: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """Read ``pages[block_table[b, h, m], :, h, :]`` for every listed (batch, head, block).

    ``pages`` is ``[P, X, H, Y]``; the result is ``[B, H, M, X, Y]``. Only the selected head slice of
    each selected block is read. Padding entries (-1) read block 0 and must be masked by the caller.
    The copy is one ``index_select`` of whole ``Y`` rows (rows of a contiguous page are contiguous),
    which is much faster on CPU than advanced indexing with three broadcast index tensors.
    """
    n_heads = block_table.shape[1]
    if pages.shape[2] != n_heads:
        raise ValueError(f"pages have {pages.shape[2]} heads, block table has {n_heads}")
    safe = block_table.clamp(min=0).to(pages.device)
    # CPU torch cannot index float8 tensors: gather their bytes instead.
    raw = pages.view(torch.uint8) if pages.dtype == FP8_DTYPE else pages
    n_pages, rows_per_block, _, width = raw.shape
    if raw.is_contiguous():
        heads = torch.arange(n_heads, device=pages.device).view(1, n_heads, 1, 1)
        tokens = torch.arange(rows_per_block, device=pages.device).view(1, 1, 1, -1)
        rows = (safe.unsqueeze(-1) * rows_per_block + tokens) * n_heads + heads  # [B, H, M, X]
        picked = raw.view(-1, width).index_select(0, rows.reshape(-1)).view(*safe.shape, rows_per_block, width)
    else:
        heads = torch.arange(n_heads, device=pages.device).view(1, n_heads, 1)
        # Two advanced indices split by a slice: the broadcast (B, H, M) dims come first.
        picked = raw[safe, :, heads, :]
    return picked.view(pages.dtype) if pages.dtype == FP8_DTYPE else picked


def gather_quantized_pages(qt: QuantizedTensor, block_table: torch.Tensor) -> QuantizedTensor:
    """Gather the selected (block, head) slices of a paged :class:`QuantizedTensor`.

    The paged tensor has the source shape ``[P, block_size, H, D]`` with ``axis`` 1 (keys, per
    channel) or 3 (values, per token); the result describes ``[B, H, M, block_size, D]``.
    """
    if len(qt.shape) != 4 or qt.axis not in (1, 3):
        raise ValueError("expected a paged [P, block_size, H, D] tensor quantized along axis 1 or 3")
    n_blocks_listed = block_table.shape[2]
    new_axis = {1: 3, 3: 4}[qt.axis]
    outlier_idx = None
    outlier_values = None
    if qt.outlier_idx is not None:
        per_head = qt.outlier_idx.reshape(qt.outlier_idx.shape[-2], qt.outlier_idx.shape[-1])
        outlier_idx = per_head.view(1, per_head.shape[0], 1, 1, per_head.shape[1])
        outlier_values = gather_pages(qt.outlier_values, block_table)
    batch, heads = block_table.shape[:2]
    return QuantizedTensor(
        data=gather_pages(qt.data, block_table),
        scale=gather_pages(qt.scale, block_table),
        zero=None if qt.zero is None else gather_pages(qt.zero, block_table),
        kind=qt.kind,
        axis=new_axis,
        group_size=qt.group_size,
        shape=(batch, heads, n_blocks_listed, qt.shape[1], qt.shape[3]),
        dtype=qt.dtype,
        outlier_idx=outlier_idx,
        outlier_values=outlier_values,
    )


def gather_kv(source: torch.Tensor | QuantizedTensor, block_table: torch.Tensor) -> torch.Tensor:
    """Selected blocks as a dense ``[B, H, M, block_size, D]`` tensor, dequantizing only what is read.

    Quantized blocks come back in fp32 (the precision attention uses them in), not rounded to the
    source dtype.
    """
    if isinstance(source, QuantizedTensor):
        return dequantize(gather_quantized_pages(source, block_table), torch.float32)
    return gather_pages(source, block_table)


# --------------------------------------------------------------------------------------------------
# Attention partials and their merge
# --------------------------------------------------------------------------------------------------


@dataclass
class AttentionPartial:
    """Attention over a subset of the keys: normalised output and the log-sum-exp of its logits.

    ``out`` is ``[B, Hq, Q, D]`` (fp32), ``lse`` is ``[B, Hq, Q]``; an empty subset has ``lse = -inf``
    and ``out = 0``. Partials over disjoint key sets merge exactly with :func:`merge_partials`.
    """

    out: torch.Tensor
    lse: torch.Tensor


def merge_partials(partials: Sequence[AttentionPartial]) -> AttentionPartial:
    """Combine attention over disjoint key sets (the flash-decoding / split-KV reduction)."""
    if not partials:
        raise ValueError("nothing to merge")
    if len(partials) == 1:
        return partials[0]
    lses = torch.stack([p.lse for p in partials])  # [n, B, H, Q]
    total = torch.logsumexp(lses, dim=0)
    finite = torch.isfinite(total)
    weights = torch.where(finite, torch.exp(lses - total.where(finite, torch.zeros_like(total))), 0.0)
    out = sum(w.unsqueeze(-1) * p.out for w, p in zip(weights, partials))
    return AttentionPartial(out=out, lse=total)


def _group_queries(q: torch.Tensor, n_kv_heads: int) -> tuple[torch.Tensor, bool]:
    """``[B, Hq, (Q,) D]`` -> ``[B, Hkv, G, Q, D]`` fp32, plus whether Q was absent."""
    single = q.ndim == 3
    if single:
        q = q.unsqueeze(2)
    batch, n_q_heads, n_queries, dim = q.shape
    if n_q_heads % n_kv_heads:
        raise ValueError(f"{n_q_heads} query heads are not a multiple of {n_kv_heads} KV heads")
    groups = n_q_heads // n_kv_heads
    return q.float().reshape(batch, n_kv_heads, groups, n_queries, dim), single


def _softcap(logits: torch.Tensor, softcap: float | None) -> torch.Tensor:
    return logits if softcap is None else torch.tanh(logits / softcap) * softcap


def _softmax_with_lse(
    logits: torch.Tensor, valid: torch.Tensor, scale: float, softcap: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw ``q.k`` logits ``[B, Hkv, G, Q, N]`` -> probabilities (same shape) and LSE ``[B, Hkv, G, Q]``.

    ``valid`` is ``[B, Hkv, N]`` or ``[B, Hkv, Q, N]``; a row with no valid key gets ``lse = -inf``
    and zero probabilities.
    """
    logits = _softcap(logits * scale, softcap)
    mask = valid[:, :, None, None, :] if valid.ndim == 3 else valid[:, :, None, :, :]
    logits = logits.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(logits, dim=-1)  # [B, Hkv, G, Q]
    finite = torch.isfinite(lse)
    probs = torch.exp(logits - lse.where(finite, torch.zeros_like(lse)).unsqueeze(-1))
    probs = probs.masked_fill(~finite.unsqueeze(-1), 0.0)
    return probs, lse


def _attend(
    qg: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid: torch.Tensor,
    scale: float,
    softcap: float | None,
    return_probs: bool = False,
) -> tuple[AttentionPartial, torch.Tensor | None]:
    """qg ``[B, Hkv, G, Q, D]``, keys/values ``[B, Hkv, N, D]``, valid ``[B, Hkv, N]`` or ``[B, Hkv, Q, N]``.

    Returns the partial and, when asked, the probabilities ``[B, Hkv, G, Q, N]`` (normalised within
    this partial).
    """
    batch, n_kv, groups, n_queries, dim = qg.shape
    flat_q = qg.reshape(batch, n_kv, groups * n_queries, dim)
    logits = torch.matmul(flat_q, keys.float().transpose(-1, -2))  # [B, Hkv, G*Q, N]
    probs, lse = _softmax_with_lse(logits.reshape(batch, n_kv, groups, n_queries, -1), valid, scale, softcap)
    out = torch.matmul(probs.reshape(batch, n_kv, groups * n_queries, -1), values.float())
    out = out.reshape(batch, n_kv * groups, n_queries, -1)
    partial = AttentionPartial(out=out, lse=lse.reshape(batch, n_kv * groups, n_queries))
    return partial, (probs if return_probs else None)


# --------------------------------------------------------------------------------------------------
# Attention over quantized pages without dequantizing K or V
# --------------------------------------------------------------------------------------------------
#
# Only the listed (block, head) slices are gathered, as codes (one index_select of whole rows per
# tensor). The group scales fold into the small operand of each product instead of the codes:
# keys (per-channel scales, groups of tokens) into one copy of the queries per token group, values
# (per-token scales, groups of channels) into one copy of the probabilities per channel group; the
# zero points become one small matmul each. The codes are only converted to floats, and INT4 codes
# are never unpacked into token / channel order: the low nibbles (even tokens of keys, even channels
# of values) and the high nibbles (odd ones) are two half-size products whose small results are
# interleaved. Outlier channels replace the dequantized value (as in :func:`dequantize`): for keys
# their query channels are zeroed for the code part and their exact values add a separate dot
# product; for values their output channels are overwritten with the probabilities times the exact
# values. Layouts other than the KV store's (keys along tokens, values along channels) fall back to
# dequantizing the gathered blocks.


_SCRATCH = threading.local()
_SCRATCH_MAX_BYTES = 64 << 20


def _codes_as_float(codes: torch.Tensor, kind: str) -> list[torch.Tensor]:
    """Gathered codes as fp32: one tensor, or one per code position of a packed byte (INT4: low
    nibbles, high nibbles; INT2: bits 0-1, 2-3, 4-5, 6-7).

    On CPU the floats go into a per-thread buffer reused across calls (up to 64 MiB): a fresh
    multi-megabyte tensor per call costs more in page faults than the conversion itself. The
    returned views are only valid until the next call on the same thread.
    """
    n_parts = codes_per_byte(kind)
    bits = 8 // n_parts
    mask = (1 << bits) - 1
    numel = codes.numel()
    if codes.device.type != "cpu" or n_parts * numel * 4 > _SCRATCH_MAX_BYTES:
        if n_parts > 1:
            return [((codes >> (i * bits)) & mask).float() for i in range(n_parts)]
        return [codes.float()]
    buf = getattr(_SCRATCH, "floats", None)
    if buf is None or buf.numel() < n_parts * numel:
        buf = _SCRATCH.floats = torch.empty(n_parts * numel, dtype=torch.float32)
    parts = [buf[i * numel : (i + 1) * numel].view(codes.shape) for i in range(n_parts)]
    if n_parts > 1:
        for i, part in enumerate(parts):
            part.copy_((codes >> (i * bits)) & mask)
    else:
        parts[0].copy_(codes)
    return parts


def _outlier_rows(qt: QuantizedTensor, n_heads: int) -> torch.Tensor | None:
    """Per-head outlier channel indices ``[H, n]`` (int64) of a paged tensor, or None."""
    if qt.outlier_idx is None or qt.outlier_values is None:
        return None
    idx = qt.outlier_idx.reshape(-1, qt.outlier_idx.shape[-1])
    return idx.expand(n_heads, idx.shape[-1]).long()


def _fused_layout_ok(qt: QuantizedTensor, axis: int) -> bool:
    if len(qt.shape) != 4 or qt.axis != axis or qt.kind not in CODEC_NAMES:
        return False
    length = qt.shape[axis]
    if qt.group_size <= 0 or length % qt.group_size:
        return False
    return qt.group_size % codes_per_byte(qt.kind) == 0


def _quantized_key_logits(flat_q: torch.Tensor, kq: QuantizedTensor, block_table: torch.Tensor) -> torch.Tensor:
    """``q . k`` (unscaled) ``[B, Hkv, R, M * block_size]`` for per-channel quantized paged keys.

    Keys are never dequantized: with ``k[t, d] = c[t, d] s[g, d] + z[g, d]`` (``g`` the token group
    of ``t``), ``q . k_t = sum_d (q_d s[g, d]) c[t, d] + sum_d q_d z[g, d]``, so the scales fold into
    one small copy of the queries per token group (a batched matmul over groups with the codes as
    floats) and the zero points into one dot per group.
    """
    batch, n_kv, n_listed = block_table.shape
    rows, dim = flat_q.shape[2], flat_q.shape[3]
    block_size, group = kq.shape[1], kq.group_size
    n_groups = block_size // group
    n_parts = codes_per_byte(kq.kind)
    idx = _outlier_rows(kq, n_kv)
    q_codes = flat_q
    if idx is not None:
        q_codes = flat_q.scatter(-1, idx.to(flat_q.device).view(1, n_kv, 1, -1).expand(batch, n_kv, rows, -1), 0.0)
    scale = gather_pages(kq.scale, block_table).float()  # [B, H, M, nG, D]
    q_scaled = q_codes.view(batch, n_kv, 1, 1, rows, dim) * scale.unsqueeze(4)  # [B, H, M, nG, R, D]
    codes = gather_pages(kq.data, block_table)  # [B, H, M, bs (bs/2 for INT4), D]
    codes = codes.view(batch, n_kv, n_listed, n_groups, group // n_parts, dim)
    logits = [torch.matmul(q_scaled, part.transpose(-1, -2)) for part in _codes_as_float(codes, kq.kind)]  # [B, H, M, nG, R, g/parts]
    # Packed codes: part i holds token i of each run of n_parts tokens (INT4: even in the low nibble).
    logits = logits[0] if n_parts == 1 else torch.stack(logits, dim=-1)
    logits = logits.reshape(batch, n_kv, n_listed, n_groups, rows, group)
    if kq.zero is not None:
        zero = gather_pages(kq.zero, block_table).float().view(batch, n_kv, n_listed * n_groups, dim)
        offset = torch.matmul(zero, q_codes.transpose(-1, -2))  # [B, H, M * nG, R]
        logits = logits + offset.view(batch, n_kv, n_listed, n_groups, rows, 1)
    logits = logits.permute(0, 1, 4, 2, 3, 5).reshape(batch, n_kv, rows, n_listed * block_size)
    if idx is not None:
        exact = gather_pages(kq.outlier_values, block_table).float()  # [B, H, M, bs, n]
        exact = exact.view(batch, n_kv, n_listed * block_size, -1)
        q_exact = torch.gather(flat_q, -1, idx.to(flat_q.device).view(1, n_kv, 1, -1).expand(batch, n_kv, rows, -1))
        logits = logits + torch.matmul(q_exact, exact.transpose(-1, -2))
    return logits


def _quantized_value_output(probs: torch.Tensor, vq: QuantizedTensor, block_table: torch.Tensor) -> torch.Tensor:
    """``probs @ v`` ``[B, Hkv, R, D]`` for per-token quantized paged values; probs ``[B, Hkv, R, N]``.

    Values are never dequantized: with ``v[t, d] = c[t, d] s[t, j] + z[t, j]`` (``j`` the channel
    group of ``d``), ``out[:, d] = sum_t (p_t s[t, j]) c[t, d] + sum_t p_t z[t, j]``, so the scales
    fold into one small copy of the probabilities per channel group and each group is one matmul
    of the probabilities with the codes (as floats) of its channels.
    """
    batch, n_kv, n_listed = block_table.shape
    rows, n_tokens = probs.shape[2], probs.shape[3]
    dim, group = vq.shape[3], vq.group_size
    n_groups = dim // group
    n_parts = codes_per_byte(vq.kind)
    scale = gather_pages(vq.scale, block_table).float().view(batch, n_kv, n_tokens, n_groups)
    scale = scale.permute(0, 1, 3, 2).contiguous()  # [B, H, nG, N]: tokens last, like probs
    p_scaled = probs.unsqueeze(2) * scale.unsqueeze(3)  # [B, H, nG, R, N]
    codes = gather_pages(vq.data, block_table)  # [B, H, M, bs, D (D/2 for INT4)]
    # Channel groups become a batch axis: [B, H, nG, N, per_part] (a copy of bytes, not floats).
    codes = codes.view(batch, n_kv, n_tokens, n_groups, group // n_parts).transpose(2, 3).contiguous()
    outs = [torch.matmul(p_scaled, part) for part in _codes_as_float(codes, vq.kind)]  # [B, H, nG, R, per_part]
    # Packed codes: part i holds channel i of each run of n_parts channels.
    out = outs[0] if n_parts == 1 else torch.stack(outs, dim=-1)
    out = out.reshape(batch, n_kv, n_groups, rows, group).transpose(2, 3).reshape(batch, n_kv, rows, dim)
    if vq.zero is not None:
        zero = gather_pages(vq.zero, block_table).float().view(batch, n_kv, n_tokens, n_groups)
        out = out + torch.matmul(probs, zero).repeat_interleave(group, dim=-1)
    idx = _outlier_rows(vq, n_kv)
    if idx is not None:
        exact = gather_pages(vq.outlier_values, block_table).float().view(batch, n_kv, n_tokens, -1)
        out = out.scatter(-1, idx.to(out.device).view(1, n_kv, 1, -1).expand(batch, n_kv, rows, -1), torch.matmul(probs, exact))
    return out


def _listed_rows(source: torch.Tensor | QuantizedTensor, block_table: torch.Tensor) -> torch.Tensor:
    """The listed blocks of one storage as ``[B, Hkv, M * block_size, D]`` fp32, dequantized when needed."""
    batch, n_kv, _ = block_table.shape
    if isinstance(source, QuantizedTensor):
        rows = dequantize(gather_quantized_pages(source, block_table), torch.float32)
    else:
        rows = gather_pages(source, block_table)
    return rows.reshape(batch, n_kv, -1, rows.shape[-1]).float()


# The fused paths copy the queries once per token group of each block (keys) and the probabilities
# once per channel group (values): cheap at decode (a few query rows), but for a prefill chunk (R =
# 2048 rows) that is R * groups floats per block against block_size * D for the dequantized block,
# so there the gathered blocks are dequantized instead (hundreds of MiB less, and less arithmetic).


def _source_logits(flat_q: torch.Tensor, source: torch.Tensor | QuantizedTensor, block_table: torch.Tensor) -> torch.Tensor:
    """``q . k`` over the listed blocks of one storage: ``[B, Hkv, R, M * block_size]`` (fp32)."""
    if isinstance(source, QuantizedTensor) and _fused_layout_ok(source, 1):
        if flat_q.shape[2] * (source.shape[1] // source.group_size) <= source.shape[1]:
            return _quantized_key_logits(flat_q, source, block_table)
    return torch.matmul(flat_q, _listed_rows(source, block_table).transpose(-1, -2))


def _source_output(probs: torch.Tensor, source: torch.Tensor | QuantizedTensor, block_table: torch.Tensor) -> torch.Tensor:
    """``probs @ v`` over the listed blocks of one storage: ``[B, Hkv, R, D]`` (fp32)."""
    if isinstance(source, QuantizedTensor) and _fused_layout_ok(source, 3):
        if probs.shape[2] * (source.shape[3] // source.group_size) <= source.shape[3]:
            return _quantized_value_output(probs, source, block_table)
    return torch.matmul(probs, _listed_rows(source, block_table))


def renormalised_mass(mass: torch.Tensor, partial: AttentionPartial, merged: AttentionPartial) -> torch.Tensor:
    """Turn per-query mass ``[B, Hkv, G, Q, X]`` normalised within ``partial`` into mass under the
    ``merged`` softmax, summed over the group's query heads and the queries: ``[B, Hkv, X]``."""
    batch, n_kv, groups, n_queries, _ = mass.shape
    finite = torch.isfinite(merged.lse)
    ratio = torch.where(finite, torch.exp(partial.lse - merged.lse.where(finite, torch.zeros_like(merged.lse))), 0.0)
    ratio = ratio.reshape(batch, n_kv, groups, n_queries, 1)
    return (mass * ratio).sum(dim=(2, 3))


def _valid_from_seq_lens(seq_lens: torch.Tensor, n_blocks: int, block_size: int, block_table: torch.Tensor) -> torch.Tensor:
    positions = torch.arange(n_blocks * block_size, device=block_table.device)
    valid = positions.view(1, 1, -1) < seq_lens.to(block_table.device).unsqueeze(-1)
    listed = (block_table >= 0).repeat_interleave(block_size, dim=-1)
    return valid & listed


# Reads of many blocks are split into chunks of listed blocks whose fp32 temporaries stay within
# this many bytes (each chunk is one vectorised pass; the chunks merge exactly by log-sum-exp). It
# bounds the working set: multi-hundred-megabyte temporaries cost more in page faults and cache
# misses than the arithmetic. A decode step that reads a top-k selection is usually one chunk.
_CHUNK_BYTES = 32 << 20
_LOGIT_CHUNK_BYTES = 8 << 20  # for the [queries x listed tokens] logits: bounds prefill peak memory


def _page_geometry(source: torch.Tensor | QuantizedTensor) -> tuple[int, int]:
    """(block size, head dim) of a paged ``[P, block_size, H, D]`` storage."""
    shape = source.shape if isinstance(source, QuantizedTensor) else tuple(source.shape)
    return int(shape[1]), int(shape[-1])


def _chunked_partial(
    q: torch.Tensor,
    k_source: torch.Tensor | QuantizedTensor,
    v_source: torch.Tensor | QuantizedTensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    softcap: float | None,
    return_block_mass: bool,
    width: int,
) -> tuple[AttentionPartial, torch.Tensor | None]:
    """:func:`paged_attention_partial` over column chunks of ``width`` listed blocks, merged by LSE."""
    block_size, _ = _page_geometry(k_source)
    n_listed = block_table.shape[2]
    partials, masses = [], []
    for start in range(0, n_listed, width):
        table = block_table[..., start : start + width]
        lens = (seq_lens.to(table.device) - start * block_size).clamp(0, table.shape[-1] * block_size)
        partial, mass = paged_attention_partial(q, k_source, v_source, table, lens, scale, softcap, return_block_mass)
        partials.append(partial)
        masses.append(mass)
    merged = merge_partials(partials)
    if not return_block_mass:
        return merged, None
    finite = torch.isfinite(merged.lse)
    rescaled = []
    for partial, mass in zip(partials, masses):
        ratio = torch.where(finite, torch.exp(partial.lse - merged.lse.where(finite, torch.zeros_like(merged.lse))), 0.0)
        rescaled.append(mass * ratio.reshape(*mass.shape[:4], 1))
    return merged, torch.cat(rescaled, dim=-1)


def paged_attention_partial(
    q: torch.Tensor,
    k_source: torch.Tensor | QuantizedTensor,
    v_source: torch.Tensor | QuantizedTensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    softcap: float | None = None,
    return_block_mass: bool = False,
) -> tuple[AttentionPartial, torch.Tensor | None]:
    """Attention of ``q`` over the listed blocks of one storage (full precision or quantized).

    With ``return_block_mass`` it also returns the probability mass each listed block received
    within this partial, per query head of the group and per query: ``[B, Hkv, G, Q, M]`` (see
    :func:`renormalised_mass` to express it under a merged softmax).
    """
    qg, _ = _group_queries(q, block_table.shape[1])
    batch, n_kv, n_listed = block_table.shape
    block_size, k_dim = _page_geometry(k_source)
    _, v_dim = _page_geometry(v_source)
    # fp32 temporaries per listed block: its K/V rows, and the logits / probabilities of every query
    # row of the group (a 512-token prefill chunk of 4 query heads is 2048 rows: far more than K/V;
    # softmax makes several copies of them, hence the smaller budget).
    per_block = max(batch * n_kv * block_size * max(k_dim, v_dim) * 4 / _CHUNK_BYTES,
                    batch * n_kv * block_size * qg.shape[2] * qg.shape[3] * 4 / _LOGIT_CHUNK_BYTES)
    width = max(1, int(1 / per_block))
    if n_listed > width:
        return _chunked_partial(q, k_source, v_source, block_table, seq_lens, scale, softcap, return_block_mass, width)
    if n_listed == 0:
        empty = AttentionPartial(
            out=torch.zeros(batch, qg.shape[1] * qg.shape[2], qg.shape[3], qg.shape[4], device=qg.device),
            lse=torch.full((batch, qg.shape[1] * qg.shape[2], qg.shape[3]), -math.inf, device=qg.device),
        )
        no_mass = torch.zeros(batch, n_kv, qg.shape[2], qg.shape[3], 0, device=qg.device)
        return empty, (no_mass if return_block_mass else None)
    groups, n_queries, dim = qg.shape[2], qg.shape[3], qg.shape[4]
    flat_q = qg.reshape(batch, n_kv, groups * n_queries, dim)
    logits = _source_logits(flat_q, k_source, block_table)  # [B, Hkv, G*Q, M*bs]
    block_size = logits.shape[-1] // n_listed
    valid = _valid_from_seq_lens(seq_lens, n_listed, block_size, block_table)
    probs, lse = _softmax_with_lse(logits.view(batch, n_kv, groups, n_queries, -1), valid, scale, softcap)
    out = _source_output(probs.view(batch, n_kv, groups * n_queries, -1), v_source, block_table)
    partial = AttentionPartial(
        out=out.reshape(batch, n_kv * groups, n_queries, -1), lse=lse.reshape(batch, n_kv * groups, n_queries)
    )
    mass = None
    if return_block_mass:
        mass = probs.reshape(*probs.shape[:4], n_listed, block_size).sum(-1)
    return partial, mass


@dataclass
class GlobalSummary:
    """Summary of the tokens dropped from one layer, per (batch, KV head): the Global Summary Vector.

    The source (3.2) adds ``lambda * GSV`` to the attention over the retained keys. We make that term
    principled: the dropped tokens of a (batch, head) are replaced by one virtual token whose key
    and value are the means of the dropped keys and values and whose logit gets ``+log(count)``.
    Its softmax weight then equals ``count * exp(s * q.k_mean)`` against the retained tokens, which
    is the dropped tokens' partition mass to first order (and a lower bound of it, by Jensen); its
    contribution to the output is that mass times the mean value. So lambda is not a tuned constant:
    it is the dropped share of the softmax, estimated per query.
    """

    key_sum: torch.Tensor  # [B, Hkv, D] fp32
    value_sum: torch.Tensor  # [B, Hkv, D] fp32
    count: torch.Tensor  # [B, Hkv] fp32

    @classmethod
    def empty(cls, batch: int, n_kv_heads: int, head_dim: int, device: torch.device | str = "cpu") -> "GlobalSummary":
        zeros = torch.zeros(batch, n_kv_heads, head_dim, device=device)
        return cls(key_sum=zeros, value_sum=zeros.clone(), count=torch.zeros(batch, n_kv_heads, device=device))

    def absorb(self, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor | None = None) -> "GlobalSummary":
        """Add dropped tokens ``[B, Hkv, N, D]`` (``valid`` ``[B, Hkv, N]`` masks padding); returns a new summary."""
        weight = torch.ones(keys.shape[:3], device=keys.device) if valid is None else valid.float()
        return GlobalSummary(
            key_sum=self.key_sum + (keys.float() * weight.unsqueeze(-1)).sum(2),
            value_sum=self.value_sum + (values.float() * weight.unsqueeze(-1)).sum(2),
            count=self.count + weight.sum(-1),
        )

    def release(self, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor | None = None) -> "GlobalSummary":
        """Take tokens absorbed earlier back out (they are in the cache again); returns a new summary."""
        weight = torch.ones(keys.shape[:3], device=keys.device) if valid is None else valid.float()
        return GlobalSummary(
            key_sum=self.key_sum - (keys.float() * weight.unsqueeze(-1)).sum(2),
            value_sum=self.value_sum - (values.float() * weight.unsqueeze(-1)).sum(2),
            count=(self.count - weight.sum(-1)).clamp(min=0.0),
        )

    def clone(self) -> "GlobalSummary":
        return GlobalSummary(self.key_sum.clone(), self.value_sum.clone(), self.count.clone())

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.key_sum, self.value_sum, self.count))


def summary_partial(q: torch.Tensor, summary: GlobalSummary, scale: float, softcap: float | None = None) -> AttentionPartial:
    """The virtual-token partial of a :class:`GlobalSummary` (``lse = -inf`` where nothing was dropped)."""
    qg, _ = _group_queries(q, summary.count.shape[1])
    batch, n_kv, groups, n_queries, _ = qg.shape
    present = summary.count > 0
    count = summary.count.clamp(min=1.0)
    mean_key = summary.key_sum / count.unsqueeze(-1)
    mean_value = summary.value_sum / count.unsqueeze(-1)
    logit = torch.einsum("bhgqd,bhd->bhgq", qg, mean_key) * scale
    logit = _softcap(logit, softcap) + torch.log(count).view(batch, n_kv, 1, 1)
    logit = logit.masked_fill(~present.view(batch, n_kv, 1, 1), -math.inf)
    out = mean_value.view(batch, n_kv, 1, 1, -1).expand(batch, n_kv, groups, n_queries, -1)
    out = out * present.view(batch, n_kv, 1, 1, 1)
    return AttentionPartial(
        out=out.reshape(batch, n_kv * groups, n_queries, -1),
        lse=logit.reshape(batch, n_kv * groups, n_queries),
    )


def finish_decode(
    q: torch.Tensor, partial: AttentionPartial, scale: float, summary: GlobalSummary | None, softcap: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(output, lse)`` of :func:`sparse_decode_attention` from a paged partial: the summary's
    virtual token merged in, the output in ``q``'s dtype, the query axis dropped for ``[B, Hq, D]`` queries
    (shared by the Triton and CPU kernel wrappers)."""
    if summary is not None:
        partial = merge_partials([partial, summary_partial(q, summary, scale, softcap)])
    out, lse = partial.out.to(q.dtype), partial.lse
    if q.ndim == 3:
        out, lse = out.squeeze(2), lse.squeeze(2)
    return out, lse


def merge_with_extras(
    q: torch.Tensor,
    partials: list[AttentionPartial],
    scale: float,
    summary: GlobalSummary | None,
    softcap: float | None,
    extra: Sequence[AttentionPartial],
) -> tuple[list[AttentionPartial], AttentionPartial]:
    """``partials`` plus the summary's partial and ``extra``, and their merge (as
    :func:`mixed_sparse_attention` does; shared by the kernel wrappers)."""
    partials = list(partials)
    if summary is not None:
        partials.append(summary_partial(q, summary, scale, softcap))
    partials.extend(extra)
    return partials, merge_partials(partials)


def sparse_decode_attention(
    q: torch.Tensor,
    k_pages: torch.Tensor | QuantizedTensor,
    v_pages: torch.Tensor | QuantizedTensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    summary: GlobalSummary | None = None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-sparse decode attention over a paged cache, returning ``(output, lse)``.

    Equivalent to softmax attention (online softmax) over exactly the listed tokens, plus the
    summary's virtual token when given. ``output`` has the shape and dtype of ``q``; ``lse`` is the
    natural-log sum of exp of the scaled logits, ``[B, Hq]`` (or ``[B, Hq, Q]``).
    """
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    partial, _ = paged_attention_partial(q, k_pages, v_pages, block_table, seq_lens, scale, softcap)
    return finish_decode(q, partial, scale, summary, softcap)


@dataclass
class PagedSource:
    """One storage tier in a mixed-tier attention call: its K/V pages and the blocks to read there."""

    k_pages: torch.Tensor | QuantizedTensor
    v_pages: torch.Tensor | QuantizedTensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor


def mixed_sparse_attention(
    q: torch.Tensor,
    sources: Sequence[PagedSource],
    scale: float | None = None,
    summary: GlobalSummary | None = None,
    softcap: float | None = None,
    extra: Sequence[AttentionPartial] = (),
) -> tuple[AttentionPartial, list[torch.Tensor]]:
    """Attention over blocks spread across tiers (full precision, INT8, INT4, FP8) in one call.

    Each source is one vectorised gather + matmul; the partials are merged by log-sum-exp, so the
    loop is over tiers (at most a handful), never over blocks. ``extra`` partials (e.g. causal
    attention within the current chunk) join the merge. Returns the merged fp32 partial
    (``[B, Hq, Q, D]``) and, per source, the normalised attention mass of each listed block
    ``[B, Hkv, M]`` (summed over the group's query heads and the queries).
    """
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    partials: list[AttentionPartial] = []
    masses: list[torch.Tensor] = []
    for source in sources:
        partial, mass = paged_attention_partial(
            q, source.k_pages, source.v_pages, source.block_table, source.seq_lens, scale, softcap, True
        )
        partials.append(partial)
        masses.append(mass)
    partials, merged = merge_with_extras(q, partials, scale, summary, softcap, extra)
    return merged, [renormalised_mass(mass, partial, merged) for partial, mass in zip(partials, masses)]


def dense_attention_partial(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    causal: bool = True,
    softcap: float | None = None,
    return_probs: bool = False,
) -> tuple[AttentionPartial, torch.Tensor | None]:
    """Attention of ``q`` ``[B, Hq, Q, D]`` over ``k``/``v`` ``[B, Hkv, T, D]`` (GQA), with LSE.

    ``causal`` aligns the last query with the last key (query ``i`` sees keys ``<= i + T - Q``), the
    layout of a prefill chunk whose own tokens end the key sequence. With ``return_probs`` also
    returns the probabilities ``[B, Hkv, G, Q, T]`` normalised within this partial.
    """
    qg, _ = _group_queries(q, k.shape[1])
    n_queries, n_keys = qg.shape[3], k.shape[2]
    if causal:
        q_pos = torch.arange(n_queries, device=q.device).view(-1, 1) + (n_keys - n_queries)
        valid = torch.arange(n_keys, device=q.device).view(1, -1) <= q_pos  # [Q, T]
        valid = valid.view(1, 1, n_queries, n_keys).expand(k.shape[0], k.shape[1], n_queries, n_keys)
    else:
        valid = torch.ones(k.shape[0], k.shape[1], n_keys, dtype=torch.bool, device=q.device)
    return _attend(qg, k, v, valid, scale, softcap, return_probs)


# --------------------------------------------------------------------------------------------------
# Quest-style block scores and top-k selection
# --------------------------------------------------------------------------------------------------


def block_key_bounds(k_pages: torch.Tensor, fill: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Element-wise min and max key of each physical block: ``[P, H, D]`` each.

    ``fill`` ``[P]`` gives the valid token count of each block (unfilled slots are ignored; an empty
    block gets ``+inf``/``-inf`` bounds).
    """
    keys = k_pages.float()
    if fill is None:
        return keys.amin(dim=1), keys.amax(dim=1)
    valid = torch.arange(keys.shape[1], device=keys.device).view(1, -1) < fill.to(keys.device).view(-1, 1)
    valid = valid.view(*valid.shape, 1, 1)
    kmin = keys.masked_fill(~valid, math.inf).amin(dim=1)
    kmax = keys.masked_fill(~valid, -math.inf).amax(dim=1)
    return kmin, kmax


def quest_scores(
    q: torch.Tensor,
    kmin: torch.Tensor,
    kmax: torch.Tensor,
    block_table: torch.Tensor,
) -> torch.Tensor:
    """Upper bound of ``q . k`` over each listed block: ``sum_d max(q_d * kmin_d, q_d * kmax_d)``.

    ``kmin``/``kmax`` are per physical block ``[P, Hkv, D]``. For GQA the bound is the maximum over
    the query heads of the group (and over the queries when ``q`` has a query axis), so it bounds
    every head that reads the KV head. Returns ``[B, Hkv, M]`` with ``-inf`` on padding.
    """
    qg, _ = _group_queries(q, block_table.shape[1])  # [B, Hkv, G, Q, D]
    lo = gather_pages(kmin.unsqueeze(1), block_table).squeeze(3).float()  # [B, Hkv, M, D]
    hi = gather_pages(kmax.unsqueeze(1), block_table).squeeze(3).float()
    if bool(torch.isfinite(lo).all()) and bool(torch.isfinite(hi).all()):
        # With kmin <= kmax, max(q_d kmin_d, q_d kmax_d) = max(q_d, 0) kmax_d + min(q_d, 0) kmin_d: two
        # matmuls instead of a [.., G, Q, M, D] temporary.
        flat = qg.reshape(qg.shape[0], qg.shape[1], -1, qg.shape[-1])  # [B, Hkv, G*Q, D]
        bound = torch.matmul(flat.clamp(min=0), hi.transpose(-1, -2)) + torch.matmul(flat.clamp(max=0), lo.transpose(-1, -2))
        bound = bound.amax(dim=2)
    else:  # empty blocks have infinite bounds: keep the elementwise form (0 * inf must not appear)
        q_exp = qg.unsqueeze(4)  # [B, Hkv, G, Q, 1, D]
        bound = torch.maximum(q_exp * lo[:, :, None, None], q_exp * hi[:, :, None, None]).sum(-1)  # [B,Hkv,G,Q,M]
        bound = bound.amax(dim=(2, 3))
    return bound.masked_fill(block_table < 0, -math.inf)


def select_top_k_blocks(
    scores: torch.Tensor,
    block_table: torch.Tensor,
    k: int,
    always: torch.Tensor | None = None,
) -> torch.Tensor:
    """Keep the ``k`` best-scoring listed blocks per (batch, head), in their original (logical) order.

    ``always`` ``[B, Hkv, M]`` (bool) marks blocks that must be kept (attention sinks, the recent
    window, the partially filled tail); they count towards ``k`` but are never displaced. Returns a
    ``[B, Hkv, min(k, M)]`` block table padded with -1.
    """
    n_listed = block_table.shape[-1]
    k = min(k, n_listed)
    if k == n_listed:
        return block_table
    ranked = scores.float().masked_fill(block_table < 0, -math.inf)
    if always is not None:
        ranked = torch.where(always & (block_table >= 0), torch.full_like(ranked, math.inf), ranked)
    top = ranked.topk(k, dim=-1)
    chosen = top.indices.sort(dim=-1).values
    picked = torch.gather(block_table, -1, chosen)
    kept_score = torch.gather(ranked, -1, chosen)
    return picked.masked_fill(kept_score == -math.inf, -1)


def compact_block_table(block_table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Move the -1 padding of each row to the end, keeping order; returns (table, count per row)."""
    present = block_table >= 0
    order = torch.sort((~present).to(torch.int8), dim=-1, stable=True).indices
    return torch.gather(block_table, -1, order), present.sum(-1)


__all__ = [
    "AttentionPartial",
    "FP8_DTYPE",
    "FP8_MAX",
    "GlobalSummary",
    "PagedSource",
    "QuantKind",
    "QuantizedTensor",
    "block_key_bounds",
    "compact_block_table",
    "dense_attention_partial",
    "dequantize",
    "element_step",
    "gather_kv",
    "gather_pages",
    "gather_quantized_pages",
    "merge_partials",
    "mixed_sparse_attention",
    "outlier_index_for",
    "codes_per_byte",
    "pack_codes",
    "pack_int4",
    "paged_attention_partial",
    "quantize",
    "quantize_keys",
    "quantize_values",
    "quest_scores",
    "renormalised_mass",
    "select_outlier_channels",
    "select_top_k_blocks",
    "sparse_decode_attention",
    "summary_partial",
    "unpack_codes",
    "unpack_int4",
]
