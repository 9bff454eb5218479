"""Query-based meeting summaries on QMSum validation: ROUGE of minutia's extractive summaries next to
two baselines, lead-k and a library TextRank, all in one run.

    .venv/bin/python bench/qmsum_summary.py [--data /work/shared/data/qmsum/val] [--tune]

The 35 validation meetings are split by a hash of the file name into a TUNING part (~60%), the only
one used to choose settings (``--tune`` prints a small grid on it), and a HELD-OUT part, the headline.
QMSum's test split is not used.

Methods, all extractive, all at a word budget:
- minutia: general queries ("Summarize the whole meeting") get the topic summary's sentences of
  app/answering/summary.py (TextTiling topics, LexRank sentences); specific queries get app/answering/focused.py's
  query-focused summary (BM25 over windows of turns, mixed with each sentence's own BM25: QMSum answers
  summarise a contiguous span). Both are written as minutes (app/answering/reported.py: third person, past tense).
- lead-k: the transcript's first sentences up to the average reference length (of the tuning part).
- TextRank: sumy's TextRankSummarizer over the whole transcript, same length as lead-k.
- each baseline twice: its sentences as said, and written as minutes like minutia's, so the table separates
  what the selection adds from what the rewrite adds.

ROUGE-1/2/L F1 from ``rouge-score`` with stemming. rougeL is sentence-agnostic LCS over the whole
text; rougeLsum (summary-level LCS over newline-separated sentences) is the closer match to the
ROUGE-1.5.5 / files2rouge figures of the QMSum paper, so both are reported. A bootstrap over the queries gives
each mean's 95% interval and minutia's paired lead over each baseline (a few dozen queries move a mean by a point).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rouge_score import rouge_scorer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.text.sentences import Sentence, split_sentences as sentences  # noqa: E402
from app.answering.focused import FocusedSummarizer, FocusSettings, meeting_order  # noqa: E402
from app.answering.reported import minutes_line  # noqa: E402
from app.answering.reported import as_minutes  # noqa: E402
from app.answering.summary import segment_topics  # noqa: E402
from app.text.transcript import Transcript, load_transcript  # noqa: E402

from bench.shared_data import qmsum_val  # noqa: E402

DATA = qmsum_val()
OUT = ROOT / "bench" / "out"
METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum")
from bench.qmsum_split import split_of  # noqa: E402  (re-exported: the summary bench's split)

console = Console(stderr=True)


# ----------------------------------------------------------------------------------------- data and split


@dataclass(frozen=True)
class Query:
    meeting: str
    kind: str  # "general" or "specific"
    query: str
    answer: str


@dataclass
class Meeting:
    name: str
    transcript: Transcript
    sentences: list[Sentence]
    queries: list[Query]
    topic_starts: list[int] = field(default_factory=list)  # the turn each of QMSum's topics starts at


def load_meetings(folder: Path) -> list[Meeting]:
    meetings = []
    for path in sorted(folder.glob("*.json")):
        raw = json.loads(path.read_text())
        transcript = load_transcript(path)
        queries = [Query(path.name, kind, q["query"], q["answer"])
                   for kind in ("general", "specific") for q in raw.get(f"{kind}_query_list", [])]
        starts = sorted(int(span[0]) for t in raw.get("topic_list", []) for span in t["relevant_text_span"][:1])
        meetings.append(Meeting(path.name, transcript, sentences(transcript), queries, starts))
    return meetings


def words(text: str) -> int:
    return len(text.split())


def quoted(sentence: Sentence) -> str:
    return as_minutes(sentence.text)


def take(ranked: list[int], pool: list[Sentence], budget: int, line: Callable[[Sentence], str] = quoted) -> str:
    """Sentences in ``ranked`` order until ``budget`` words (the last one may run over), shown in time
    order one per line (rougeLsum's sentence split); each written by ``line`` (as said, or as minutes)."""
    chosen, used = [], 0
    for i in ranked:
        if used >= budget:
            break
        chosen.append(i)
        used += words(line(pool[i]))
    return "\n".join(line(pool[i]) for i in sorted(chosen))


# ----------------------------------------------------------------------------------------- methods


@dataclass(frozen=True)
class Tuned:
    """Settings chosen on the tuning split by ``--tune`` (the run of the report in bench/out/)."""

    general_budget: float = 1.25  # x the average general reference length
    specific_budget: float = 1.25  # x the average specific reference length
    window_turns: int = FocusSettings.window_turns  # app/answering/focused.py's settings ...
    window_weight: float = FocusSettings.window_weight
    speaker_weight: float = FocusSettings.speaker_weight
    max_overlap: float = FocusSettings.max_overlap
    feedback_windows: int = FocusSettings.feedback_windows
    feedback_terms: int = FocusSettings.feedback_terms
    feedback_weight: float = FocusSettings.feedback_weight

    def focus(self) -> FocusSettings:
        """app/answering/focused.py's settings with this run's values for every field the two share."""
        shared = {f.name: getattr(self, f.name) for f in fields(FocusSettings) if hasattr(self, f.name)}
        return replace(FocusSettings(), **shared)


class Minutia:
    """minutia's summaries: the topic summary's sentences for general queries, app/answering/focused.py's query-focused
    summary otherwise; both written as minutes (app/answering/reported.py)."""

    def __init__(self, meeting: Meeting):
        self.meeting = meeting
        self.topic_rank = meeting_order(meeting.transcript, meeting.sentences)
        self._focused: dict[FocusSettings, FocusedSummarizer] = {}

    def focused(self, settings: FocusSettings) -> FocusedSummarizer:
        if settings not in self._focused:
            self._focused[settings] = FocusedSummarizer(self.meeting.transcript, self.meeting.sentences, settings)
        return self._focused[settings]

    def answer(self, query: Query, budget: int, tuned: Tuned) -> str:
        summarizer = self.focused(tuned.focus())
        if query.kind == "general":
            return summarizer.take(self.topic_rank, budget).text
        found = summarizer.about(query.query, budget)
        return found.text if found else ""


def lead(meeting: Meeting, budget: int, line: Callable[[Sentence], str] = quoted) -> str:
    return take(list(range(len(meeting.sentences))), meeting.sentences, budget, line)


class TextRank:
    """sumy's TextRankSummarizer over the whole transcript (our sentence split: sumy's own needs NLTK
    data that is not installed)."""

    def __init__(self, meeting: Meeting):
        from sumy.models.dom import ObjectDocumentModel, Paragraph
        from sumy.models.dom import Sentence as SumySentence
        from sumy.nlp.stemmers import Stemmer
        from sumy.summarizers.text_rank import TextRankSummarizer
        from sumy.utils import get_stop_words

        class Words:
            def to_words(self, text: str) -> list[str]:
                return re.findall(r"[A-Za-z0-9']+", text)

        self.pool = meeting.sentences
        document = ObjectDocumentModel([Paragraph([SumySentence(s.text, Words()) for s in self.pool])])
        summarizer = TextRankSummarizer(Stemmer("english"))
        summarizer.stop_words = get_stop_words("english")
        ratings = summarizer.rate_sentences(document)
        scores = [ratings[s] for s in document.sentences]
        self.ranked = sorted(range(len(self.pool)), key=lambda i: -scores[i])

    def answer(self, budget: int, line: Callable[[Sentence], str] = quoted) -> str:
        return take(self.ranked, self.pool, budget, line)


# ----------------------------------------------------------------------------------------- scoring


SCORER = rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True)


