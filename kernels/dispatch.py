"""The one dispatch point of the KV kernels: Triton on CUDA, a fused C++ kernel for CPU decode, the
torch reference elsewhere.

Every function here has the signature of its :mod:`kernels.reference` namesake and returns the same
thing, so a caller can swap ``from kernels import reference`` for ``from kernels import dispatch``.
Names without a Triton kernel (packing helpers, merges, top-k selection, ...) are the reference's.

Which backend runs, per call, from the device of the main input tensor:

* ``MINUTIA_KERNELS=reference`` — always the reference.
* ``MINUTIA_KERNELS=triton`` — always Triton; on CPU this needs ``TRITON_INTERPRET=1`` (the Triton
  interpreter, for tests) and raises otherwise. Cases a kernel does not cover raise.
* ``MINUTIA_KERNELS=cpu`` — the fused CPU kernels (:mod:`kernels.cpu_decode`) for decode attention
  on CPU tensors (one query per sequence) and for Quest scores / top-k block selection; cases they do
  not cover raise, and so does a failed build. Ops without a CPU kernel (quantize, prefill attention)
  use the reference.
* ``MINUTIA_KERNELS=auto`` (default) — Triton for CUDA tensors (compute capability >= 8.0) and for
  CPU tensors under ``TRITON_INTERPRET=1``; on other CPU tensors the fused CPU kernels for decode
  attention and Quest selection (built at first use; if the build fails, one logged warning and the
  reference); the reference otherwise, and for any case a kernel does not cover
  (``NotImplementedError`` from a kernel wrapper falls back to the reference).

The environment is read at each call, so tests can switch it; ``TRITON_INTERPRET`` must be set
before Triton kernels are first imported (Triton reads it when the kernels are defined).
"""

from __future__ import annotations

import importlib
import os
from functools import lru_cache
from types import ModuleType
from typing import Any, Callable, Sequence

import torch

from kernels import reference
from kernels.reference import *  # noqa: F401,F403  (re-export the reference API unchanged)
from kernels.reference import AttentionPartial, GlobalSummary, PagedSource, QuantizedTensor

BACKENDS = ("auto", "reference", "triton", "cpu")


def requested_backend() -> str:
    """``MINUTIA_KERNELS`` (auto | reference | triton | cpu)."""
    mode = os.environ.get("MINUTIA_KERNELS", "auto").strip().lower() or "auto"
    if mode not in BACKENDS:
        raise ValueError(f"MINUTIA_KERNELS={mode!r}; expected one of {BACKENDS}")
    return mode


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@lru_cache(maxsize=None)
def _triton_module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"kernels.{name}")
    except Exception:  # triton missing or broken: the reference serves
        return None


