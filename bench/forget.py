"""Forgetting one speaker: are that speaker's facts gone from the answers and from the KV, and the others' kept?

    .venv/bin/python bench/forget.py bench/out/suite-dev --limit 8 [--out bench/out/forget]

For each generated meeting (its reference transcript: speakers, times, text), the meeting is given to a live
session with the configured LLM (Gemma 3 270M by default), saved, and one speaker is forgotten
(app/live/forget.py): the speaker who says the most needles. A needle is an amount, metric or date question of the
meeting's facts whose answer words occur only in one speaker's turns. Before and after, each needle is
scored two ways: the product's answer (``MeetingSession.ask``: sentence retrieval over the transcript and
the KV), and the model alone (greedy decoding from the KV cache after "Question: ... Answer:", no
transcript): right when the answer's keywords appear. The forgotten speaker's needles should drop to 0 both
ways; the other speakers' should stay as they were.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NEEDLE_TYPES = ("how_much", "metric", "when")


def needles(folder: Path) -> tuple[list[dict], list[dict]]:
    """(reference turns, needles: question, keywords, answer, speaker) of one meeting folder."""
    from bench.suites.score import keywords_match

    facts = json.loads((folder / "facts.json").read_text())
    turns = json.loads((folder / "reference.json").read_text())["turns"]
    found = []
    for q in facts["questions"]:
        if q["type"] not in NEEDLE_TYPES or q.get("evidence_turn") is None:
            continue
        speakers = {t["speaker"] for t in turns if keywords_match(t["text"], q["keywords"])}
        if len(speakers) == 1:
            found.append({"question": q["question"], "keywords": q["keywords"], "answer": q["answer"],
                          "speaker": speakers.pop()})
    return turns, found


def score(session, needle: dict) -> tuple[bool, bool]:
    """(the product's answer is right, the model alone decodes it from the KV)."""
    from bench.suites.score import keywords_match

    answer = session.ask(needle["question"]).text
    decoded = session._context.generate(f"\nQuestion: {needle['question']}\nAnswer:", 24).text
    return keywords_match(answer, needle["keywords"]), keywords_match(decoded, needle["keywords"])


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from app.platform.config import load_settings
    from app.live.forget import forget_source
    from app.live.runtime import Runtime
    from app.text.transcript import Transcript, Turn
    from kvstore.crypto import MasterKey

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", type=Path, help="a folder of generated meetings (bench/suites/meetings.py)")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "forget")
    args = ap.parse_args(argv)
    console = Console()
    args.out.mkdir(parents=True, exist_ok=True)
    home = args.out / "home"
    if not (home / "master.key").exists():
        home.mkdir(parents=True, exist_ok=True)
        MasterKey.generate(home / "master.key")
    settings = load_settings(overrides={"store": {"path": str(home / "sessions"), "key_file": str(home / "master.key")}})
    runtime = Runtime(settings)
    rows = []
    started = time.perf_counter()
    folders = sorted(p.parent for p in args.suite.glob("*/facts.json"))[: args.limit]
    with Progress(console=console) as progress:
        task = progress.add_task("meetings", total=len(folders))
        for folder in folders:
            turns, found = needles(folder)
            if not found:
                progress.advance(task)
                continue
            counts: dict[str, int] = {}
            for n in found:
                counts[n["speaker"]] = counts.get(n["speaker"], 0) + 1
            target = max(counts, key=lambda s: (counts[s], s))
            session_id = f"forget-{folder.name}"
            session = runtime.new_session(session_id, source="bench", replace=True)
            session.add_transcript(Transcript([Turn(t["speaker"], t["text"], t["start"], t["end"]) for t in turns]))
            session.finish(timeout=1200)
            session.save()
            before = [score(session, n) for n in found]
            runtime.close_session(session_id)
            report = forget_source(runtime, session_id, target)
            resumed = runtime.resume_session(session_id)
            after = [score(resumed, n) for n in found]
            runtime.close_session(session_id)
            for n, b, a in zip(found, before, after):
                rows.append({"meeting": folder.name, "speaker": n["speaker"], "forgotten": n["speaker"] == target,
                             "question": n["question"], "answer_before": b[0], "answer_after": a[0],
                             "kv_before": b[1], "kv_after": a[1], "words_removed": report.words_removed})
            progress.advance(task)
    runtime.close()
    (args.out / "forget.json").write_text(json.dumps(rows, indent=1))
    print(f"`python bench/forget.py {args.suite} --limit {args.limit}` -- {len(folders)} meetings, "
          f"{len(rows)} needles, {settings.llm.model or 'gemma-3-270m'}, {time.perf_counter() - started:.0f} s\n")
    print("| needles of | needles | answer right before | after | model alone (KV) before | after |")
    print("|---|---|---|---|---|---|")
    for label, group in (("the forgotten speaker", [r for r in rows if r["forgotten"]]),
                         ("the other speakers", [r for r in rows if not r["forgotten"]])):
        n = len(group) or 1
        print(f"| {label} | {len(group)} | {sum(r['answer_before'] for r in group) / n:.0%} | "
              f"{sum(r['answer_after'] for r in group) / n:.0%} | {sum(r['kv_before'] for r in group) / n:.0%} | "
              f"{sum(r['kv_after'] for r in group) / n:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
