"""Words the live recogniser invents over noise after a meeting's last words (issue 49), and what the rule against
them costs on speech.

Each meeting is replayed through the streaming recogniser (LocalAgreement-2, beam 1, a decode every 1 s of new
audio, the clock advancing a fixed 0.5 s per step) with 12 s of silence before it and 12 s of pink noise after it,
once per arm: ``min_segment_probability`` 0 (every decoded segment taken) and the default (a segment none of whose
words reaches it is not taken as heard). Reports the words committed after the speech ended (nobody spoke them),
before it began, and the WER of all committed words against the script.

    .venv/bin/python bench/stream_tail.py [SUITE --seeds 2,7,18] [--floors 0,0.15] [--out FILE]

Without a suite it replays the bundled stand-up alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "samples"))
sys.path.insert(0, str(ROOT))

from textnorm import normalize  # noqa: E402

from app.platform.config import load_settings  # noqa: E402
from app.platform.models import EMBEDDED_ASR, resolve_model  # noqa: E402
from bench.suites.meetings import parse_seeds  # noqa: E402
from encoders.asr import Transcriber  # noqa: E402
from encoders.audio import SAMPLE_RATE, load_audio  # noqa: E402
from encoders.streaming import StreamingOptions, StreamingTranscriber, simulate  # noqa: E402

LEAD_S = 12.0
TAIL_S = 12.0
NOISE_RMS = 0.01  # about 20 dB under the stand-up's speech (RMS 0.10 with its pauses)


def pink_noise(seconds: float, rms: float, seed: int = 0) -> np.ndarray:
    """Noise whose power falls as 1/f (shaped white noise), at ``rms``."""
    n = int(seconds * SAMPLE_RATE)
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
    spectrum[1:] /= np.sqrt(freqs[1:])
    spectrum[0] = 0
    noise = np.fft.irfft(spectrum, n)
    return (noise * rms / np.sqrt(np.mean(noise**2))).astype(np.float32)


def script_of(meeting: Path) -> str:
    if (meeting / "reference.json").is_file():
        return " ".join(t["text"] for t in json.loads((meeting / "reference.json").read_text())["turns"])
    return (meeting / "reference.txt").read_text()


def audio_of(meeting: Path) -> np.ndarray:
    wav = meeting / "meeting.wav"
    return load_audio(wav if wav.is_file() else meeting / "meeting.ogg", SAMPLE_RATE)


def replay(transcriber: Transcriber, meeting: Path, floor: float) -> dict:
    import jiwer

    speech = audio_of(meeting)
    audio = np.concatenate([np.zeros(int(LEAD_S * SAMPLE_RATE), np.float32), speech, pink_noise(TAIL_S, NOISE_RMS)])
    streamer = StreamingTranscriber(transcriber, StreamingOptions(beam_size=1, min_segment_probability=floor))
    words = [r.word for r in simulate(streamer, audio, chunk_seconds=0.5, step_seconds=0.5).words]
    truth = normalize(script_of(meeting))
    heard = normalize(" ".join(w.text for w in words))
    out = jiwer.process_words(truth, heard)
    # Whisper's times for words it makes up are loose ("Bye." 0.1 s before the last word ended), so the words nobody
    # said are the ones the alignment inserts after the script's last word or before its first
    said, hyp = len(truth.split()), heard.split()
    tail = [w for c in out.alignments[0] if c.type == "insert" and c.ref_start_idx == said
            for w in hyp[c.hyp_start_idx:c.hyp_end_idx]]
    lead = [w for c in out.alignments[0] if c.type == "insert" and c.ref_start_idx == 0
            for w in hyp[c.hyp_start_idx:c.hyp_end_idx]]
    return {"meeting": meeting.name, "tail": tail, "lead": lead, "words": said,
            "errors": out.substitutions + out.deletions + out.insertions, "deletions": out.deletions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("suite", type=Path, nargs="?", help="a folder of generated meetings (python -m bench.suites.meetings)")
    ap.add_argument("--seeds", default="", help="e.g. 2,7,18 (with SUITE)")
    ap.add_argument("--floors", default=f"0,{StreamingOptions.min_segment_probability:g}",
                    help="comma list of min_segment_probability arms; the first is the reference")
    ap.add_argument("--no-standup", action="store_true", help="leave the bundled stand-up out")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    try:
        floors = [float(f) for f in args.floors.split(",")]
        seeds = parse_seeds(args.seeds) if args.seeds else []
    except ValueError as exc:
        sys.exit(f"error: bad --seeds or --floors ({exc})")
    if seeds and args.suite is None:
        sys.exit("error: --seeds needs SUITE")
    meetings = ([] if args.no_standup else [ROOT / "samples/standup"]) + [args.suite / f"seed-{s:04d}" for s in seeds]
    missing = [str(m) for m in meetings if not (m / "meeting.wav").is_file() and not (m / "meeting.ogg").is_file()]
    if missing or not meetings:
        sys.exit(f"error: no meeting audio in {', '.join(missing[:3]) or 'nothing chosen'}")
    from rich.progress import Progress

    settings = load_settings()
    folder = resolve_model(settings.asr.model, settings.home, "ASR", EMBEDDED_ASR, "model.bin")
    transcriber = Transcriber(folder, settings.asr.device, settings.asr.compute_type, settings.asr.cpu_threads)
    rows: dict[float, list[dict]] = {f: [] for f in floors}
    with Progress() as progress:
        task = progress.add_task("replaying", total=len(meetings) * len(floors))
        for meeting in meetings:
            for floor in floors:  # arms side by side on each meeting
                row = replay(transcriber, meeting, floor)
                rows[floor].append(row)
                progress.console.print(f"{meeting.name} floor {floor:g}: WER {row['errors'] / row['words']:.3f} "
                                       f"tail {row['tail']} lead {row['lead']}")
                progress.advance(task)
    print("\n| min_segment_probability | meetings | words invented after the end | before the start | WER | deletions |"
          "\n|---|---|---|---|---|---|")
    for floor in floors:
        arm = rows[floor]
        words = sum(r["words"] for r in arm)
        print(f"| {floor:g} | {len(arm)} | {sum(len(r['tail']) for r in arm)} | {sum(len(r['lead']) for r in arm)} | "
              f"{sum(r['errors'] for r in arm) / words:.1%} | {sum(r['deletions'] for r in arm) / words:.1%} |")
    if args.out:
        args.out.write_text(json.dumps({str(f): rows[f] for f in floors}, indent=1))


if __name__ == "__main__":
    main()
