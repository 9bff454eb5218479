"""How often `minutia ask` gets the facts of the bundled sample right, with minutia's TieredCache
(compressed to the configured budget) and with transformers' DynamicCache, side by side, and from the
3 most relevant turns versus the whole transcript.

The sample's prompts are shorter than the configured ``budget_floor_tokens`` (2048), under which the
cache never compresses; the TieredCache rows set the floor to 0 so the budget (25% of each prompt's
full KV bytes) really applies, and report how many prompts the cache compressed.

A question counts as answered when the answer contains one of the fact's keywords
(samples/standup/facts.json). Uses the reference transcript, so ASR errors do not enter.

    .venv/bin/python bench/ask_accuracy.py [--config cpu-small] [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from app.llm.assistant import Assistant
from app.platform.config import load_settings
from app.llm.engine import LLMEngine
from app.text.transcript import load_transcript

ROOT = Path(__file__).resolve().parent.parent


def hit(answer: str, keywords: list[str]) -> bool:
    text = answer.lower()
    return any(k.lower() in text or k.lower() in text.replace(",", "") for k in keywords)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None)
    ap.add_argument("--sample", type=Path, default=ROOT / "samples" / "standup")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    facts = json.loads((args.sample / "facts.json").read_text())["questions"]
    transcript = load_transcript(args.sample / "reference.json")
    rows, totals = [], {}
    modes = (
        ("TieredCache, 3 most relevant turns", True, 3),
        ("DynamicCache, 3 most relevant turns", False, 3),
        ("TieredCache, whole transcript", True, 0),
    )
    for label, enabled, turns in modes:
        kv = {"enabled": enabled, **({"budget_floor_tokens": 0} if enabled else {})}
        settings = load_settings(args.config, {"kv": kv, "llm": {"answer_context_turns": turns}})
        engine = LLMEngine.from_settings(settings.llm, settings.home, settings.kv)
        caches = _record_caches(engine)
        assistant = Assistant(engine)
        correct, started = 0, time.perf_counter()
        for fact in facts:
            answer = assistant.ask(transcript, fact["question"])
            ok = hit(answer.text, fact["keywords"])
            correct += ok
            rows.append({"cache": label, "question": fact["question"], "answer": answer.text, "correct": ok})
        compressed = sum(1 for cache in caches if _compressed(cache))
        totals[label] = {"correct": correct, "total": len(facts), "seconds": round(time.perf_counter() - started, 1),
                         "prompts": len(caches), "compressed_prompts": compressed if enabled else None}
    print(f"model: {settings.llm.model}, kv budget {settings.kv.budget_ratio:.0%}, {os.cpu_count()} cores")
    print("| cache | correct | seconds | prompts compressed |\n|---|---|---|---|")
    for label, t in totals.items():
        squeezed = "-" if t["compressed_prompts"] is None else f"{t['compressed_prompts']}/{t['prompts']}"
        print(f"| {label} | {t['correct']}/{t['total']} | {t['seconds']} | {squeezed} |")
    n = len(facts)
    print("\n| question | " + " | ".join(label for label, _, _ in modes) + " |")
    print("|---" * (len(modes) + 1) + "|")
    for i, fact in enumerate(facts):
        cells = [rows[m * n + i] for m in range(len(modes))]
        print(f"| {fact['question']} | " + " | ".join(f"{c['answer']} {'✓' if c['correct'] else '✗'}" for c in cells) + " |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ask_accuracy.json").write_text(json.dumps({"totals": totals, "rows": rows}, indent=2) + "\n")
    return 0


def _record_caches(engine: LLMEngine) -> list:
    """Keep every cache the engine builds, to count afterwards how many were compressed."""
    made, build = [], engine.new_cache

    def recording(expected_tokens: int):
        made.append(build(expected_tokens))
        return made[-1]

    engine.new_cache = recording
    return made


def _compressed(cache) -> bool:
    """Whether any block of the cache left full precision (quantized, dropped or evicted)."""
    stats = cache.stats() if hasattr(cache, "kv_bytes") else None
    if stats is None:
        return False
    return stats["tiers"]["L2_WARM"]["blocks"] > 0 or stats["tiers"]["L3_COLD"]["tokens"] > 0


if __name__ == "__main__":
    raise SystemExit(main())
