"""Decode attention: dense SDPA over the full bf16 cache vs minutia's sparse + quantized decode.

One decode step of one attention layer (batch 1, one new query token), side by side:

* **dense** — ``torch.nn.functional.scaled_dot_product_attention`` over the whole bf16 K/V cache.
  GQA is expressed by grouping the query heads of a KV head as that head's queries
  (``q [1, H_kv, G, D]`` against ``k/v [1, H_kv, T, D]``), so every KV byte is read once; this is the
  fastest dense form on CPU (``enable_gqa=True`` expands K/V and is several times slower there).
* **minutia** — the KV store's layout: 64-token pages, a hot tier (bf16: the first block as
  attention sink + the last 256 tokens) and a warm tier (INT8, INT4 or INT2, KIVI group scales of 32, fp16
  scale/zero points) holding every other block. At an active fraction ``f`` the step reads
  ``ceil(f * blocks)`` blocks per KV head: the hot ones plus the warm blocks with the best Quest bound
  for the query (selection timed separately: it reads the per-block key min/max; ``select`` is the
  dispatch path, the fused C++ Quest scores + top-k on CPU, ``select ref`` the torch reference). Two columns:
  ``reference`` = ``kernels.reference.mixed_sparse_attention`` (plain torch ops), and ``fused`` =
  ``kernels.dispatch.mixed_sparse_attention`` — the fused C++ kernel (``kernels/cpu_decode.py``)
  on CPU, the Triton kernel (both tiers in one launch) with ``--device cuda``. Speedup, GB/s and
  ``x limit`` are those of the fused path.

Reported per row: time per decode step per layer (best of ``--repeats``; the median is in the JSON),
bytes the step reads, achieved GB/s, and the physical limit: bytes / the machine's memory read
bandwidth, measured in the same run (best of several sums over a large buffer).

    python bench/decode_attention.py --out bench/out/decode_attention            # CPU
    python bench/decode_attention.py --device cuda --out "$OUT/decode_attention"     # GPU

Writes ``results.md``, ``results.json`` and ``results.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernels import dispatch  # noqa: E402
from kernels import reference as ref  # noqa: E402
from kvstore.blocks import HEAD_MAJOR, with_layout  # noqa: E402

MODELS = {
    # name: (query heads, KV heads, head dim)
    "llama3-8b": (32, 8, 128),
    "gemma3-270m-global": (4, 1, 256),
}
BLOCK = 64
GROUP = 32
SINK_BLOCKS = 1
RECENT_TOKENS = 256
CPU_TARGET = {"context": 32768, "fraction": 0.125, "warm": "int4", "speedup": 6.0, "limit_ratio": 2.0}
GPU_TARGET = {"hbm_share": 0.70, "speedup": 5.0, "min_context": 32768, "fraction": 0.125}


@dataclass
class Row:
    model: str
    context: int
    warm: str
    fraction: float
    blocks_read: int
    dense_ms: float
    dense_median_ms: float
    dense_bytes: int
    minutia_ms: float  # the fused path (dispatch)
    minutia_median_ms: float
    minutia_cpu_ms: float | None
    reference_ms: float | None
    reference_median_ms: float | None
    minutia_bytes: int
    select_ms: float | None  # the dispatch path (fused C++ Quest scores + top-k on CPU)
    select_bytes: int
    speedup: float
    gbps: float
    limit_ms: float
    limit_ratio: float
    max_abs_err_vs_dense: float | None = None
    max_abs_err_fused_vs_reference: float | None = None
    select_reference_ms: float | None = None  # kernels.reference quest_scores + select_top_k_blocks
    select_matches_reference: bool | None = None  # same kept blocks (ties aside) as the reference
    # --cuda-graph: each step captured once as a CUDA graph and replayed (no host launch overhead)
    graph_ms: float | None = None  # the decode step (select not included), as minutia_ms
    graph_select_ms: float | None = None  # selection + decode in one graph
    dense_graph_ms: float | None = None
    graph_error: str | None = None  # why capture failed (the eager figures stand)
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# Timing and bandwidth
# --------------------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_fn(fn, device: torch.device, repeats: int, warmup: int = 2) -> tuple[float, float]:
    """(best, median) wall seconds per call."""
    return time_fn_cpu(fn, device, repeats, warmup)[:2]


def time_fn_cpu(fn, device: torch.device, repeats: int, warmup: int = 2) -> tuple[float, float, float | None]:
    """(best wall, median wall, best process CPU) seconds per call; CPU time only on CPU devices.

    On a shared machine the CPU time (all threads of this process) shows the work a call costs
    when other processes take turns on the cores; the wall time is what the caller waits."""
    for _ in range(warmup):
        fn()
    _sync(device)
    samples = []
    if device.type == "cuda":
        # Many back-to-back calls per sample: one decode step is microseconds on a GPU.
        inner = 20
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / inner)
        return min(samples), statistics.median(samples), None
    cpu = []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        samples.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(samples), statistics.median(samples), min(cpu)


def _first_tensor(result) -> torch.Tensor:
    """The output tensor of a step (a tensor, or the merged partial's ``out`` of a tuple)."""
    while isinstance(result, (tuple, list)):
        result = result[0]
    return result if isinstance(result, torch.Tensor) else result.out


def time_graph(fn, repeats: int, inner: int = 20) -> tuple[float, float, float]:
    """(best, median) seconds per replay of ``fn`` captured once as a CUDA graph, and the max abs
    difference of the replayed output from an eager call. Why: one decode step of one layer is a few
    kernel launches of microseconds each, so eager timing measures the host issuing them; a decode loop
    captured whole (as gpt-fast and vLLM run theirs) pays the GPU time only, which this shows."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream: compiles, allocator pools
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fn()
    graph.replay()
    torch.cuda.synchronize()
    err = (_first_tensor(captured).float() - _first_tensor(fn()).float()).abs().max().item()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / inner)
    return min(samples), statistics.median(samples), err


def measure_read_bandwidth(device: torch.device, mbytes: int = 1024, repeats: int = 7) -> float:
    """Memory read bandwidth in bytes/s: best of ``repeats`` full sums over an fp32 buffer."""
    n = mbytes * 1024 * 1024 // 4
    buf = torch.ones(n, dtype=torch.float32, device=device)
    best, _ = time_fn(lambda: buf.sum(), device, repeats, warmup=1)
    del buf
    return n * 4 / best


# --------------------------------------------------------------------------------------------------
# The cache
# --------------------------------------------------------------------------------------------------


def nbytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def quantize_chunked(pages: torch.Tensor, kind: str, is_key: bool, device: torch.device) -> ref.QuantizedTensor:
    """Quantize a page pool ``[P, 64, H, D]`` in chunks (bounded temporaries), KIVI layout; value
    scales/zeros head-major, as the KV store's pools hold them (``kvstore.blocks.HEAD_MAJOR``)."""
    parts = []
    step = max(1, (1 << 24) // max(1, pages[0].numel()))
    for start in range(0, pages.shape[0], step):
        chunk = pages[start : start + step].to(device)
        if is_key:
            parts.append(dispatch.quantize_keys(chunk, kind, GROUP, token_axis=1, param_dtype=torch.float16))
        else:
            parts.append(dispatch.quantize_values(chunk, kind, GROUP, param_dtype=torch.float16))
    first = parts[0]
    layout = None if is_key else HEAD_MAJOR
    return ref.QuantizedTensor(
        data=torch.cat([p.data.view(torch.uint8) for p in parts]).view(first.data.dtype),
        scale=with_layout(torch.cat([p.scale for p in parts]), layout),
        zero=None if first.zero is None else with_layout(torch.cat([p.zero for p in parts]), layout),
        kind=first.kind,
        axis=first.axis,
        group_size=first.group_size,
        shape=(pages.shape[0], *first.shape[1:]),
        dtype=first.dtype,
    )


def per_block_head_bytes(source: torch.Tensor | ref.QuantizedTensor) -> float:
    """Bytes one (block, KV head) slice of a page pool occupies (codes + scales + zeros + outliers)."""
    if isinstance(source, ref.QuantizedTensor):
        total = nbytes(source.data) + nbytes(source.scale) + nbytes(source.zero) + nbytes(source.outlier_values)
        n_pages, _, n_heads, _ = source.shape
    else:
        total = nbytes(source)
        n_pages, _, n_heads, _ = source.shape
    return total / (n_pages * n_heads)


@dataclass
class Cache:
    q: torch.Tensor  # [1, Hq, D] bf16
    k_dense: torch.Tensor  # [1, Hkv, T, D] bf16
    v_dense: torch.Tensor
    hot_k: torch.Tensor  # [n_hot, 64, Hkv, D] bf16 (hot pool)
    hot_v: torch.Tensor
    hot_table: torch.Tensor  # [1, Hkv, n_hot]
    warm_ids: torch.Tensor  # logical block ids of the warm blocks, [n_warm]
    warm_slots: torch.Tensor  # physical slot of each warm block in the warm pools, [n_warm]
    warm_pages_k: torch.Tensor  # [n_warm, 64, Hkv, D] bf16 (to quantize)
    warm_pages_v: torch.Tensor
    kmin: torch.Tensor  # [n_warm_slots, Hkv, D] bf16 Quest bounds per physical warm slot
    kmax: torch.Tensor


def build_cache(model: str, context: int, device: torch.device, seed: int = 0) -> Cache:
    n_q, n_kv, dim = MODELS[model]
    gen = torch.Generator().manual_seed(seed)
    n_blocks = context // BLOCK
    k = torch.randn(1, n_kv, context, dim, generator=gen, dtype=torch.float32).to(torch.bfloat16)
    v = torch.randn(1, n_kv, context, dim, generator=gen, dtype=torch.float32).to(torch.bfloat16)
    q = torch.randn(1, n_q, dim, generator=gen, dtype=torch.float32).to(torch.bfloat16)
    recent = RECENT_TOKENS // BLOCK
    hot_ids = list(range(SINK_BLOCKS)) + list(range(n_blocks - recent, n_blocks))
    warm_ids = [b for b in range(n_blocks) if b not in set(hot_ids)]
    pages_k = k[0].view(n_kv, n_blocks, BLOCK, dim).permute(1, 2, 0, 3)  # [n_blocks, 64, Hkv, D]
    pages_v = v[0].view(n_kv, n_blocks, BLOCK, dim).permute(1, 2, 0, 3)
    hot_k = pages_k[hot_ids].contiguous().to(device)
    hot_v = pages_v[hot_ids].contiguous().to(device)
    hot_table = torch.arange(len(hot_ids)).view(1, 1, -1).expand(1, n_kv, -1).contiguous()
    # Warm blocks live at shuffled physical slots of their pool (as after allocation / compaction).
    slots = torch.randperm(len(warm_ids), generator=gen)
    warm_k = torch.empty(len(warm_ids), BLOCK, n_kv, dim, dtype=torch.bfloat16)
    warm_v = torch.empty_like(warm_k)
    warm_k[slots] = pages_k[warm_ids]
    warm_v[slots] = pages_v[warm_ids]
    kmin, kmax = ref.block_key_bounds(warm_k)
    return Cache(
        q=q.to(device),
        k_dense=k.to(device),
        v_dense=v.to(device),
        hot_k=hot_k,
        hot_v=hot_v,
        hot_table=hot_table.to(device),
        warm_ids=torch.tensor(warm_ids),
        warm_slots=slots,
        warm_pages_k=warm_k,
        warm_pages_v=warm_v,
        kmin=kmin.to(torch.bfloat16).to(device),
        kmax=kmax.to(torch.bfloat16).to(device),
    )


# --------------------------------------------------------------------------------------------------
# One configuration
# --------------------------------------------------------------------------------------------------


def dense_step(cache: Cache, n_kv: int, groups: int):
    dim = cache.q.shape[-1]
    qg = cache.q.view(1, n_kv, groups, dim)

    def step():
        return torch.nn.functional.scaled_dot_product_attention(qg, cache.k_dense, cache.v_dense)

    return step


def run_model(model: str, context: int, args, device: torch.device, bandwidth: float) -> list[Row]:
    n_q, n_kv, dim = MODELS[model]
    groups = n_q // n_kv
    cache = build_cache(model, context, device)
    n_blocks = context // BLOCK
    n_hot = cache.hot_table.shape[-1]
    n_warm = len(cache.warm_ids)
    scale = dim**-0.5

    dense = dense_step(cache, n_kv, groups)
    dense_best, dense_median = time_fn(dense, device, args.repeats)
    dense_graph = dense_graph_error = None
    if args.cuda_graph:
        try:
            dense_graph = time_graph(dense, args.repeats)[0]
        except Exception as exc:  # report it on the rows; the eager figures stand
            dense_graph_error = f"dense: {type(exc).__name__}: {str(exc)[:200]}"
    dense_out = dense().reshape(1, n_q, dim).float()
    dense_bytes = nbytes(cache.k_dense) + nbytes(cache.v_dense)
    hot_source = ref.PagedSource(
        cache.hot_k, cache.hot_v, cache.hot_table, torch.full((1, n_kv), n_hot * BLOCK, device=device)
    )
    hot_bytes = n_hot * n_kv * (per_block_head_bytes(cache.hot_k) + per_block_head_bytes(cache.hot_v))

    rows = []
    for warm in args.warm:
        kq = quantize_chunked(cache.warm_pages_k, warm, True, device)
        vq = quantize_chunked(cache.warm_pages_v, warm, False, device)
        warm_bhb = per_block_head_bytes(kq) + per_block_head_bytes(vq)
        # All warm blocks in logical order, as physical slots: [1, Hkv, n_warm].
        order = torch.argsort(cache.warm_ids)
        all_warm = cache.warm_slots[order].view(1, 1, -1).expand(1, n_kv, -1).contiguous().to(device)
        for fraction in args.fractions:
            n_read = max(n_hot, math.ceil(fraction * n_blocks))
            k_warm = min(n_warm, n_read - n_hot)
            select_ms = select_ref_ms = select_same = None
            select_bytes = 0
            if k_warm < n_warm:
                def select(k_warm=k_warm):
                    return dispatch.quest_top_k(cache.q, cache.kmin, cache.kmax, all_warm, k_warm)

                def select_ref(k_warm=k_warm):
                    scores = ref.quest_scores(cache.q, cache.kmin, cache.kmax, all_warm)
                    return ref.select_top_k_blocks(scores, all_warm, k_warm)

                best, _ = time_fn(select, device, args.repeats)
                select_ms = best * 1e3
                select_bytes = nbytes(cache.kmin) + nbytes(cache.kmax)
                warm_table = select()
                select_ref_ms = time_fn(select_ref, device, args.repeats)[0] * 1e3  # cheap: timed even with --skip-reference
                expected = select_ref()
                select_same = bool(torch.equal(warm_table.sort(-1).values, expected.sort(-1).values))
            else:
                warm_table = all_warm
            warm_source = ref.PagedSource(
                kq, vq, warm_table, torch.full((1, n_kv), warm_table.shape[-1] * BLOCK, device=device)
            )
            sources = [hot_source, warm_source]

            def step(sources=sources):
                return dispatch.mixed_sparse_attention(cache.q, sources, scale)

            def ref_step(sources=sources):
                return ref.mixed_sparse_attention(cache.q, sources, scale)

            best, median, cpu = time_fn_cpu(step, device, args.repeats)
            ref_best = ref_median = ref_err = None
            if not args.skip_reference:
                ref_best, ref_median = time_fn(ref_step, device, args.repeats)
                ref_err = (step()[0].out - ref_step()[0].out).abs().max().item()
            graph = {}
            if args.cuda_graph and dense_graph is None:
                graph["graph_error"] = dense_graph_error
            elif args.cuda_graph:
                try:
                    graph["graph_ms"] = time_graph(step, args.repeats)[0] * 1e3
                    if k_warm < n_warm:
                        def select_step(k_warm=k_warm, lens=warm_source.seq_lens):
                            table = dispatch.quest_top_k(cache.q, cache.kmin, cache.kmax, all_warm, k_warm)
                            return dispatch.mixed_sparse_attention(
                                cache.q, [hot_source, ref.PagedSource(kq, vq, table, lens)], scale)
                        graph["graph_select_ms"] = time_graph(select_step, args.repeats)[0] * 1e3
                except Exception as exc:  # report and keep the eager figures
                    graph["graph_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            merged, _ = step()
            err = None
            if k_warm == n_warm:
                err = (merged.out.reshape(1, n_q, dim) - dense_out).abs().max().item()
            read = int(round(hot_bytes + warm_table.shape[-1] * n_kv * warm_bhb))
            limit = read / bandwidth
            rows.append(
                Row(
                    model=model,
                    context=context,
                    warm=warm,
                    fraction=fraction,
                    blocks_read=n_hot + warm_table.shape[-1],
                    dense_ms=dense_best * 1e3,
                    dense_median_ms=dense_median * 1e3,
                    dense_bytes=dense_bytes,
                    minutia_ms=best * 1e3,
                    minutia_median_ms=median * 1e3,
                    minutia_cpu_ms=None if cpu is None else cpu * 1e3,
                    reference_ms=None if ref_best is None else ref_best * 1e3,
                    reference_median_ms=None if ref_median is None else ref_median * 1e3,
                    minutia_bytes=read,
                    select_ms=select_ms,
                    select_bytes=select_bytes,
                    speedup=dense_best / best,
                    gbps=read / best / 1e9,
                    limit_ms=limit * 1e3,
                    limit_ratio=best / limit,
                    max_abs_err_vs_dense=err,
                    max_abs_err_fused_vs_reference=ref_err,
                    select_reference_ms=select_ref_ms,
                    select_matches_reference=select_same,
                    dense_graph_ms=None if dense_graph is None else dense_graph * 1e3,
                    **graph,
                )
            )
            print(_row_line(rows[-1]), flush=True)
        del kq, vq
    return rows


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def _frac(f: float) -> str:
    return "1" if f == 1 else f"1/{round(1 / f)}"


def _ctx(n: int) -> str:
    return f"{n // 1024}K"


def _row_line(r: Row) -> str:
    sel = f"{r.select_ms:7.3f}" if r.select_ms is not None else "      -"
    sel += f" (ref {r.select_reference_ms:.2f})" if r.select_reference_ms is not None else ""
    refp = f"{r.reference_ms:7.2f}" if r.reference_ms is not None else "      -"
    return (
        f"{r.model:20s} {_ctx(r.context):>5s} {r.warm:5s} {_frac(r.fraction):>4s} "
        f"dense {r.dense_ms:8.2f} ms | reference {refp} ms | fused {r.minutia_ms:7.3f} ms (x{r.speedup:5.1f}) "
        f"select {sel} ms{'' if r.select_matches_reference in (None, True) else ' (DIFFERS from reference)'} | "
        f"{r.minutia_bytes / 1e6:7.2f} MB {r.gbps:6.2f} GB/s limit {r.limit_ms:6.3f} ms ratio {r.limit_ratio:5.2f}"
        + (f" | graphs: dense {r.dense_graph_ms:.3f} step {r.graph_ms:.3f} select+step "
           f"{'-' if r.graph_select_ms is None else f'{r.graph_select_ms:.3f}'} ms" if r.graph_ms is not None else "")
        + (f" | graph capture failed: {r.graph_error}" if r.graph_error else "")
    )


def markdown(rows: list[Row], meta: dict) -> str:
    lines = [
        f"# Decode attention: dense SDPA vs minutia sparse + quantized ({meta['device_kind']})",
        "",
        f"- Command: `{meta['command']}`",
        f"- Machine: {meta['machine']}",
        f"- torch {meta['torch']}, threads {meta['threads']}, minutia backend: {meta['backend']}",
        f"- Measured memory read bandwidth: **{meta['bandwidth_gbps']:.1f} GB/s** ({meta['bandwidth_method']})",
        f"- Load average before / after: {meta['loadavg_before']} / {meta['loadavg_after']}",
        "- Times are per decode step per layer (batch 1), best wall time of the repeats (`fused CPU ms`: best CPU",
        "  time of this process, all threads); `reference` = the plain torch path (kernels/reference.py), `fused` =",
        f"  the dispatch path ({meta['backend']}); `limit` = bytes read / bandwidth;",
        "  `x limit` = fused time / limit (1.0 = running at the memory bandwidth). Dense reads the full bf16 K+V.",
        "  `select` = Quest scores over all warm blocks + top-k (reads the per-block key min/max), not in the times:",
        "  the dispatch path (fused C++ on CPU); `select ref` = the torch reference (kernels/reference.py).",
        "",
        "| model | context | warm | active | blocks/head | dense ms | reference ms | fused ms | fused CPU ms | speedup | select ms | select ref ms | MB read | GB/s | limit ms | x limit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sel = f"{r.select_ms:.3f}" if r.select_ms is not None else "-"
        if r.select_matches_reference is False:
            sel += " (differs)"
        sel_ref = f"{r.select_reference_ms:.3f}" if r.select_reference_ms is not None else "-"
        cpu = f"{r.minutia_cpu_ms:.3f}" if r.minutia_cpu_ms is not None else "-"
        refp = f"{r.reference_ms:.3f}" if r.reference_ms is not None else "-"
        lines.append(
            f"| {r.model} | {_ctx(r.context)} | {r.warm} | {_frac(r.fraction)} | {r.blocks_read} | {r.dense_ms:.2f} | "
            f"{refp} | {r.minutia_ms:.3f} | {cpu} | {r.speedup:.1f}x | {sel} | {sel_ref} | {r.minutia_bytes / 1e6:.2f} | {r.gbps:.2f} | "
            f"{r.limit_ms:.3f} | {r.limit_ratio:.2f} |"
        )
    graphed = [r for r in rows if r.graph_ms is not None or r.graph_error is not None]
    if graphed:
        lines += [
            "",
            "## Captured as CUDA graphs (--cuda-graph)",
            "",
            "Each step captured once and replayed (best of the repeats, 20 replays each): the GPU time without the",
            "host's launch overhead, as a decode loop captured whole runs. `select + step` = Quest selection and the",
            "decode in one graph; speed-ups against dense SDPA captured the same way.",
            "",
            "| model | context | warm | active | dense graph ms | step graph ms | select + step graph ms | speedup (step) | speedup (select + step) | GB/s (step) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in graphed:
            if r.graph_ms is None:
                lines.append(f"| {r.model} | {_ctx(r.context)} | {r.warm} | {_frac(r.fraction)} | capture failed: {r.graph_error} |")
                continue
            both = r.graph_select_ms
            lines.append(
                f"| {r.model} | {_ctx(r.context)} | {r.warm} | {_frac(r.fraction)} | {r.dense_graph_ms:.3f} | "
                f"{r.graph_ms:.3f} | {'-' if both is None else f'{both:.3f}'} | {r.dense_graph_ms / r.graph_ms:.1f}x | "
                f"{'-' if both is None else f'{r.dense_graph_ms / both:.1f}x'} | {r.minutia_bytes / r.graph_ms / 1e6:.1f} |"
            )
    lines += ["", "## Targets", ""]
    lines += [f"- {line}" for line in meta["targets"]]
    if meta.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in meta["notes"]]
    return "\n".join(lines) + "\n"


def target_lines(rows: list[Row], device: torch.device, bandwidth: float) -> list[str]:
    out = []
    if device.type == "cpu":
        t = CPU_TARGET
        for r in rows:
            if (r.context, r.fraction, r.warm) == (t["context"], t["fraction"], t["warm"]):
                ok_s = r.speedup >= t["speedup"]
                ok_l = r.limit_ratio <= t["limit_ratio"]
                out.append(
                    f"{r.model} {_ctx(r.context)} 1/8 INT4: speedup {r.speedup:.1f}x vs >= {t['speedup']}x: "
                    f"{'MET' if ok_s else 'MISSED'}; time / bandwidth limit {r.limit_ratio:.2f} vs <= {t['limit_ratio']}: "
                    f"{'MET' if ok_l else 'MISSED'}"
                )
        if not out:
            out.append("the target configuration (32K, 1/8, INT4) was not in this run")
    else:
        t = GPU_TARGET
        for r in rows:
            share = r.gbps * 1e9 / bandwidth
            line = f"{r.model} {_ctx(r.context)} {r.warm} {_frac(r.fraction)}: {share:.0%} of measured HBM bandwidth"
            if r.fraction == t["fraction"] and r.context >= t["min_context"]:
                line += f", speedup {r.speedup:.1f}x (target >= {t['speedup']}x: {'MET' if r.speedup >= t['speedup'] else 'MISSED'})"
            line += f" (target >= {t['hbm_share']:.0%}: {'MET' if share >= t['hbm_share'] else 'MISSED'})"
            if r.graph_ms is not None:
                g_share = r.minutia_bytes / (r.graph_ms / 1e3) / bandwidth
                line += f"; as a CUDA graph {g_share:.0%} of HBM bandwidth"
                if r.fraction == t["fraction"] and r.context >= t["min_context"]:
                    g_speed = r.dense_graph_ms / (r.graph_select_ms or r.graph_ms)
                    line += (f", speedup with selection {g_speed:.1f}x "
                             f"({'MET' if g_speed >= t['speedup'] else 'MISSED'})")
            out.append(line)
    return out


def plot(rows: list[Row], path: Path, meta: dict) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # matplotlib missing: the table and JSON still exist
        print(f"no plot: {exc}")
        return
    models = sorted({r.model for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if r.model == model]
        contexts = sorted({r.context for r in mine})
        dense = [next(r.dense_ms for r in mine if r.context == c) for c in contexts]
        ax.plot(contexts, dense, "k-o", label="dense SDPA (bf16)")
        for warm, style in (("int8", "--"), ("int4", "-"), ("int2", "-."), ("fp8", ":")):
            for fraction in sorted({r.fraction for r in mine}, reverse=True):
                pts = [(r.context, r.minutia_ms) for r in mine if r.warm == warm and r.fraction == fraction]
                if pts:
                    ax.plot(*zip(*sorted(pts)), style, marker="s", label=f"fused {warm} active {_frac(fraction)}")
                pts = [(r.context, r.reference_ms) for r in mine if r.warm == warm and r.fraction == fraction and r.reference_ms]
                if pts and warm == "int4":
                    ax.plot(*zip(*sorted(pts)), ":", marker="x", alpha=0.6, label=f"reference {warm} active {_frac(fraction)}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(contexts, [_ctx(c) for c in contexts])
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("ms per decode step per layer")
        ax.set_title(f"{model} ({meta['device_kind']})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def machine_description(device: torch.device) -> tuple[str, str]:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{props.name} ({props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs)", "gpu"
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{model}, nproc {os.cpu_count()}{mem}", "cpu"


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def parse_contexts(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        if part:
            out.append(int(part[:-1]) * 1024 if part.endswith("K") else int(part))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--contexts", default="8K,32K,128K", help="comma list, e.g. 8K,32K")
    parser.add_argument("--models", default=",".join(MODELS), help="comma list of " + ", ".join(MODELS))
    parser.add_argument("--fractions", default="1,0.25,0.125")
    parser.add_argument("--warm", default="int8,int4,int2", help="warm-tier formats (int8, int4, int2, fp8)")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--threads", type=int, default=0, help="torch threads on CPU (default: nproc)")
    parser.add_argument("--bandwidth-mb", type=int, default=1024, help="buffer size of the bandwidth measurement")
    parser.add_argument("--out", default="bench/out/decode_attention")
    parser.add_argument("--skip-reference", action="store_true", help="do not time the plain torch reference path")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="CUDA: also time each step (and selection + step) captured as one CUDA graph")
    args = parser.parse_args(argv)
    args.fractions = [float(f) for f in args.fractions.split(",")]
    args.warm = [w.strip() for w in args.warm.split(",") if w.strip()]
    contexts = parse_contexts(args.contexts)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but CUDA is not available")
    if args.cuda_graph and device.type != "cuda":
        parser.error("--cuda-graph needs --device cuda")
    if device.type == "cpu":
        torch.set_num_threads(args.threads or os.cpu_count() or 1)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    machine, kind = machine_description(device)
    load_before = _loadavg()
    bandwidth = measure_read_bandwidth(device, args.bandwidth_mb)
    backend = dispatch.backend_for(device, decode=True)
    print(f"{machine}; read bandwidth {bandwidth / 1e9:.1f} GB/s; backend {backend}", flush=True)
    rows: list[Row] = []
    partial = out_dir / "results.partial.json"  # rows so far: what a run cut short by a time limit leaves
    with torch.inference_mode():
        for model in models:
            for context in contexts:
                rows.extend(run_model(model, context, args, device, bandwidth))
                partial.write_text(json.dumps({"rows": [asdict(r) for r in rows]}, indent=2))
    bandwidth_after = measure_read_bandwidth(device, args.bandwidth_mb)
    meta = {
        "command": " ".join(["python", "bench/decode_attention.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine,
        "device_kind": kind,
        "torch": torch.__version__,
        "threads": torch.get_num_threads() if device.type == "cpu" else "-",
        "backend": backend,
        "bandwidth_gbps": max(bandwidth, bandwidth_after) / 1e9,
        "bandwidth_method": f"best of 7 torch.sum over a {args.bandwidth_mb} MiB fp32 buffer, before and after the run "
        f"({bandwidth / 1e9:.1f} / {bandwidth_after / 1e9:.1f} GB/s)",
        "loadavg_before": load_before,
        "loadavg_after": _loadavg(),
        "notes": [
            "Random bf16 K/V/q; Quest selection on random keys is arbitrary but real (same work as on real keys).",
            "`max_abs_err_vs_dense` in the JSON (active fraction 1 only) checks the quantized path against dense SDPA;",
            "`max_abs_err_fused_vs_reference` checks the fused path against the reference on every row.",
        ],
    }
    bandwidth = max(bandwidth, bandwidth_after)
    for r in rows:  # ratios against the best bandwidth seen
        r.limit_ms = r.minutia_bytes / bandwidth * 1e3
        r.limit_ratio = r.minutia_ms / r.limit_ms
    meta["targets"] = target_lines(rows, device, bandwidth)
    (out_dir / "results.json").write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=2))
    partial.unlink(missing_ok=True)
    (out_dir / "results.md").write_text(markdown(rows, meta))
    plot(rows, out_dir / "results.png", meta)
    print(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
