"""Fused CPU decode attention: one C++ pass per (batch, KV head) over the listed paged blocks.

Same signatures and results as the :mod:`kernels.reference` namesakes, for the decode case (one
query token per sequence). The reference path spends its time turning codes into fp32 temporaries
and running small matmuls; here each listed block is read once, its codes (INT8, INT4 nibbles, INT2
crumbs, FP8 bytes) or bf16/fp16/fp32 rows become floats in registers, every query head of the GQA group is
dotted with them in the same pass, and an online softmax feeds the value accumulation, so memory
traffic is the bytes of the listed blocks. Mixed tiers (full precision + quantized pools) go in one
call, as one sequence of blocks.

The kernel (``kernels/csrc/cpu_decode.cpp``) is compiled at first use with
``torch.utils.cpp_extension.load`` (``-O3 -march=native -fopenmp``) into
``$TORCH_EXTENSIONS_DIR``, else ``~/.cache/minutia/torch_extensions`` (``$MINUTIA_HOME/torch_extensions``
when that cannot be written); a build is keyed by the source, the flags, torch and the CPU, so it
compiles once per machine and user. If the build fails, :func:`available` is False after one logged
warning and :mod:`kernels.dispatch` uses the reference.

``MINUTIA_CPU_DECODE`` picks the arithmetic (read at each call). ``fast`` (default): INT8/INT4/INT2
keys are dotted on VNNI with the query quantized to int8 per (head, token group) after the key scales
are folded in, INT4 values (and INT2 values for GQA groups of up to 4 heads, channel groups of 32 or
more, value dims that are multiples of 64) with bf16 weights on vdpbf16ps; the extra error (~1e-3 on
unit-scale data) is far below what the INT4/INT2 blocks themselves carry (~1.5e-2 for INT4, more for INT2) and at
the level of INT8's own. Other INT2 cases run the exact arithmetic in both modes.
``exact``: fp32 arithmetic throughout, within ~5e-6 of the reference. Full-precision and FP8 blocks
are exact in both modes.

Cases the kernel does not cover raise :class:`NotImplementedError` (dispatch then falls back to the
reference): several queries per sequence (prefill), head dims that are not multiples of 16, keys
not quantized along tokens or values not along channels, more than 64 outlier channels, INT4/INT2
group sizes that are not a whole number of packed bytes (multiples of 2 / 4 codes).

Per call, the Python side only reads pointers: the validated description of each K/V pool is kept
(``_OPERANDS``, weakly keyed on the pool's tensors and their storage addresses), queries are read in
their own dtype (fp32/bf16/fp16), and :func:`mixed_sparse_attention` gets the per-block mass already
summed over each group's heads from the kernel when no summary or extra partial is merged.

:func:`quest_scores` and :func:`quest_top_k` are the Quest block bounds and the top-k block selection
(:func:`kernels.reference.quest_scores` + :func:`kernels.reference.select_top_k_blocks`) in one C++
pass per (batch, KV head): no ``[B, Hkv, M, D]`` gathers or score tensor; ties between equal scores go
to the lower column (the reference's torch.topk leaves that unspecified).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import platform
import threading
import weakref
from pathlib import Path
from types import ModuleType
from typing import Sequence

import torch

from kernels import reference as ref
from kernels.reference import AttentionPartial, GlobalSummary, PagedSource, QuantizedTensor
from kernels.formats import CODECS

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parent / "csrc" / "cpu_decode.cpp"
CFLAGS = ["-O3", "-march=native", "-fopenmp", "-ffp-contract=fast"]
LDFLAGS = ["-fopenmp"]
MAX_OUTLIERS = 64

# Storage codes shared with the C++ side (enum Kind): full precision by dtype, the others from kernels.formats.
_FULL_KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_QUANT_KINDS = {f.name: f.cpu_code for f in CODECS}
_PARAM_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}

_lock = threading.Lock()
_state: dict[str, object] = {"module": None, "error": None}


# --------------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------------


def extension_dir() -> Path:
    """Where compiled builds are cached (created on demand). One folder per user, not per MINUTIA_HOME: a
    build is keyed by everything it depends on, and each new home used to pay a ~80 s compile on 2 cores.
    ``$MINUTIA_HOME/torch_extensions`` only when the user cache cannot be written."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    shared = Path(base) / "minutia" / "torch_extensions"
    try:
        shared.mkdir(parents=True, exist_ok=True)
        if os.access(shared, os.W_OK):
            return shared
    except OSError:
        pass
    if os.environ.get("MINUTIA_HOME"):
        return Path(os.environ["MINUTIA_HOME"]) / "torch_extensions"
    return shared


