"""Slides found in shared-screen video: the keyframe detector, de-duplication and OCR on generated decks.

    python bench/slides.py --seeds 0-29            # development decks (bench/suites/slides.py)
    python bench/slides.py --seeds 1000-1029       # evaluation decks: score only, never tune on them

Every frame of a deck goes through encoders.vision.VisionPipeline (KeyframeDetector, real Tesseract OCR, no
CLIP) as a live session feeds it. A shown slide counts as found when an event falls inside its time span
(dwell times are 1.5 s or more, longer than the detector holds a change back); an event on a slide already found, or on a return to an earlier slide, is a
false slide. Reported per slide kind (a new layout, a variant with one figure or line changed, a build with one
more bullet), with the seconds from a slide's start to its event and the share of its words the OCR read.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.suites.meetings import parse_seeds  # noqa: E402
from bench.suites.slides import Deck, frames, make_deck, split_of  # noqa: E402

def _words(text: str) -> list[str]:
    return re.findall(r"[0-9a-z$%]+", text.lower().replace(",", ""))


def score_deck(deck: Deck, events: list[tuple[float, str]]) -> dict:
    gold = deck.gold()
    found: dict[int, tuple[float, str]] = {}
    false = 0
    for t, text in events:
        seg = next((s for s in deck.segments if s.start <= t < s.end), None)
        if seg is None or seg.kind == "return" or id(seg) in found:
            false += 1
            continue
        found[id(seg)] = (t, text)
    rows = []
    for seg in gold:
        hit = found.get(id(seg))
        words = _words(seg.slide.text())
        read = None
        if hit is not None:
            heard = set(_words(hit[1]))
            read = sum(w in heard for w in words) / max(1, len(words))
        rows.append({"kind": seg.kind, "found": hit is not None, "delay": None if hit is None else hit[0] - seg.start,
                     "read": read, "dwell": seg.end - seg.start})
    return {"seed": deck.seed, "split": split_of(deck.seed), "slides": rows, "false": false, "events": len(events),
            "returns": sum(s.kind == "return" for s in deck.segments)}


def run_deck(deck: Deck, pipeline_factory) -> tuple[list[tuple[float, str]], int]:
    """The deck's slide events (time, OCR text), and how many keyframes the pipeline read."""
    pipeline = pipeline_factory()
    events = []
    for t, frame in frames(deck):
        event = pipeline.feed(frame, t)
        if event is not None:
            events.append((t, event.text))
    return events, pipeline.keyframes


def summary(results: list[dict]) -> dict:
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        for row in r["slides"]:
            by_kind[row["kind"]].append(row)
    out = {}
    for kind, rows in sorted(by_kind.items()) + [("all", [row for r in results for row in r["slides"]])]:
        hits = [row for row in rows if row["found"]]
        out[kind] = {"slides": len(rows), "found": len(hits),
                     "median_delay": statistics.median(h["delay"] for h in hits) if hits else None,
                     "words_read": statistics.mean(h["read"] for h in hits) if hits else None}
    out["false"] = sum(r["false"] for r in results)
    out["keyframes_per_minute"] = 60 * sum(r.get("keyframes", 0) for r in results) / max(1e-9, sum(
        r.get("seconds", 0) for r in results))
    out["returns"] = sum(r["returns"] for r in results)
    return out


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from encoders.vision import SlideReader, VisionPipeline

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", required=True, help="deck seeds: 0-29 (development) or 1000-1029 (evaluation)")
    ap.add_argument("--out", type=Path, default=None, help="write the per-deck results as JSON here")
    args = ap.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        print(f"error: --seeds takes a range or list such as 0-29 or 3,7,9, not {args.seeds!r}", file=sys.stderr)
        return 2
    reader = SlideReader()
    console = Console()
    results = []
    started = time.perf_counter()
    with Progress(console=console) as progress:
        task = progress.add_task("decks", total=len(seeds))
        for seed in seeds:
            deck = make_deck(seed)
            events, keyframes = run_deck(deck, lambda: VisionPipeline(reader=reader))
            results.append({**score_deck(deck, events), "keyframes": keyframes, "seconds": deck.duration})
            progress.advance(task)
    totals = summary(results)
    splits = sorted({r["split"] for r in results})
    table = Table(title=f"slides found, decks {args.seeds} ({', '.join(splits)}), {time.perf_counter() - started:.0f} s")
    for col in ("slide kind", "slides", "found", "median seconds to event", "words read (found slides)"):
        table.add_column(col)
    for kind, row in totals.items():
        if isinstance(row, dict):
            table.add_row(kind, str(row["slides"]), f"{row['found'] / max(1, row['slides']):.0%} ({row['found']})",
                          "-" if row["median_delay"] is None else f"{row['median_delay']:.1f}",
                          "-" if row["words_read"] is None else f"{row['words_read']:.0%}")
    console.print(table)
    console.print(f"false slides (a slide shown twice, a return to an earlier slide, or no slide): {totals['false']} "
                  f"(returns in the decks: {totals['returns']}); keyframes read (de-duplicated, OCR'd) per minute of "
                  f"video: {totals['keyframes_per_minute']:.1f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": "python bench/slides.py " + " ".join(argv or sys.argv[1:]),
                                        "summary": totals, "decks": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
