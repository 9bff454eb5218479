"""The meeting library at scale (issue 51): ingest rate, file size, search and ask-across latency.

    .venv/bin/python -m bench.library --qmsum QMSUM_MIRROR --meetings 1000 --out bench/out/library

Meetings: QMSum's train split (Yale-LILY/QMSum, a git mirror brought in with the search tool's ``fetch``; real
meetings of 30-60 minutes, AMI/ICSI/parliament). N meetings are made from them in turn, each a whole QMSum meeting
under its own title, date (one a day back from today) and speakers renamed per copy, so the library holds N
meetings of real length; past the split's size the same words recur, which makes word search harder (more
matches to rank), not easier. Queries: QMSum train's own specific queries, run across the whole library.
Reported: meetings and sentences, ingest seconds per meeting (sealing, index, MiniLM vectors), the library file's
size, search p50/p95 and ask-across p50/p95 (the single-meeting reader with MiniLM, without the LLM).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.reader_data import git_files, git_show  # noqa: E402


def qmsum_meetings(repo: Path) -> list[tuple[str, list[tuple[str, str]], list[str]]]:
    """(name, [(speaker, text)], [specific queries]) for each QMSum train meeting."""
    from app.text.transcript import qmsum_text

    found = []
    for path in git_files(repo, "data/ALL/train"):
        meeting = json.loads(git_show(repo, path))
        turns = [(t.get("speaker") or "Speaker", qmsum_text(t["content"])) for t in meeting["meeting_transcripts"]]
        queries = [q["query"] for q in meeting.get("specific_query_list", [])]
        found.append((Path(path).stem, [(s, t) for s, t in turns if t], queries))
    return found


def as_transcript(name: str, turns: list[tuple[str, str]], copy: int):
    from app.text.transcript import Transcript, Turn

    rename = {s: f"{s}-{copy}" for s, _ in turns} if copy else {}
    clock, out = 0.0, []
    for speaker, text in turns:
        seconds = max(1.0, len(text.split()) / 2.5)  # about 150 words a minute
        out.append(Turn(rename.get(speaker, speaker), text, clock, clock + seconds))
        clock += seconds
    return Transcript(turns=out, source=f"{name}-{copy}.json", duration=clock)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from app.answering.answers import AnswerFinder
    from app.answering.retrieval import default_embedder
    from app.library.ask import ask_library
    from app.library.record import open_library, record_meeting
    from app.platform.config import load_settings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qmsum", type=Path, required=True, help="a git mirror of Yale-LILY/QMSum")
    ap.add_argument("--meetings", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=100, help="searches timed (and a quarter as many asks)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "library")
    ap.add_argument("--home", type=Path, default=None, help="MINUTIA_HOME for the library (default: a temporary one); "
                    "run again with the same --home and --out to go on where a run stopped")
    args = ap.parse_args(argv)
    console = Console(stderr=True)
    source = qmsum_meetings(args.qmsum)
    if not source:
        raise SystemExit(f"no QMSum train meetings in {args.qmsum}")
    home = args.home or Path(tempfile.mkdtemp(prefix="minutia-library-bench-"))
    settings = load_settings(overrides={"home": str(home)})
    library = open_library(settings)
    day = 86400.0
    args.out.mkdir(parents=True, exist_ok=True)
    timings = args.out / "ingest.jsonl"  # one line per meeting recorded, kept across runs: a stopped run goes on
    done = {}
    if timings.exists() and args.home:
        for line in timings.read_text().splitlines():
            try:
                done[json.loads(line)["i"]] = json.loads(line)
            except (ValueError, KeyError):
                continue  # a line half written when a run was stopped
    now = next(iter(done.values()))["now"] if done else time.time()
    held = {m.title for m in library.meetings()}
    with Progress(console=console) as progress, timings.open("a" if done else "w") as log:
        task = progress.add_task("recording meetings", total=args.meetings, completed=len(done))
        for i in range(args.meetings):
            name, turns, _ = source[i % len(source)]
            if i in done and f"{name} #{i}" in held:
                continue
            transcript = as_transcript(name, turns, i // len(source))
            started = time.perf_counter()
            record_meeting(library, transcript, title=f"{name} #{i}", started=now - i * day)
            done[i] = {"i": i, "s": time.perf_counter() - started, "now": now}
            log.write(json.dumps(done[i]) + "\n")
            log.flush()
            progress.advance(task)
    ingest = [d["s"] for i, d in sorted(done.items()) if i < args.meetings]
    embedder = default_embedder()
    queries = [q for _, _, qs in source for q in qs]
    random.Random(0).shuffle(queries)
    searched, asked = [], []
    with Progress(console=console) as progress:
        task = progress.add_task("searching and asking", total=args.queries + args.queries // 4)
        for query in queries[:args.queries]:
            started = time.perf_counter()
            library.search(query, limit=10)
            searched.append(time.perf_counter() - started)
            progress.advance(task)
        for query in queries[:args.queries // 4]:
            started = time.perf_counter()
            ask_library(library, query, lambda t, q: AnswerFinder(t, embedder).answer(q))
            asked.append(time.perf_counter() - started)
            progress.advance(task)
    sentences = library.db.execute("SELECT COUNT(*) FROM sentences").fetchone()[0]
    library.close()
    report = {
        "meetings": args.meetings, "sentences": sentences, "qmsum_meetings": len(source),
        "ingest_s_per_meeting": {"mean": round(statistics.mean(ingest), 3), "p95": round(pct(ingest, 0.95), 3)},
        "library_mib": round((home / "library" / "library.db").stat().st_size / 2**20, 1),
        "search_s": {"p50": round(pct(searched, 0.5), 4), "p95": round(pct(searched, 0.95), 4)},
        "ask_across_s": {"p50": round(pct(asked, 0.5), 3), "p95": round(pct(asked, 0.95), 3)},
        "searches": len(searched), "asks": len(asked),
    }
    (args.out / "library.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
