#!/usr/bin/env python
"""Which half of the KV a low-bit format hurts: answer NLL with every settled token stored in one format.

    python bench/kv_formats.py [--part tuning|held-out] [--limit 4] [--max-tokens 4096]
                               [--pairs full:int2,int2:full,int2:int2,int4:int2,int4:int4]
                               [--codebooks kvstore/quant/calibration/gemma-3-270m.safetensors]

The same QMSum meetings and answer NLL as bench/kv_quality.py (its meeting selection, prompt and teacher-forced
gold answers), but no planner, budget or scorer: each meeting is prefilled once into a full cache, then for each
``KEY:VALUE`` pair of codecs (kernels.formats; ``full`` = left as is) every token of the full-attention layers
but the last ``--recent`` is quantized and read back with the library's quantizers (KIVI layout: keys per
channel along the tokens, values per token, groups of ``--group-size``; a key group stays inside one
``--block-size`` block, as in the cache), and the answers are scored again.
NLL recovery = mean full-cache NLL / mean NLL, as in kv_quality. Bits per element count the scale and zero
point (fp16) of each group.

``vq`` in a pair is the coupled quantizer (kvstore/quant/codebook.py): each layer's keys or values coded with the
codebook learned for them on the tuning meetings (bench/kv_calibrate.py, the ``--codebooks`` file); its bits per
element are its codes alone (the codebooks are the model's, like its weights, and their size is printed apart).

It isolates the codec from the budget planner, so it says what a block format costs wherever it is used:
keys or values, and how a split format (``int4:int2`` is the ``k4v2`` row) compares with its parts.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import kv_quality as kq  # noqa: E402
from bench.qmsum_split import PARTS, kv_part_of  # noqa: E402
from kernels.formats import CODEC_NAMES  # noqa: E402

DEFAULT_PAIRS = "full:int2,int2:full,int2:int2,int4:int2,int4:int4"
VQ = "vq"  # the learned codebooks of --codebooks (kvstore/quant/codebook.py)
DEFAULT_CODEBOOKS = REPO / "kvstore" / "quant" / "calibration" / "gemma-3-270m.safetensors"


def parse_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in (p.strip() for p in text.split(",") if p.strip()):
        key, _, value = item.partition(":")
        for name in (key, value):
            if name not in ("full", VQ) and name not in CODEC_NAMES:
                raise ValueError(f"unknown codec {name!r} in {item!r}; known: full, {VQ}, {', '.join(CODEC_NAMES)}")
        pairs.append((key, value))
    if not pairs:
        raise ValueError("no KEY:VALUE pairs given")
    return pairs


def bits_per_element(codec: str, group: int) -> float:
    """Stored bits per K or V element: its code plus its group's parameters (fp16 scale, and zero point where the
    codec has one), measured on a probe quantization."""
    import torch

    from kvstore.quant import get_quantizer

    if codec == "full":
        return 16.0
    qt = get_quantizer(codec, group_size=group).quantize(torch.zeros(1, group * 4))
    stored = [t for t in (qt.data, qt.scale, qt.zero) if t is not None]
    return 8.0 * sum(t.numel() * t.element_size() for t in stored) / (group * 4)


def codec_bits(codec: str, group: int, books: dict, kind: str) -> float:
    """Bits per element of a codec; ``vq``: its codes (the same for every layer's codebook of ``kind``)."""
    if codec == VQ:
        return next(b.bits_per_element for name, b in books.items() if name.endswith(f".{kind}"))
    return bits_per_element(codec, group)


def read_back(x, codec: str, keys: bool, group: int, book=None):
    """``x`` [B, H, T, D] quantized with the library's codec in the cache's layout and dequantized (``vq``: with the
    layer's ``book``)."""
    from kvstore.quant import get_quantizer

    if codec == "full":
        return x
    if codec == VQ:
        tokens_first = x.transpose(1, 2)  # the codebook codes each token's [H, D]
        return book.dequantize(book.quantize(tokens_first)).transpose(1, 2)
    base = get_quantizer(codec, group_size=group)
    quantizer = base.for_keys(token_axis=2) if keys else base.for_values()
    return quantizer.dequantize(quantizer.quantize(x))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=kq.DEFAULT_DATA)
    ap.add_argument("--model", type=Path, default=kq.default_model_dir())
    ap.add_argument("--part", choices=PARTS, default="tuning")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--pairs", default=DEFAULT_PAIRS, help="KEY:VALUE codecs, comma-separated")
    ap.add_argument("--recent", type=int, default=256, help="last tokens left at full precision (the recent window)")
    ap.add_argument("--group-size", type=int, default=32)
    ap.add_argument("--block-size", type=int, default=64, help="the cache's block: key groups do not cross it")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32", "auto"],
                    help="the model's number format (the recorded figures: bf16; auto: the app's choice for this "
                         "machine, float32 on a CPU without bfloat16 instructions, where bfloat16 is emulated)")
    ap.add_argument("--codebooks", type=Path, default=DEFAULT_CODEBOOKS, help="the codebooks of 'vq' (bench/kv_calibrate.py)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "kv_formats.json")
    args = ap.parse_args(argv)
    try:
        pairs = parse_pairs(args.pairs)
        for flag in ("group_size", "block_size", "max_tokens"):
            if getattr(args, flag) <= 0:
                raise ValueError(f"--{flag.replace('_', '-')} must be positive")
        if args.recent < 0 or args.limit < 0:
            raise ValueError("--recent and --limit must be >= 0")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not (args.model / "config.json").is_file():
        print(f"error: model folder {args.model} not found (set --model or MINUTIA_HOME)", file=sys.stderr)
        return 2
    books, about = {}, {}
    if any(VQ in pair for pair in pairs):
        if not args.codebooks.is_file():
            print(f"error: no codebooks at {args.codebooks}: learn them with bench/kv_calibrate.py", file=sys.stderr)
            return 2
        from kvstore.quant.codebook import load_codebooks

        books, about = load_codebooks(args.codebooks)
        if args.part == about.get("part") == "tuning":
            print("note: the codebooks were learned on the tuning part: this is an in-sample figure", file=sys.stderr)

    import torch
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    started = time.time()
    tokenizer, model = kq.load_quietly(args.model, args.threads, args.dtype)
    files = [f for f in sorted(args.data.glob("*.json")) if kv_part_of(f.name) == args.part]
    chosen = [meeting for meeting, _ in kq.rank_meetings(files, tokenizer, args.max_tokens)[: args.limit or None]]
    if not chosen:
        print(f"error: no meeting of part {args.part} in {args.data} has a query that fits", file=sys.stderr)
        return 2
    layers = kq.full_attention_layers(model)
    groups = {"keys": math.gcd(args.group_size, args.block_size), "values": args.group_size}
    runs = [("full", "full", "full")] + [(f"{k}:{v}", k, v) for k, v in pairs]  # (name, key codec, value codec)
    nll: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    per_meeting = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("meetings", total=len(chosen) * len(runs))
        for meeting in chosen:
            kq.encode(meeting, tokenizer, args.max_tokens)
            queries = kq.usable_queries(meeting, tokenizer)
            prepared = kq.prepare_full(model, meeting.input_ids, None)
            base = prepared.save()
            for name, key_codec, value_codec in runs:
                prepared.restore(base)
                for index in layers:  # new tensors: the snapshot shares the old ones
                    layer = prepared.cache.layers[index]
                    cut = max(0, layer.keys.shape[2] - args.recent) // args.block_size * args.block_size
                    for attr, codec, keys in (("keys", key_codec, True), ("values", value_codec, False)):
                        whole = getattr(layer, attr)
                        book = books.get(f"{index}.{attr}") if codec == VQ else None
                        if codec == VQ and book is None:
                            print(f"error: {args.codebooks} has no codebook for layer {index}'s {attr}", file=sys.stderr)
                            return 2
                        settled = read_back(whole[:, :, :cut].float(), codec, keys, groups[attr], book)
                        setattr(layer, attr, torch.cat([settled.to(whole.dtype), whole[:, :, cut:]], 2))
                stored = prepared.save()
                for q in queries:  # each answer from the same stored meeting
                    prepared.restore(stored)
                    nll[name].append(kq.answer_nll(model, prepared.cache, tokenizer, q.question, q.answer, 96))
                progress.advance(task)
            per_meeting.append({"meeting": meeting.name, "tokens": int(meeting.input_ids.shape[1]),
                                "queries": len(queries)})
    full = sum(nll["full"]) / len(nll["full"])
    rows = []
    for name, key_codec, value_codec in runs:
        mean = sum(nll[name]) / len(nll[name])
        bits = (codec_bits(key_codec, groups["keys"], books, "keys")
                + codec_bits(value_codec, groups["values"], books, "values")) / 2
        rows.append({"keys:values": name, "bits_per_element": round(bits, 2), "of_bf16": round(bits / 16, 3),
                     "answer_nll": round(mean, 4), "nll_recovery": round(full / mean, 4)})
    book_bytes = sum(b.centroids.numel() * b.centroids.element_size() for b in books.values())
    report = {"part": args.part, "dtype": str(model.dtype).removeprefix("torch."), "meetings": per_meeting, "queries": len(nll["full"]), "recent": args.recent,
              "codebooks": {**about, "bytes": book_bytes} if books else None,
              "groups": groups, "rows": rows, "seconds": round(time.time() - started, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.part} part: {', '.join(m['meeting'] for m in per_meeting)}; {report['queries']} queries; "
          f"model in {report['dtype']}\n")
    print("| keys : values | bits per element (with scales) | of bf16 | answer NLL | NLL recovery |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        cells = (r["keys:values"], r["bits_per_element"], r["of_bf16"], r["answer_nll"], r["nll_recovery"])
        print("| " + " | ".join(str(c) for c in cells) + " |")
    if books:
        print(f"\nvq: codebooks from {about.get('part', '?')} meetings {about.get('meetings', '?')}, "
              f"{book_bytes / 1024:.0f} KiB for the model (not counted per meeting)")
    console.print(f"[green]wrote[/] {args.out} in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
