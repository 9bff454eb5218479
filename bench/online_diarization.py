"""The live (online) diarizer on generated meetings: speaker count, word accuracy and DER after its corrections.

    .venv/bin/python bench/online_diarization.py --suite bench/out/suite-eval [--limit N] [--embedding ge2e]
                                                 [--set new_speaker_threshold=0.6 ...] [--out DIR]

The recogniser is left out so that only the diarizer is measured: each reference turn's words are spread over
the turn by their length (the suite's reference holds turn times, not word times) and committed as a live
session commits them, ``--lag`` seconds after they end, in steps of ``--step`` seconds of audio. Every label is
taken as first given and then corrected by the re-clusterings (``take_changes``), as the session corrects what
it has shown. Scored on the final labels: the number of speakers, word accuracy under the best label mapping
(``speaker_accuracy``), and DER (pyannote.metrics, collar 0 and 0.25) of turns made from runs of one label,
against reference.rttm; ``shown`` is the word accuracy of the labels as first shown, and "too many speakers"
the share of meetings with more speakers than there were (among the labels ever shown, or the final ones). RTF = diarizer wall time
/ audio duration.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.diarization import cpu_model, der, parse_overrides, read_rttm, suite_samples, summarize  # noqa: E402
from encoders.asr import Word  # noqa: E402
from encoders.audio import SAMPLE_RATE, load_audio  # noqa: E402
from encoders.diarize import SpeakerTurn  # noqa: E402
from encoders.online_diarize import OnlineDiarizer, for_embedding, speaker_accuracy  # noqa: E402
from encoders.speaker_embedding import BACKENDS  # noqa: E402


def reference_words(reference: dict) -> list[tuple[Word, str]]:
    """(word, speaker) for every word of the reference turns, spread over each turn by the words' lengths."""
    out = []
    for turn in reference["turns"]:
        tokens = turn["text"].split()
        if not tokens:
            continue
        weights = [len(t) + 1 for t in tokens]
        per = (turn["end"] - turn["start"]) / sum(weights)
        at = turn["start"]
        for token, weight in zip(tokens, weights):
            out.append((Word(token, round(at, 3), round(at + per * (weight - 1), 3)), turn["speaker"]))
            at += per * weight
    return sorted(out, key=lambda pair: pair[0].start)


def hypothesis_turns(words: list[Word], labels: list[str], gap: float = 1.0) -> list[SpeakerTurn]:
    """Runs of one label as turns; a pause under ``gap`` inside a run is bridged."""
    turns: list[SpeakerTurn] = []
    for word, label in zip(words, labels):
        if turns and turns[-1].speaker == label and word.start - turns[-1].end <= gap:
            turns[-1] = SpeakerTurn(turns[-1].start, word.end, label)
        else:
            turns.append(SpeakerTurn(word.start, word.end, label))
    return turns


