"""The generator swap: do answers hold when the suites are written by someone else?

The suite generator (bench/suites) speaks one vocabulary: its topics, names and phrase templates. Rules grown
against it can score well on its suites and fail on everything else. bench/suites/fresh/ and bench/suites/unseen/
are two more (other topics, names, vendors, and every template phrased anew, each written by a helper who never
read app/; see bench/suites/vocabulary.py for which may be looked at); the question kinds, the plan and the scorer
are the same. This bench generates the same seeds with each vocabulary, answers every question from the reference
transcript (answering alone, as `bench.suite_answers --source reference`), and prints the scores side by side, per
question type, with each gap to the original. Target: within 5 points.

    .venv/bin/python -m bench.generator_swap [--seeds 0-39] [--against fresh,unseen] [--out bench/out/generator-swap] [--llm]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_GAP = 5.0  # points


def _run(args: list[str], vocabulary: str) -> None:
    env = {**os.environ, "MINUTIA_SUITE_VOCABULARY": vocabulary}
    done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"{args[0]} ({vocabulary} vocabulary) failed: {tail[0]}")


def score(rows: list[dict]) -> dict[str, tuple[int, float]]:
    """Question type -> (questions, percent right); '' is all of them."""
    by_type: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        by_type[r["type"]].append(bool(r["correct"]))
        by_type[""].append(bool(r["correct"]))
    return {t: (len(v), 100.0 * sum(v) / len(v)) for t, v in by_type.items()}


def table(scores: dict[str, dict[str, tuple[int, float]]]) -> str:
    """Questions and percent right per type for each vocabulary, with each one's gap to the original."""
    types = sorted({t for s in scores.values() for t in s if t}) + [""]
    others = [v for v in scores if v != "original"]
    lines = ["| question type | original: questions | right |"
             + "".join(f" {v}: questions | right | gap (points) |" for v in others),
             "|---|---:|---:|" + "---:|---:|---:|" * len(others)]
    for t in types:
        no, ro = scores["original"].get(t, (0, 0.0))
        line = f"| {t or '**all**'} | {no} | {ro:.1f}% |"
        for v in others:
            nf, rf = scores[v].get(t, (0, 0.0))
            line += f" {nf} | {rf:.1f}% | {f'{ro - rf:+.1f}' if no and nf else '-'} |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-39", help="seed range, as bench.suites.meetings takes it (development seeds)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/out/generator-swap")
    ap.add_argument("--against", default="fresh,unseen", help="the vocabularies compared with the original")
    ap.add_argument("--llm", action="store_true", help="answer with the language model too (slower)")
    args = ap.parse_args(argv)
    from bench.suites.vocabulary import VOCABULARIES

    against = [v.strip() for v in args.against.split(",") if v.strip()]
    unknown = [v for v in against if v not in VOCABULARIES or v == "original"]
    if unknown or not against:
        raise SystemExit(f"--against: choose from {', '.join(v for v in VOCABULARIES if v != 'original')}")
    console = Console(stderr=True)
    started = time.perf_counter()
    scores: dict[str, dict[str, tuple[int, float]]] = {}
    for vocabulary in ["original", *against]:
        suite = args.out / vocabulary
        with console.status(f"generating seeds {args.seeds} ({vocabulary} vocabulary)"):
            _run(["bench.suites.meetings", "--seeds", args.seeds, "--out", str(suite), "--jobs", "2"], vocabulary)
        with console.status(f"answering ({vocabulary} vocabulary)"):
            _run(["bench.suite_answers", str(suite), "--source", "reference", "--out", str(suite / "answers"),
                  *([] if args.llm else ["--no-llm"])], vocabulary)
        rows = json.loads((suite / "answers" / "suite_answers_reference.json").read_text())["rows"]
        scores[vocabulary] = score(rows)
    gaps = {v: scores["original"][""][1] - scores[v][""][1] for v in against}
    print(f"`python -m bench.generator_swap --seeds {args.seeds} --against {','.join(against)}{' --llm' if args.llm else ''}` — reference "
          f"transcripts, {'with' if args.llm else 'without'} the LLM, {os.cpu_count()} cores, "
          f"{time.perf_counter() - started:.0f} s\n")
    print(table(scores))
    for v, gap in gaps.items():
        print(f"\n{v}: gap {gap:+.1f} points (target: within {TARGET_GAP:.0f}): {'met' if abs(gap) <= TARGET_GAP else 'NOT met'}")
    (args.out / "summary.json").write_text(json.dumps(
        {"seeds": args.seeds, "llm": args.llm, "scores": scores, "gap_points": gaps}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
