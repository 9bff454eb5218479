"""Where one GPU decode step's time goes: torch.profiler over the Triton decode path (issue 4).

At small active sets the Triton decode's wall time on an H200 is ~0.55 ms whatever it reads (docs/
benchmarks.md, GPU): this prints the host-side ops and device kernels of one call so the launch
overhead can be cut where it is. The ``decode_attention`` and ``quest_top_k`` rows are the two
halves of a step; ``_select_kernel`` in the CUDA table is the fused block selection (one launch).
Run on a CUDA machine: ``python bench/gpu_launch_profile.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import decode_attention as bench  # noqa: E402
from kernels import dispatch  # noqa: E402
from kernels import reference as ref  # noqa: E402


def main() -> int:
    device = torch.device("cuda")
    model, context, fraction = "llama3-8b", 32768, 0.125
    n_q, n_kv, dim = bench.MODELS[model]
    cache = bench.build_cache(model, context, device)
    kq = bench.quantize_chunked(cache.warm_pages_k, "int4", True, device)
    vq = bench.quantize_chunked(cache.warm_pages_v, "int4", False, device)
    order = torch.argsort(cache.warm_ids)
    all_warm = cache.warm_slots[order].view(1, 1, -1).expand(1, n_kv, -1).contiguous().to(device)
    n_hot = cache.hot_table.shape[-1]
    k_warm = int(fraction * context / bench.BLOCK) - n_hot
    table = dispatch.quest_top_k(cache.q, cache.kmin, cache.kmax, all_warm, k_warm)
    sources = [ref.PagedSource(cache.hot_k, cache.hot_v, cache.hot_table, torch.full((1, n_kv), n_hot * bench.BLOCK, device=device)),
               ref.PagedSource(kq, vq, table, torch.full((1, n_kv), table.shape[-1] * bench.BLOCK, device=device))]

    def step():
        return dispatch.mixed_sparse_attention(cache.q, sources, dim**-0.5)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(10):
            with torch.profiler.record_function("decode_attention"):
                step()
            # Block selection: one fused launch (kernels/triton_select.py _select_kernel) when the table
            # fits it, else Triton bounds + torch top-k (dispatch.quest_top_k's fallback).
            with torch.profiler.record_function("quest_top_k"):
                dispatch.quest_top_k(cache.q, cache.kmin, cache.kmax, all_warm, k_warm)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