def run_meeting(diarizer: OnlineDiarizer, audio, words: list[Word], step: float, lag: float) -> tuple[list[str], list[str]]:
    """(labels as first shown, labels after every correction) for ``words`` committed as a live session would."""
    shown: list[str] = []
    final: list[str] = []
    done, fed, hop = 0, 0, int(step * SAMPLE_RATE)
    while fed < len(audio) or done < len(words):
        diarizer.insert_audio(audio[fed:fed + hop])
        fed = min(fed + hop, len(audio))
        now = fed / SAMPLE_RATE
        last = fed >= len(audio)
        ready = [w for w in words[done:] if last or w.end <= now - lag]
        if ready:
            labels = diarizer.label_words(ready)
            shown += labels
            final += labels
            done += len(ready)
            for change in diarizer.take_changes():
                final[change.index] = change.new
    return shown, final


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, required=True, help="folder of generated meetings (bench/suites)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N meetings")
    ap.add_argument("--embedding", choices=sorted(BACKENDS), default=None,
                    help="speaker embedding (default: the online diarizer's own)")
    ap.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="OnlineDiarizer overrides")
    ap.add_argument("--merge", type=float, default=None,
                    help="the re-clustering's merge threshold (default: the online diarizer's own)")
    ap.add_argument("--step", type=float, default=1.0, help="seconds of audio per commit step")
    ap.add_argument("--lag", type=float, default=2.0, help="seconds after its end a word is committed")
    ap.add_argument("--out", type=Path, default=None, help="write online_diarization.json here")
    args = ap.parse_args(argv)
    console = Console(stderr=True)
    overrides = parse_overrides(args.set, OnlineDiarizer)

    def new_diarizer() -> OnlineDiarizer:  # a fresh one per meeting (its state is per stream)
        base = for_embedding(args.embedding) if args.embedding else OnlineDiarizer()
        merge = {} if args.merge is None else {"clustering": dataclasses.replace(base.clustering, merge_threshold=args.merge)}
        return dataclasses.replace(base, **overrides, **merge)

    todo = suite_samples(args.suite, args.limit)
    if not todo:
        raise SystemExit(f"error: no generated meetings under {args.suite}")
    rows = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("diarizing", total=len(todo))
        for name, audio_path, rttm_path, condition in todo:
            progress.update(task, description=f"diarizing {name} live")
            audio = load_audio(audio_path)
            pairs = reference_words(json.loads((audio_path.parent / "reference.json").read_text()))
            words, gold = [w for w, _ in pairs], [s for _, s in pairs]
            reference = read_rttm(rttm_path)
            duration = len(audio) / SAMPLE_RATE
            diarizer = new_diarizer()
            start = time.perf_counter()
            shown, final = run_meeting(diarizer, audio, words, args.step, args.lag)
            elapsed = time.perf_counter() - start
            hyp = hypothesis_turns(words, final)
            rows.append({
                "sample": name, "condition": condition, "duration_s": round(duration, 2),
                "ref_speakers": len({t.speaker for t in reference}), "hyp_speakers": len(set(final)),
                "shown_speakers": len(set(shown)),
                "shown_accuracy": speaker_accuracy(shown, gold), "final_accuracy": speaker_accuracy(final, gold),
                "collar_0": der(reference, hyp, 0.0, duration), "collar_0.25": der(reference, hyp, 0.25, duration),
                "seconds": round(elapsed, 3), "rtf": elapsed / duration,
            })
            progress.advance(task)

    command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
    machine = f"{os.cpu_count()} cores, {cpu_model()}"
    print(f"`{command}` ({machine})\n")
    print("| condition | meetings | speaker count right | too many speakers shown / final "
          "| word accuracy shown / final | median DER collar 0 | median DER collar 0.25 | mean DER collar 0.25 | RTF |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary = summarize(rows)
    for g in summary:
        group = [r for r in rows if g["condition"] == "all" or r["condition"] == g["condition"]
                 or (g["condition"] == "degraded (all)" and r["condition"] != "clean")]
        shown = statistics.fmean(r["shown_accuracy"] for r in group)
        final = statistics.fmean(r["final_accuracy"] for r in group)
        over_shown = statistics.fmean(r["shown_speakers"] > r["ref_speakers"] for r in group)
        over_final = statistics.fmean(r["hyp_speakers"] > r["ref_speakers"] for r in group)
        print(f"| {g['condition']} | {g['meetings']} | {g['count_right']:.0%} | {over_shown:.0%} / {over_final:.0%} "
              f"| {shown:.1%} / {final:.1%} "
              f"| {g['median_der_0']:.1%} | {g['median_der_0.25']:.1%} | {g['mean_der_0.25']:.1%} | {g['rtf']:.3f} |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        settings = {k: v for k, v in dataclasses.asdict(new_diarizer()).items()
                    if not k.startswith("_") and k not in ("clustering", "embedder")}
        report = {"command": command, "machine": machine, "embedding": args.embedding or "default",
                  "step": args.step, "lag": args.lag, "settings": settings, "samples": rows, "summary": summary}
        (args.out / "online_diarization.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