@lru_cache(maxsize=None)
def _cuda_capable(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (8, 0)


_CPU_MODULE: list[ModuleType] = []


def _cpu_module() -> ModuleType:
    if not _CPU_MODULE:
        from kernels import cpu_decode

        _CPU_MODULE.append(cpu_decode)
    return _CPU_MODULE[0]


def backend_for(device: torch.device | str, decode: bool = False) -> str:
    """``"triton"``, ``"cpu"`` or ``"reference"``: the backend a call with inputs on ``device`` uses.

    ``decode`` asks about decode attention (one query per sequence) or Quest scores / top-k selection,
    the cases the fused CPU kernels cover; every other op on CPU tensors runs the reference (or Triton
    when interpreting).
    """
    if not isinstance(device, torch.device):
        device = torch.device(device)
    mode = requested_backend()
    if mode == "reference":
        return "reference"
    if mode == "cpu":
        if not decode:
            return "reference"
        if device.type != "cpu":
            raise RuntimeError("MINUTIA_KERNELS=cpu needs CPU tensors")
        return "cpu"
    if mode == "triton":
        if device.type == "cpu" and not _interpreting():
            raise RuntimeError("MINUTIA_KERNELS=triton on CPU needs TRITON_INTERPRET=1 (the Triton interpreter)")
        return "triton"
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        if _cuda_capable(index) and _triton_module("triton_decode") is not None:
            return "triton"
        return "reference"
    if device.type == "cpu" and _interpreting() and _triton_module("triton_decode") is not None:
        return "triton"
    if device.type == "cpu" and decode and _cpu_module().available():
        return "cpu"
    return "reference"


def _is_decode(q: torch.Tensor) -> bool:
    return q.ndim == 3 or (q.ndim == 4 and q.shape[2] == 1)


def _call_attention(name: str, q: torch.Tensor, *args: Any) -> Any:
    """Attention ops: the fused CPU kernel for CPU decode, else as :func:`_call` (Triton / reference)."""
    if backend_for(q.device, _is_decode(q)) != "cpu":
        return _call("triton_decode", name, q.device, q, *args)
    cpu = _cpu_module()
    if not cpu.available() and requested_backend() == "cpu":
        raise RuntimeError("MINUTIA_KERNELS=cpu but the fused CPU kernel did not build") from cpu.build_error()
    try:
        return getattr(cpu, name)(q, *args)
    except NotImplementedError:
        if requested_backend() == "cpu":
            raise
        return getattr(reference, name)(q, *args)


def _call(module: str, name: str, device: torch.device, *args: Any, **kwargs: Any) -> Any:
    """Run ``kernels.<module>.<name>`` when the backend is Triton, else the reference namesake."""
    backend = backend_for(device)
    ref_fn: Callable[..., Any] = getattr(reference, name)
    if backend == "reference":
        return ref_fn(*args, **kwargs)
    mod = _triton_module(module)
    if mod is None:
        raise RuntimeError("Triton kernels are not importable (is triton installed?)")
    try:
        return getattr(mod, name)(*args, **kwargs)
    except NotImplementedError:
        if requested_backend() == "triton":
            raise
        return ref_fn(*args, **kwargs)


# --------------------------------------------------------------------------------------------------
# Quantization
# --------------------------------------------------------------------------------------------------


def quantize(
    x: torch.Tensor,
    kind: reference.QuantKind,
    axis: int,
    group_size: int,
    outlier_idx: torch.Tensor | None = None,
    param_dtype: torch.dtype = torch.float32,
) -> QuantizedTensor:
    return _call("triton_quant", "quantize", x.device, x, kind, axis, group_size, outlier_idx, param_dtype)


def quantize_keys(
    k: torch.Tensor,
    kind: reference.QuantKind,
    group_size: int,
    token_axis: int,
    outlier_idx: torch.Tensor | None = None,
    param_dtype: torch.dtype = torch.float32,
) -> QuantizedTensor:
    return quantize(k, kind, token_axis, group_size, outlier_idx, param_dtype)


def quantize_values(
    v: torch.Tensor,
    kind: reference.QuantKind,
    group_size: int,
    outlier_idx: torch.Tensor | None = None,
    param_dtype: torch.dtype = torch.float32,
) -> QuantizedTensor:
    return quantize(v, kind, -1, group_size, outlier_idx, param_dtype)


# --------------------------------------------------------------------------------------------------
# Attention
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
    return _call_attention(
        "paged_attention_partial",
        q,
        k_source,
        v_source,
        block_table,
        seq_lens,
        scale,
        softcap,
        return_block_mass,
    )


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
    return _call_attention(
        "sparse_decode_attention",
        q,
        k_pages,
        v_pages,
        block_table,
        seq_lens,
        scale,
        summary,
        softcap,
    )


def mixed_sparse_attention(
    q: torch.Tensor,
    sources: Sequence[PagedSource],
    scale: float | None = None,
    summary: GlobalSummary | None = None,
    softcap: float | None = None,
    extra: Sequence[AttentionPartial] = (),
) -> tuple[AttentionPartial, list[torch.Tensor]]:
    return _call_attention("mixed_sparse_attention", q, sources, scale, summary, softcap, extra)


# --------------------------------------------------------------------------------------------------
# Quest block scores and selection
# --------------------------------------------------------------------------------------------------


def _call_cpu_select(name: str, *args: Any) -> Any:
    """The fused CPU Quest kernel (same backend choice as CPU decode attention), or None to fall back."""
    cpu = _cpu_module()
    if not cpu.available() and requested_backend() == "cpu":
        raise RuntimeError("MINUTIA_KERNELS=cpu but the fused CPU kernel did not build") from cpu.build_error()
    try:
        return getattr(cpu, name)(*args)
    except NotImplementedError:
        if requested_backend() == "cpu":
            raise
        return None


def quest_scores(q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    if q.device.type == "cpu" and backend_for(q.device, decode=True) == "cpu":
        scores = _call_cpu_select("quest_scores", q, kmin, kmax, block_table)
        if scores is not None:
            return scores
    return _call("triton_decode", "quest_scores", q.device, q, kmin, kmax, block_table)


def quest_top_k(
    q: torch.Tensor,
    kmin: torch.Tensor,
    kmax: torch.Tensor,
    block_table: torch.Tensor,
    k: int,
    always: torch.Tensor | None = None,
) -> torch.Tensor:
    """Quest scores then top-k selection: the ``[B, Hkv, min(k, M)]`` table of kept blocks.

    Fused, one pass per (batch, KV head), on the CPU backend (:func:`kernels.cpu_decode.quest_top_k`)
    and on Triton (:func:`kernels.triton_select.quest_top_k`: one launch instead of the bounds kernel
    plus torch top-k ops); both give ties between equal scores to the lower column, which torch.topk
    leaves unspecified. Shapes a fused kernel does not take (e.g. more than
    ``triton_select.MAX_BLOCKS`` columns) run the two-step path: bounds, then the reference top-k."""
    backend = backend_for(q.device, decode=q.device.type == "cpu")
    if backend == "cpu":
        table = _call_cpu_select("quest_top_k", q, kmin, kmax, block_table, k, always)
        if table is not None:
            return table
    elif backend == "triton":
        fused = _triton_module("triton_select")
        if fused is not None:
            try:
                return fused.quest_top_k(q, kmin, kmax, block_table, k, always)
            except NotImplementedError:
                pass  # the two-step path below (Triton bounds) takes it
    return reference.select_top_k_blocks(quest_scores(q, kmin, kmax, block_table), block_table, k, always)


__all__ = [*reference.__all__, "BACKENDS", "backend_for", "quest_top_k", "requested_backend"]
