"""Live recognition with Whisper's encoder fed the buffer, not a padded 30 s window (issue 20 item 3).

Each generated meeting is replayed through the streaming recogniser (LocalAgreement-2, beam 1, a decode every
1 s of new audio) once per arm: the whole 30 s window (``none``, today's default) and the buffer plus N seconds
of padding. The replay clock advances a fixed 0.5 s per step (``simulate(step_seconds=...)``), so every arm
decodes the same buffers and only the window differs: WER differences come from the window alone. Reports WER
of the committed words against the script, decode seconds per audio second (RTF) and the speed-up.

    .venv/bin/python bench/stream_window.py bench/out/suite-dev-clean --seeds 24-29 --margins none,2,4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "samples"))
sys.path.insert(0, str(ROOT))

from textnorm import normalize  # noqa: E402

from app.platform.config import load_settings  # noqa: E402
from bench.suites.meetings import parse_seeds  # noqa: E402
from app.platform.models import EMBEDDED_ASR, resolve_model  # noqa: E402
from encoders.asr import Transcriber  # noqa: E402
from encoders.audio import SAMPLE_RATE, load_audio  # noqa: E402
from encoders.streaming import StreamingOptions, StreamingTranscriber, simulate  # noqa: E402


def parse_margin(text: str) -> float | None:
    return None if text == "none" else float(text)


def window_label(margin: float | None) -> str:
    return "30 s (padded)" if margin is None else f"buffer + {margin:g} s"


def replay(transcriber: Transcriber, meeting: Path, margin: float | None) -> dict:
    import jiwer

    reference = json.loads((meeting / "reference.json").read_text())
    audio = load_audio(meeting / "meeting.wav", SAMPLE_RATE)
    streamer = StreamingTranscriber(transcriber, StreamingOptions(beam_size=1, window_margin_seconds=margin))
    retries = transcriber.full_window_retries
    result = simulate(streamer, audio, chunk_seconds=0.5, step_seconds=0.5)
    truth = normalize(" ".join(t["text"] for t in reference["turns"]))
    heard = normalize(" ".join(r.word.text for r in result.words))
    out = jiwer.process_words(truth, heard)
    return {"errors": out.substitutions + out.deletions + out.insertions, "words": len(truth.split()),
            "compute_s": result.compute_seconds, "audio_s": result.audio_seconds, "decodes": result.decodes,
            "full_window_retries": transcriber.full_window_retries - retries}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("suite", type=Path, help="a folder of generated meetings (python -m bench.suites.meetings)")
    ap.add_argument("--seeds", required=True, help="e.g. 24-29 or 1080,1083")
    ap.add_argument("--margins", default="none,4", help="comma list: none (30 s window) or seconds of padding")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    try:
        margins = [parse_margin(m) for m in args.margins.split(",")]
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        sys.exit(f"error: bad --seeds or --margins ({exc})")
    meetings = [args.suite / f"seed-{s:04d}" for s in seeds]
    missing = [str(m) for m in meetings if not (m / "meeting.wav").is_file()]
    if missing:
        sys.exit(f"error: no meeting.wav in {', '.join(missing[:3])}")
    from rich.progress import Progress

    settings = load_settings()
    folder = resolve_model(settings.asr.model, settings.home, "ASR", EMBEDDED_ASR, "model.bin")
    transcriber = Transcriber(folder, settings.asr.device, settings.asr.compute_type, settings.asr.cpu_threads)
    list(transcriber.transcribe(load_audio(meetings[0] / "meeting.wav", SAMPLE_RATE)[: 2 * SAMPLE_RATE]))  # warm
    rows: dict[str, list[dict]] = {str(m): [] for m in margins}
    with Progress() as progress:
        task = progress.add_task("replaying", total=len(meetings) * len(margins))
        for meeting in meetings:
            for margin in margins:  # arms side by side on each meeting, so a busy spell hits them alike
                figures = replay(transcriber, meeting, margin)
                rows[str(margin)].append({"meeting": meeting.name, **figures})
                progress.console.print(f"{meeting.name} margin {margin}: WER {figures['errors'] / figures['words']:.3f}"
                                       f" RTF {figures['compute_s'] / figures['audio_s']:.3f}"
                                       f" retries {figures['full_window_retries']}/{figures['decodes']}")
                progress.advance(task)
    base = rows[str(margins[0])]
    print(f"\n| window (first arm is the reference) | meetings | WER | meetings with WER +5 points or worse | "
          f"decodes redone on the whole window | decode RTF | speed-up |\n|---|---|---|---|---|---|---|")
    summary = {}
    for margin in margins:
        arm = rows[str(margin)]
        wer = sum(r["errors"] for r in arm) / sum(r["words"] for r in arm)
        rtf = sum(r["compute_s"] for r in arm) / sum(r["audio_s"] for r in arm)
        worse = sum(r["errors"] / r["words"] > b["errors"] / b["words"] + 0.05 for r, b in zip(arm, base))
        speedup = sum(r["compute_s"] for r in base) / sum(r["compute_s"] for r in arm)
        retried = sum(r["full_window_retries"] for r in arm) / max(1, sum(r["decodes"] for r in arm))
        print(f"| {window_label(margin)} | {len(arm)} | {wer:.1%} | {worse} | {retried:.1%} | {rtf:.3f} | {speedup:.2f}x |")
        summary[str(margin)] = {"wer": wer, "rtf": rtf, "worse": worse, "retried": retried, "speedup": speedup,
                                "meetings": arm}
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
