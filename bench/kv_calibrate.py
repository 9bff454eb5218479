#!/usr/bin/env python
"""Learn the KV codebooks (kvstore/quant/codebook.py) on real meeting speech: the tuning part of QMSum only.

    python bench/kv_calibrate.py [--limit 4] [--max-tokens 4096] [--dims 4] [--bits 8]
                                 [--out kvstore/quant/calibration/gemma-3-270m.safetensors]

Each tuning meeting (the same selection as bench/kv_quality.py: the meetings whose queries fit, longest first) is
prefilled into a full cache; every token's keys and values of the full-attention layers are the samples, and one
codebook per layer, keys and values apart, is learned from them. The file records what it was learned on; the
held-out part is never read, so bench/kv_formats.py --part held-out scores a codec on meetings it never saw.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import kv_quality as kq  # noqa: E402
from bench.qmsum_split import kv_part_of  # noqa: E402

DEFAULT_OUT = REPO / "kvstore" / "quant" / "calibration" / "gemma-3-270m.safetensors"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=kq.DEFAULT_DATA)
    ap.add_argument("--model", type=Path, default=kq.default_model_dir())
    ap.add_argument("--limit", type=int, default=4, help="tuning meetings to learn from")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--dims", type=int, default=4, help="channels per code (rotary pairs kept together)")
    ap.add_argument("--bits", type=int, default=8, help="bits per code (2**bits centroids)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if args.limit <= 0 or args.max_tokens <= 0:
        print("error: --limit and --max-tokens must be positive", file=sys.stderr)
        return 2
    if not (args.model / "config.json").is_file():
        print(f"error: model folder {args.model} not found (set --model or MINUTIA_HOME)", file=sys.stderr)
        return 2

    import torch
    from rich.console import Console
    from rich.progress import Progress

    from kvstore.quant.codebook import calibrate, rotary_groups, save_codebooks

    if not 1 <= args.bits <= 8:
        print("error: --bits must be 1..8 (one byte per code)", file=sys.stderr)
        return 2
    console = Console(stderr=True)
    started = time.time()
    tokenizer, model = kq.load_quietly(args.model, args.threads)
    try:
        rotary_groups(model.config.head_dim, args.dims)  # the model's heads, before any meeting is prefilled
    except ValueError as exc:
        print(f"error: --dims: {exc}", file=sys.stderr)
        return 2
    files = [f for f in sorted(args.data.glob("*.json")) if kv_part_of(f.name) == "tuning"]
    chosen = [meeting for meeting, _ in kq.rank_meetings(files, tokenizer, args.max_tokens)[: args.limit]]
    if not chosen:
        print(f"error: no tuning meeting in {args.data}", file=sys.stderr)
        return 2
    layers = kq.full_attention_layers(model)
    samples: dict[str, list] = {f"{i}.{kind}": [] for i in layers for kind in ("keys", "values")}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("prefilling the tuning meetings", total=len(chosen))
        for meeting in chosen:
            kq.encode(meeting, tokenizer, args.max_tokens)
            cache = kq.prepare_full(model, meeting.input_ids, None).cache
            for i in layers:
                for kind in ("keys", "values"):
                    tensor = getattr(cache.layers[i], kind)[0]  # [H, T, D]
                    samples[f"{i}.{kind}"].append(tensor.transpose(0, 1).float())  # [T, H, D]
            progress.advance(task)
        task = progress.add_task("learning the codebooks", total=len(samples))
        books = {}
        for name, parts in samples.items():
            books[name] = calibrate(torch.cat(parts), dims=args.dims, bits=args.bits)
            progress.advance(task)
    tokens = sum(int(m.input_ids.shape[1]) for m in chosen)
    about = {"model": args.model.name, "part": "tuning", "meetings": ",".join(m.name for m in chosen),
             "tokens": str(tokens), "dims": str(args.dims), "bits": str(args.bits),
             "layers": ",".join(str(i) for i in layers)}
    save_codebooks(args.out, books, about)
    console.print(f"[green]wrote[/] {args.out}: {len(books)} codebooks from {len(chosen)} tuning meetings "
                  f"({tokens} tokens) in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