def rouge(prediction: str, reference: str) -> dict[str, float]:
    reference = "\n".join(re.split(r"(?<=[.?!])\s+", reference.strip()))
    scores = SCORER.score(reference, prediction)
    return {m: 100 * scores[m].fmeasure for m in METRICS}


def mean_scores(rows: list[dict[str, float]]) -> dict[str, float]:
    return {m: round(statistics.fmean(r[m] for r in rows), 2) for m in METRICS} if rows else {}


def reference_lengths(meetings: list[Meeting]) -> dict[str, int]:
    return {kind: round(statistics.fmean(words(q.answer) for m in meetings for q in m.queries if q.kind == kind))
            for kind in ("general", "specific")}


def score_ours(systems: list[Minutia], lengths: dict[str, int], tuned: Tuned) -> list[tuple[str, dict]]:
    rows = []
    for ours in systems:
        for q in ours.meeting.queries:
            factor = tuned.general_budget if q.kind == "general" else tuned.specific_budget
            rows.append((q.kind, rouge(ours.answer(q, round(lengths[q.kind] * factor), tuned), q.answer)))
    return rows


def summarise_rows(got: list[tuple[str, dict]]) -> dict:
    return {"all": mean_scores([r for _, r in got]),
            **{kind: mean_scores([r for k, r in got if k == kind]) for kind in ("general", "specific")},
            "queries": len(got)}