def _cpu_signature() -> str:
    """The CPU model and flags: -march=native code must not be reused on another CPU."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        wanted = [line for line in lines if line.startswith(("model name", "flags"))][:2]
        return "\n".join(wanted)
    except OSError:
        return platform.processor() or platform.machine()


def _build() -> ModuleType:
    # Importing cpp_extension on a machine without CUDA logs a warning about CUDA_HOME; this build is CPU only.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils.cpp_extension import load

    key = hashlib.sha256(
        b"\0".join([SOURCE.read_bytes(), " ".join(CFLAGS).encode(), torch.__version__.encode(), _cpu_signature().encode()])
    ).hexdigest()[:16]
    name = f"minutia_cpu_decode_{key}"
    folder = extension_dir() / name
    folder.mkdir(parents=True, exist_ok=True)
    return load(
        name=name,
        sources=[str(SOURCE)],
        extra_cflags=CFLAGS,
        extra_ldflags=LDFLAGS,
        build_directory=str(folder),
        verbose=False,
    )


def extension() -> ModuleType | None:
    """The compiled kernel module (built at first use), or None if the build failed (warned once)."""
    if _state["module"] is not None or _state["error"] is not None:
        return _state["module"]  # type: ignore[return-value]
    with _lock:
        if _state["module"] is None and _state["error"] is None:
            try:
                _state["module"] = _build()
            except Exception as exc:  # compiler, headers or ninja missing: the reference serves
                _state["error"] = exc
                log.warning("fused CPU decode kernel unavailable, using the torch reference: %s", str(exc).strip()[-2000:])
    return _state["module"]  # type: ignore[return-value]


def available() -> bool:
    """Whether the fused kernel is built and loaded (building it on the first call)."""
    return extension() is not None


def build_error() -> BaseException | None:
    """Why the build failed, if it did."""
    return _state["error"]  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------------


MODES = ("exact", "fast")


def mode() -> str:
    """``MINUTIA_CPU_DECODE`` (fast | exact), read at each call."""
    value = os.environ.get("MINUTIA_CPU_DECODE", "fast").strip().lower() or "fast"
    if value not in MODES:
        raise ValueError(f"MINUTIA_CPU_DECODE={value!r}; expected one of {MODES}")
    return value


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


def _operand(
    source: torch.Tensor | QuantizedTensor, n_kv: int, dim: int, is_key: bool, keep: list[torch.Tensor]
) -> tuple[list[int], int]:
    """The 13 integers describing one K or V storage to the kernel, and its block size."""
    if not isinstance(source, QuantizedTensor):
        if source.ndim != 4 or source.device.type != "cpu" or source.dtype not in _FULL_KINDS:
            raise NotImplementedError("full-precision pages must be [P, block_size, H, D] fp32/bf16/fp16 on the CPU")
        if source.shape[2] != n_kv or source.shape[3] != dim:
            raise NotImplementedError("pages disagree with the block table or queries on heads or head dim")
        pages = _contiguous(source)
        keep.append(pages)
        return [_FULL_KINDS[source.dtype], pages.data_ptr(), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], int(source.shape[1])
    if len(source.shape) != 4 or source.kind not in _QUANT_KINDS or source.axis != (1 if is_key else 3):
        raise NotImplementedError("the kernel reads keys quantized along tokens and values along channels")
    n_pages, block_size, heads, width = source.shape
    if heads != n_kv or width != dim or source.data.device.type != "cpu":
        raise NotImplementedError("quantized pages disagree with the block table or queries")
    group = source.group_size
    length = block_size if is_key else width
    per_byte = ref.codes_per_byte(source.kind)  # INT4: 2 codes per byte, INT2: 4
    if group <= 0 or length % group or group % per_byte:
        raise NotImplementedError("group size must divide the quantized axis (and be a multiple of 2 for INT4, 4 for INT2)")
    expected = [n_pages, block_size, heads, width]
    expected[1 if is_key else 3] //= per_byte
    data = source.data.view(torch.uint8) if source.data.dtype == ref.FP8_DTYPE else source.data
    if data.dtype != torch.uint8 or list(data.shape) != expected:
        raise NotImplementedError(f"unexpected code tensor {tuple(data.shape)} {data.dtype}")
    param_shape = [n_pages, block_size // group, heads, width] if is_key else [n_pages, block_size, heads, width // group]
    scale, zero = source.scale, None
    if scale.dtype not in _PARAM_DTYPES or list(scale.shape) != param_shape:
        raise NotImplementedError("unexpected scale tensor")
    if source.kind != "fp8":
        zero = source.zero
        if zero is None or zero.dtype != scale.dtype or list(zero.shape) != param_shape:
            raise NotImplementedError("unexpected zero-point tensor")
    # Value params are read through their strides (head-major pools: kvstore.blocks.HEAD_MAJOR) when
    # groups are contiguous and zero matches scale; anything else, and key params, as contiguous copies.
    strided = not is_key and scale.stride(3) == 1 and (zero is None or zero.stride() == scale.stride())
    if not strided:
        scale = _contiguous(scale)
        zero = None if zero is None else _contiguous(zero)
    data = _contiguous(data)
    keep.extend([data, scale] + ([zero] if zero is not None else []))
    oidx_ptr = oval_ptr = odtype = n_out = 0
    if source.outlier_idx is not None and source.outlier_values is not None:
        n_out = int(source.outlier_idx.shape[-1])
        rows = source.outlier_idx.reshape(-1, n_out)
        values = source.outlier_values
        if n_out > MAX_OUTLIERS or rows.shape[0] not in (1, n_kv) or values.dtype not in _PARAM_DTYPES:
            raise NotImplementedError("outlier channels must be per KV head (at most 64)")
        if list(values.shape) != [n_pages, block_size, heads, n_out]:
            raise NotImplementedError("unexpected outlier values")
        idx = rows.expand(n_kv, n_out).to(device="cpu", dtype=torch.int64).contiguous()
        values = _contiguous(values)
        keep.extend([idx, values])
        oidx_ptr, oval_ptr, odtype = idx.data_ptr(), values.data_ptr(), _PARAM_DTYPES[values.dtype]
    args = [
        _QUANT_KINDS[source.kind],
        data.data_ptr(),
        scale.data_ptr(),
        0 if zero is None else zero.data_ptr(),
        _PARAM_DTYPES[scale.dtype],
        group,
        oidx_ptr,
        oval_ptr,
        odtype,
        n_out,
        *scale.stride()[:3],
    ]
    return args, int(block_size)


# Validated operand descriptions, so a decode step does not re-check the same pools at every layer and
# token. A pool is the same when its tensors are the same objects (held weakly: a freed pool drops out)
# at the same storage address (catches in-place set_ / reallocating resize_) and the description's
# other inputs (format, axis, group size, logical shape, scale strides, heads, head dim) are equal. Only descriptions
# that needed no copies are kept; pools with outlier channels are checked at each call (callers
# rebuild their outlier index every step).
_OPERANDS: dict[tuple, tuple] = {}
_MAX_OPERANDS = 256


def _operand_cached(
    source: torch.Tensor | QuantizedTensor, n_kv: int, dim: int, is_key: bool, keep: list[torch.Tensor]
) -> tuple[list[int], int]:
    """:func:`_operand`, remembered per pool (see ``_OPERANDS``)."""
    if isinstance(source, QuantizedTensor):
        if source.outlier_idx is not None:  # rebuilt by callers at each step: not worth caching
            return _operand(source, n_kv, dim, is_key, keep)
        parts = (source.data, source.scale, source.zero)
        key = (id(parts[0]), id(parts[1]), id(parts[2]), source.kind, source.axis, source.group_size, tuple(source.shape),
               source.scale.stride(), n_kv, dim, is_key)
    else:
        parts = (source,)
        key = (id(source), n_kv, dim, is_key)
    hit = _OPERANDS.get(key)
    if hit is not None:
        for t, (ref_, ptr) in zip(parts, hit[0]):
            if t is None:
                if ref_ is not None:
                    break
            elif ref_ is None or ref_() is not t or t.data_ptr() != ptr:
                break
        else:
            return hit[1], hit[2]
    local: list[torch.Tensor] = []
    args, block_size = _operand(source, n_kv, dim, is_key, local)
    ptrs = {u.data_ptr() for u in parts if u is not None}
    if all(t.data_ptr() in ptrs for t in local):  # no contiguous copies were made
        if len(_OPERANDS) >= _MAX_OPERANDS:
            _OPERANDS.clear()
        marks = tuple((None, 0) if t is None else (weakref.ref(t), t.data_ptr()) for t in parts)
        _OPERANDS[key] = (marks, args, block_size)
    keep.extend(local)
    return args, block_size


def _empty_f32(*shape: int) -> torch.Tensor:
    # torch.empty without a dtype argument is ~0.7 us cheaper per call; the default dtype is fp32 unless changed.
    if torch.get_default_dtype() is torch.float32:
        return torch.empty(*shape)
    return torch.empty(*shape, dtype=torch.float32)


def _run(
    q: torch.Tensor,
    sources: Sequence[PagedSource],
    scale: float,
    softcap: float | None,
    want_mass: bool,
    mass_summed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, list[int]]:
    """One kernel call over all sources: out ``[B, Hq, 1, DV]`` (memory order ``[B, Hkv, G, DV]``),
    lse ``[B, Hq, 1]``, the per-block mass ``[B, Hkv, G, M_total]`` (``[B, Hkv, M_total]`` summed over
    the group's heads when ``mass_summed``) normalised within this call (or None) and the sources'
    column offsets."""
    if not q.is_cpu or not q.is_floating_point():
        raise NotImplementedError("the fused kernel runs on CPU tensors")
    if q.dtype not in _FULL_KINDS:
        q = q.float()
    if q.ndim == 4 and q.shape[2] != 1 or q.ndim not in (3, 4):
        raise NotImplementedError("the fused kernel covers decode (one query per sequence); prefill uses the reference")
    if not sources:
        raise NotImplementedError("no sources")
    module = _state["module"] or extension()
    if module is None:
        raise NotImplementedError("the fused CPU kernel did not build") from build_error()
    batch, n_q, dim = q.shape[0], q.shape[1], q.shape[-1]
    n_kv = sources[0].block_table.shape[1]
    if n_kv == 0 or n_q % n_kv:
        raise NotImplementedError("query heads must be a multiple of KV heads")
    groups = n_q // n_kv
    keep: list[torch.Tensor] = []
    args: list[list[int]] = []
    offsets = [0]
    dv = None
    for source in sources:
        table, seq = source.block_table, source.seq_lens
        if table.ndim != 3 or table.shape[0] != batch or table.shape[1] != n_kv or seq.shape != table.shape[:2]:
            raise NotImplementedError("block table must be [B, Hkv, M] and seq_lens [B, Hkv]")
        if not (table.is_cpu and seq.is_cpu):
            raise NotImplementedError("block tables must be on the CPU")
        v_dim = source.v_pages.shape[-1]
        dv = v_dim if dv is None else dv
        if v_dim != dv:
            raise NotImplementedError("all sources need the same value dim")
        k_args, k_bs = _operand_cached(source.k_pages, n_kv, dim, True, keep)
        v_args, v_bs = _operand_cached(source.v_pages, n_kv, v_dim, False, keep)
        if k_bs != v_bs:
            raise NotImplementedError("K and V block sizes differ")
        if table.dtype != torch.int64 or not table.is_contiguous():
            table = table.to(torch.int64).contiguous()
            keep.append(table)
        if seq.dtype != torch.int64 or not seq.is_contiguous():
            seq = seq.to(torch.int64).contiguous()
            keep.append(seq)
        width = table.shape[2]
        args.append([table.data_ptr(), seq.data_ptr(), width, k_bs, *k_args, *v_args])
        offsets.append(offsets[-1] + width)
    if dim % 16 or dv % 16:
        raise NotImplementedError("head dims must be multiples of 16")
    qc = _contiguous(q)  # [B, Hq, (1,) D]: the kernel reads fp32/bf16/fp16 rows
    empty = _empty_f32
    out = empty(batch, n_q, 1, dv)  # the kernel writes [B, Hkv, G, DV]: the same memory
    lse = empty(batch, n_q, 1)
    mass = None
    if want_mass:
        mass = empty(batch, n_kv, offsets[-1]) if mass_summed else empty(batch, n_kv, groups, offsets[-1])
    threads = torch.get_num_threads()
    splits = 1 if threads <= 1 else max(1, math.ceil(threads / max(1, batch * n_kv)))
    module.decode(
        qc.data_ptr(),
        out.data_ptr(),
        lse.data_ptr(),
        0 if mass is None else mass.data_ptr(),
        batch,
        n_kv,
        groups,
        dim,
        dv,
        float(scale),
        float(softcap) if softcap is not None else 0.0,
        splits,
        max(1, threads),
        args,
        mode() == "fast",
        _FULL_KINDS[q.dtype],
        mass_summed,
    )
    return out, lse, mass, offsets


# --------------------------------------------------------------------------------------------------
# The reference API (decode case)
# --------------------------------------------------------------------------------------------------


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
    """Fused version of :func:`kernels.reference.paged_attention_partial` (one query per sequence)."""
    out, lse, mass, _ = _run(q, [PagedSource(k_source, v_source, block_table, seq_lens)], scale, softcap, return_block_mass)
    partial = AttentionPartial(out=out, lse=lse)
    if mass is not None:
        batch, n_kv, groups, width = mass.shape
        mass = mass.view(batch, n_kv, groups, 1, width)
    return partial, mass


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
    """Fused version of :func:`kernels.reference.sparse_decode_attention`: ``(output, lse)``."""
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    partial, _ = paged_attention_partial(q, k_pages, v_pages, block_table, seq_lens, scale, softcap)
    return ref.finish_decode(q, partial, scale, summary, softcap)


def mixed_sparse_attention(
    q: torch.Tensor,
    sources: Sequence[PagedSource],
    scale: float | None = None,
    summary: GlobalSummary | None = None,
    softcap: float | None = None,
    extra: Sequence[AttentionPartial] = (),
) -> tuple[AttentionPartial, list[torch.Tensor]]:
    """Fused version of :func:`kernels.reference.mixed_sparse_attention`: every tier in one kernel call.

    Returns the merged fp32 partial ``[B, Hq, 1, D]`` and per source the attention mass of each
    listed block ``[B, Hkv, M]`` under the merged softmax (summed over the group's query heads).
    """
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    alone = summary is None and not extra  # the kernel's softmax is the final one: mass summed in C++
    out, lse, mass, offsets = _run(q, sources, scale, softcap, True, mass_summed=alone)
    partial = AttentionPartial(out=out, lse=lse)
    if alone:
        merged, total = partial, mass
    else:
        _, merged = ref.merge_with_extras(q, [partial], scale, summary, softcap, extra)
        batch, n_kv, groups, width = mass.shape
        total = ref.renormalised_mass(mass.view(batch, n_kv, groups, 1, width), partial, merged)
    if len(offsets) == 2:
        return merged, [total]
    return merged, [total[..., offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


# --------------------------------------------------------------------------------------------------
# Quest bounds and top-k selection
# --------------------------------------------------------------------------------------------------


def _quest_operands(q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, block_table: torch.Tensor):
    if not (q.is_cpu and kmin.is_cpu and kmax.is_cpu and block_table.is_cpu):
        raise NotImplementedError("the fused Quest kernel runs on CPU tensors")
    if block_table.ndim != 3 or kmin.ndim != 3 or kmin.shape != kmax.shape or q.ndim not in (3, 4):
        raise NotImplementedError("expected q [B, Hq, (Q,) D], kmin/kmax [P, Hkv, D], block_table [B, Hkv, M]")
    batch, n_kv, width = block_table.shape
    dim = q.shape[-1]
    if q.shape[0] != batch or kmin.shape[1] != n_kv or kmin.shape[2] != dim or n_kv == 0 or q.shape[1] % n_kv:
        raise NotImplementedError("q, bounds and block table disagree on batch, heads or head dim")
    if q.dtype not in _FULL_KINDS:
        q = q.float()
    if kmin.dtype not in _PARAM_DTYPES or kmax.dtype != kmin.dtype:
        kmin, kmax = kmin.float(), kmax.float()
    table = block_table
    if table.dtype != torch.int64 or not table.is_contiguous():
        table = table.to(torch.int64).contiguous()
    module = _state["module"] or extension()
    if module is None:
        raise NotImplementedError("the fused CPU kernel did not build") from build_error()
    n_queries = q.shape[2] if q.ndim == 4 else 1
    return module, _contiguous(q), _contiguous(kmin), _contiguous(kmax), table, batch, n_kv, width, dim, n_queries


def quest_scores(q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """Fused version of :func:`kernels.reference.quest_scores`: ``[B, Hkv, M]`` fp32, -inf on padding."""
    module, qc, lo, hi, table, batch, n_kv, width, dim, n_queries = _quest_operands(q, kmin, kmax, block_table)
    scores = _empty_f32(batch, n_kv, width)
    module.quest_select(
        qc.data_ptr(), _FULL_KINDS[qc.dtype], lo.data_ptr(), hi.data_ptr(), _PARAM_DTYPES[lo.dtype], table.data_ptr(),
        0, scores.data_ptr(), 0, batch, n_kv, q.shape[1] // n_kv, n_queries, dim, width, -1, max(1, torch.get_num_threads()),
    )  # fmt: skip
    return scores


def quest_top_k(
    q: torch.Tensor,
    kmin: torch.Tensor,
    kmax: torch.Tensor,
    block_table: torch.Tensor,
    k: int,
    always: torch.Tensor | None = None,
) -> torch.Tensor:
    """Quest scores and :func:`kernels.reference.select_top_k_blocks` in one pass per (batch, KV head),
    without the scores tensor: the ``[B, Hkv, min(k, M)]`` table of kept blocks (column order, -1 for
    picks that are padding). Ties go to the lower column (torch.topk leaves them unspecified)."""
    n_listed = block_table.shape[-1]
    k = min(int(k), n_listed)
    if k == n_listed:
        return block_table
    if k < 0:
        raise ValueError("k must be >= 0")
    module, qc, lo, hi, table, batch, n_kv, width, dim, n_queries = _quest_operands(q, kmin, kmax, block_table)
    always_ptr = 0
    if always is not None:
        if tuple(always.shape) != (batch, n_kv, width) or not always.is_cpu:
            raise NotImplementedError("always must be a [B, Hkv, M] mask on the CPU")
        always = _contiguous(always.to(torch.bool))
        always_ptr = always.data_ptr()
    out = torch.empty(batch, n_kv, k, dtype=torch.int64)
    module.quest_select(
        qc.data_ptr(), _FULL_KINDS[qc.dtype], lo.data_ptr(), hi.data_ptr(), _PARAM_DTYPES[lo.dtype], table.data_ptr(),
        always_ptr, 0, out.data_ptr(), batch, n_kv, q.shape[1] // n_kv, n_queries, dim, width, k,
        max(1, torch.get_num_threads()),
    )  # fmt: skip
    return out if block_table.dtype == torch.int64 else out.to(block_table.dtype)


__all__ = [
    "available",
    "build_error",
    "extension",
    "extension_dir",
    "mixed_sparse_attention",
    "paged_attention_partial",
    "quest_scores",
    "quest_top_k",
    "sparse_decode_attention",
]
