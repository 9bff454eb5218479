"""Quality drift of the sparse decode read on the embedded LLM, and what measuring it costs.

For each ``decode_top_k_blocks`` a meeting (QMSum validation) is prefilled into a live MeetingContext with the
live KV settings (compression at 25%), its specific queries are answered with every decode step sampled
(``drift_sample_rate`` 1.0), and the Jensen-Shannon divergence and top-1 agreement against a dense read of
every resident block are reported (app/llm/drift.py, what ``minutia_kv_quality_drift`` shows), with the share of
answers a dense read of the whole question and answer gives word for word (``shadow_question_rate`` 1.0). Then the same
answers are timed at the default sample rate and with sampling off, side by side in one run: the time the user waits
for the answers, and the comparisons' time after them (a background pass per answer with a sampled step).

    python bench/drift.py --meetings 2 --tokens 3000 --top-k 4 8 16 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.kv_quality import DEFAULT_DATA, default_model_dir, load_meeting  # noqa: E402


def exact_cold_tier(name: str):
    """A cold tier in host memory that keeps exact copies (what a live session's is, without the store), so a
    shadowed answer is also compared with the meeting read at full precision."""
    from kvstore.cold import ColdTier
    from kvstore.placement import PlacementPolicy, Tier, TierPlacement
    from kvstore.tier_guards import WatermarkController
    from kvstore.stores.memory import MemoryStore

    tiers = {Tier.DEVICE: MemoryStore("cpu", tier="device"), Tier.HOST: MemoryStore("cpu", tier="host")}
    return ColdTier(TierPlacement(tiers, name, WatermarkController(16 << 20), PlacementPolicy()), recall_top_k=32,
                    exact_copies=True)


def build_context(engine, kv, meeting, max_tokens: int, exact: bool = False):
    from app.llm.context import ContextLine, MeetingContext

    context = MeetingContext(engine, kv, header=engine.live_prompts().header,
                             cold_tier=exact_cold_tier(meeting.name) if exact else None)
    for i, turn in enumerate(meeting.turns):
        if context.tokens >= max_tokens:
            break
        context.append(ContextLine("audio", float(i), float(i) + 1.0, turn.speaker, turn.text))
        context.flush(min_tokens=256)
    context.flush()
    return context


def answer_all(context, engine, questions: list[str], max_new: int) -> tuple[float, float]:
    """Seconds the user waited for the answers, and seconds of the comparisons after them (each waited for before
    the next question, so neither delays the other here)."""
    tail = engine.live_prompts().answer_tail
    answering = comparing = 0.0
    for question in questions:
        generation = context.generate(tail.format(question=question), max_new_tokens=max_new, stop=("\n",))
        answering += generation.total_seconds
        started = time.perf_counter()
        context.shadow.wait(300)  # the answer's comparisons, when a step or the question was sampled
        comparing += time.perf_counter() - started
    return answering, comparing


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    from app.platform.config import KVSettings, LLMSettings
    from app.llm.engine import LLMEngine

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--meetings", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=3000, help="meeting tokens prefilled per meeting")
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=24)
    ap.add_argument("--top-k", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--timing-top-k", type=int, default=8)
    ap.add_argument("--exact", action="store_true", help="a cold tier with exact copies: shadowed answers are also "
                    "compared with the meeting at full precision (shadow_exact_js)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "drift.json")
    args = ap.parse_args(argv)
    console = Console()
    model = args.model or default_model_dir()
    if not (model / "config.json").is_file():
        console.print(f"error: no model at {model} (run `make demo` once, or give --model DIR)")
        return 2
    files = sorted(args.data.glob("*.json"))[: args.meetings]
    if not files:
        console.print(f"error: no QMSum meetings (*.json) in {args.data}")
        return 2
    llm = LLMSettings(model=str(model), dtype="float32")
    rows, timing = [], []
    for path in files:
        meeting = load_meeting(path)
        questions = [q.question for q in meeting.queries[: args.questions]]
        for top_k in args.top_k:
            kv = KVSettings(decode_top_k_blocks=top_k, drift_sample_rate=1.0, shadow_question_rate=1.0,
                            shadow_exact=args.exact)
            engine = LLMEngine(model, llm, kv)
            context = build_context(engine, kv, meeting, args.tokens, args.exact)
            answer_all(context, engine, questions, args.max_new)
            report = {**context.drift.report(), **context.shadow.report()}
            rows.append({"meeting": path.stem, "top_k": top_k, "tokens": context.tokens, **report})
            console.print(f"{path.stem} top-k {top_k}: {context.tokens} tokens, JS {report['quality_drift_js']:.4f}, "
                          f"top-1 agreement {report['shadow_top1_agreement']:.0%} ({report['drift_samples']} steps), "
                          f"same whole answer {report['shadow_answer_agreement']:.0%} of {report['shadow_questions']}")
            if report.get("shadow_exact_js") is not None:
                console.print(f"  against the meeting at full precision: JS {report['shadow_exact_js']:.4f}, same whole "
                              f"answer {report['shadow_exact_agreement']:.0%}")
            if top_k == args.timing_top_k:
                seconds, background = {}, {}
                context.shadow.sample_rate = 0.0  # timed: the per-step sampling only
                for rate in (0.0, KVSettings().drift_sample_rate, 1.0):
                    context.drift.sample_rate = rate
                    seconds[rate], background[rate] = answer_all(context, engine, questions, args.max_new)
                timing.append({"meeting": path.stem, "top_k": top_k, "seconds_by_rate": seconds,
                               "background_seconds_by_rate": background})
                console.print(f"  answer time by sample rate: {seconds}; comparisons after them: {background}")
            context.close()
    table = Table(title="sparse vs dense decode read (QMSum validation meetings, embedded gemma-3-270m)")
    for col in ("top-k blocks", "meetings", "mean JS", "top-1 agreement", "sampled steps", "same whole answer"):
        table.add_column(col)
    for top_k in args.top_k:
        mine = [r for r in rows if r["top_k"] == top_k and r["quality_drift_js"] is not None]
        if mine:
            table.add_row(str(top_k), str(len(mine)), f"{statistics.mean(r['quality_drift_js'] for r in mine):.4f}",
                          f"{statistics.mean(r['shadow_top1_agreement'] for r in mine):.0%}",
                          str(sum(r["drift_samples"] for r in mine)),
                          f"{sum(r['shadow_answer_agreement'] * r['shadow_questions'] for r in mine) / max(1, sum(r['shadow_questions'] for r in mine)):.0%}"
                          f" of {sum(r['shadow_questions'] for r in mine)}")
    console.print(table)
    for t in timing:
        base = t["seconds_by_rate"][0.0]
        console.print(f"{t['meeting']} top-k {t['top_k']}: " + ", ".join(
            f"rate {rate}: {s:.1f} s ({s / base - 1:+.0%}) + {t['background_seconds_by_rate'][rate]:.1f} s after"
            for rate, s in t["seconds_by_rate"].items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(["python", "bench/drift.py", *(argv or sys.argv[1:])]),
                                    "rows": rows, "timing": timing}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