def build(meetings: list[Meeting]) -> list[Minutia]:
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("indexing meetings", total=len(meetings))
        systems = []
        for meeting in meetings:
            systems.append(Minutia(meeting))
            progress.advance(task)
    return systems


# The baselines as said, and written as minutes like minutia's lines (so the table shows what the selection
# adds apart from the rewrite).
BASELINES = ("lead-k", "textrank", "lead-k as minutes", "textrank as minutes")


def evaluate(meetings: list[Meeting], lengths: dict[str, int], tuned: Tuned) -> dict[str, list[tuple[str, dict]]]:
    """Per-query ROUGE of each method (minutia, lead-k, TextRank), in the same query order for all."""
    rows: dict[str, list[tuple[str, dict]]] = {"minutia": score_ours(build(meetings), lengths, tuned)}
    for method in BASELINES:
        rows[method] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("baselines", total=len(meetings))
        for meeting in meetings:
            ranker = TextRank(meeting)
            for q in meeting.queries:
                for line, suffix in ((quoted, ""), (minutes_line, " as minutes")):
                    rows["lead-k" + suffix].append((q.kind, rouge(lead(meeting, lengths[q.kind], line), q.answer)))
                    rows["textrank" + suffix].append((q.kind, rouge(ranker.answer(lengths[q.kind], line), q.answer)))
            progress.advance(task)
    return rows


def bootstrap(rows: dict[str, list[tuple[str, dict]]], draws: int = 10_000, seed: int = 0) -> dict:
    """95% intervals of each method's mean rougeLsum and of minutia's paired lead over each baseline, resampling
    the queries (the same resample for every method, so the differences are paired). A few dozen queries leave
    intervals of a point or more: this says how far a mean can be read."""
    scores = {method: np.array([r["rougeLsum"] for _, r in got]) for method, got in rows.items()}
    picks = np.random.default_rng(seed).integers(0, len(scores["minutia"]), (draws, len(scores["minutia"])))

    def interval(values: np.ndarray) -> list[float]:
        return [round(float(v), 2) for v in np.percentile(values[picks].mean(1), (2.5, 97.5))]

    return {"mean": {method: interval(s) for method, s in scores.items()},
            "minutia minus": {method: [round(float((scores["minutia"] - s).mean()), 2), *interval(scores["minutia"] - s)]
                              for method, s in scores.items() if method != "minutia"},
            "draws": draws}


def tune(meetings: list[Meeting], lengths: dict[str, int]) -> Tuned:
    """A small grid on the tuning split by mean rougeLsum: specific-query settings, then the query feedback
    (app/answering/focused.py), then the general budget."""
    systems = build(meetings)

    def kind_score(tuned: Tuned, kind: str) -> float:
        return summarise_rows(score_ours(systems, lengths, tuned))[kind]["rougeLsum"]

    grid = [replace(Tuned(), specific_budget=budget, window_turns=width, window_weight=weight, speaker_weight=speaker,
                    max_overlap=overlap)
            for budget, width, weight, speaker, overlap in
            itertools.product((1.0, 1.25, 1.5), (5, 10, 20), (0.5, 0.7, 0.9), (0.0, 0.5), (1.0, 0.5))]
    feedback = [(1, 0, 0.125), *itertools.product((1, 2, 3), (2, 3, 5), (0.125, 0.25))]
    general_budgets = (0.8, 1.0, 1.25, 1.5)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("tuning", total=len(grid) + len(feedback) + len(general_budgets))

        def best_of(candidates: list[Tuned], kind: str, best: tuple[float, Tuned | None] = (-1.0, None)):
            """(score, settings) of the best of ``candidates`` and ``best``: on a tie the earlier one stays."""
            for tuned in candidates:
                score = kind_score(tuned, kind)
                if score > best[0]:
                    best = (score, tuned)
                progress.advance(task)
            return best

        specific = best_of(grid, "specific")
        specific = best_of([replace(specific[1], feedback_windows=windows, feedback_terms=terms, feedback_weight=weight)
                            for windows, terms, weight in feedback], "specific", specific)
        _, tuned = best_of([replace(specific[1], general_budget=budget) for budget in general_budgets], "general")
    console.print(f"[bold]tuned[/] {tuned}")
    return tuned


def segmentation_pk(meetings: list[Meeting]) -> float:
    """Pk (Beeferman et al. 1999; lower is better) of our topics against QMSum's topic_list spans, over turns."""
    values = []
    for m in meetings:
        gold = m.topic_starts
        if len(gold) < 2:
            continue
        n = len(m.transcript.turns)
        gold_id = np.searchsorted(gold, np.arange(n), side="right")
        ours = segment_topics(m.transcript)
        ours_id = np.zeros(n, dtype=int)
        for k, (first, last) in enumerate(ours):
            ours_id[first: last + 1] = k
        k = max(2, round(n / (2 * len(gold))))
        same_g = gold_id[:-k] == gold_id[k:]
        same_o = ours_id[:-k] == ours_id[k:]
        values.append(float(np.mean(same_g != same_o)))
    return round(statistics.fmean(values), 3) if values else float("nan")


# ----------------------------------------------------------------------------------------- report


def table(results: dict) -> str:
    lines = ["| split | method | queries | R-1 | R-2 | R-L | R-Lsum | R-Lsum general | R-Lsum specific |",
             "|---|---|---|---|---|---|---|---|---|"]
    for split, by_method in results.items():
        for method, r in by_method.items():
            a = r["all"]
            lines.append(f"| {split} | {method} | {r['queries']} | {a['rouge1']:.2f} | {a['rouge2']:.2f} | {a['rougeL']:.2f} | "
                         f"{a['rougeLsum']:.2f} | {r['general']['rougeLsum']:.2f} | {r['specific']['rougeLsum']:.2f} |")
    return "\n".join(lines)


def interval_table(intervals: dict) -> str:
    lines = ["| split | method | R-Lsum 95% interval | minutia minus it (95% interval) |", "|---|---|---|---|"]
    for split, got in intervals.items():
        for method, (low, high) in got["mean"].items():
            lead = got["minutia minus"].get(method)
            lines.append(f"| {split} | {method} | {low:.2f}-{high:.2f} | "
                         + (f"{lead[0]:+.2f} ({lead[1]:+.2f}..{lead[2]:+.2f})" if lead else "-") + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--tune", action="store_true", help="grid-search the settings on the tuning split first")
    args = parser.parse_args()
    started = time.time()
    meetings = load_meetings(args.data)
    if not meetings:
        raise SystemExit(f"no QMSum meetings (*.json) in {args.data}: give --data or set MINUTIA_SHARED_DATA")
    parts = {split: [m for m in meetings if split_of(m.name) == split] for split in ("tuning", "held-out")}
    lengths = reference_lengths(parts["tuning"])  # budgets come from the tuning part only
    tuned = tune(parts["tuning"], lengths) if args.tune else Tuned()
    rows = {split: evaluate(ms, lengths, tuned) for split, ms in parts.items()}
    results = {split: {method: summarise_rows(got) for method, got in by_method.items()} for split, by_method in rows.items()}
    intervals = {split: bootstrap(by_method) for split, by_method in rows.items()}
    report = {
        "data": str(args.data),
        "meetings": {split: [m.name for m in ms] for split, ms in parts.items()},
        "reference_words": lengths,
        "tuned": asdict(tuned),
        "topic_segmentation_pk": {split: segmentation_pk(ms) for split, ms in parts.items()},
        "results": results,
        "bootstrap_rougeLsum": intervals,
        "rouge": "rouge-score, use_stemmer=True, F1 x100; rougeLsum splits sentences on newlines",
        "seconds": round(time.time() - started, 1),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "qmsum_summary.json").write_text(json.dumps(report, indent=2) + "\n")
    print(table(results))
    print("\n" + interval_table(intervals))
    print(f"\nreference words (tuning): {lengths}; topic segmentation Pk: {report['topic_segmentation_pk']}")
    console.print(f"[green]wrote[/] {OUT / 'qmsum_summary.json'} in {report['seconds']} s")


if __name__ == "__main__":
    main()
