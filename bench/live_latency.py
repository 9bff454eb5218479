"""Live latency: the bundled stand-up replayed as a live stream (issue 6).

Audio part: Whisper base int8 streaming (LocalAgreement-2) + online diarization on the CPU cores of
this machine. Reports commit latency (word end -> commit) p50/p95, real-time factor, WER of the
committed words and speaker-label accuracy of the committed words (labels as first shown, and
after re-clustering corrections), as JSON + Markdown + a latency histogram PNG under --out.

    .venv/bin/python bench/live_latency.py [--realtime] [--chunk 0.5] [--min-chunk 1.0] [--out bench/out]

Without --realtime the replay clock skips idle waits but advances by every measured compute step,
so latencies are those of a real-time replay on this machine (encoders.streaming.simulate).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "samples"))
sys.path.insert(0, str(ROOT))

from textnorm import normalize  # noqa: E402

from app.platform.config import load_settings  # noqa: E402
from bench.shared_data import qmsum_val  # noqa: E402
from app.platform.models import EMBEDDED_ASR, resolve_model  # noqa: E402
from encoders.asr import Transcriber  # noqa: E402
from encoders.audio import SAMPLE_RATE, load_audio  # noqa: E402
from encoders.diarize import SpeakerTurn, assign_speakers  # noqa: E402
from encoders.online_diarize import make_online_diarizer, speaker_accuracy  # noqa: E402
from encoders.streaming import StreamingOptions, StreamingTranscriber, simulate  # noqa: E402


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def audio_part(args, settings) -> dict:
    import jiwer

    recording = args.sample / "meeting.ogg"
    reference = json.loads((args.sample / "reference.json").read_text())
    audio = load_audio(recording, SAMPLE_RATE)
    folder = resolve_model(settings.asr.model, settings.home, "ASR", EMBEDDED_ASR, "model.bin")
    transcriber = Transcriber(folder, settings.asr.device, settings.asr.compute_type, settings.asr.cpu_threads)
    options = StreamingOptions(min_chunk_seconds=args.min_chunk, beam_size=args.beam)
    streamer = StreamingTranscriber(transcriber, options)
    diarization = settings.diarization
    diarizer = make_online_diarizer(diarization.backend, diarization.model, diarization.live_embedding)
    # Warm both models once (first-call costs are not live latency).
    list(transcriber.transcribe(audio[: SAMPLE_RATE * 2]))
    diarizer.embedder(audio[: SAMPLE_RATE * 2], [(0, SAMPLE_RATE)])  # loads the voice model; keeps no state

    changes: dict[int, str] = {}
    t0 = time.perf_counter()

    class Tracking:
        """Collects the diarizer's relabels while simulate() drives it."""

        def insert_audio(self, samples):
            diarizer.insert_audio(samples)

        def label_words(self, words):
            labels = diarizer.label_words(words)
            for c in diarizer.take_changes():
                changes[c.index] = c.new
            return labels

    result = simulate(streamer, audio, chunk_seconds=args.chunk, realtime=args.realtime, diarizer=Tracking())
    wall = time.perf_counter() - t0

    words = [r.word for r in result.words]
    hyp_text = re.sub(r"\s+([,.;:!?%])", r"\1", " ".join(w.text for w in words))
    ref_text = " ".join(t["text"] for t in reference["turns"])
    gold = assign_speakers(words, [SpeakerTurn(t["start"], t["end"], t["speaker"]) for t in reference["turns"]])
    shown = [r.speaker for r in result.words]
    final = [changes.get(i, s) for i, s in enumerate(shown)]
    latencies = [r.latency for r in result.words]
    return {
        "sample": str(recording.relative_to(ROOT)),
        "audio_s": round(result.audio_seconds, 2),
        "mode": "real time (wall clock)" if args.realtime else "stream clock + measured compute",
        "chunk_s": args.chunk,
        "min_chunk_s": args.min_chunk,
        "beam_size": args.beam,
        "words": len(words),
        "latency_p50_s": round(result.latency_percentile(50), 3),
        "latency_p95_s": round(result.latency_percentile(95), 3),
        "latency_max_s": round(max(latencies), 3),
        "rtf": round(result.rtf, 3),
        "decodes": result.decodes,
        "wer": round(jiwer.wer(normalize(ref_text), normalize(hyp_text)), 4),
        "speaker_accuracy_shown": round(speaker_accuracy(shown, gold), 4),
        "speaker_accuracy_final": round(speaker_accuracy(final, gold), 4),
        "relabelled_words": len(changes),
        "wall_s": round(wall, 1),
        "latencies": [round(x, 3) for x in latencies],
    }


QUESTIONS = (
    "What did the group decide about the remote control?",
    "Who will send the summary?",
    "What was said about the budget?",
)


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _qmsum_turns(folder: Path, minutes: float, words_per_second: float = 2.5):
    """QMSum meetings back to back, cut to ``minutes`` of meeting at a speaking rate of 150 words/min."""
    from app.text.transcript import Transcript, load_transcript

    budget = minutes * 60 * words_per_second
    turns, words = [], 0
    for path in sorted(folder.glob("*.json")):
        for turn in load_transcript(path).turns:
            n = len(turn.text.split())
            if words + n > budget:
                return Transcript(turns=turns)
            turns.append(turn)
            words += n
    return Transcript(turns=turns)


def long_meeting_part(args, settings) -> dict | None:
    """TTFT / answer time / KV bytes / RSS at 10, 30, 60 minutes of meeting: QMSum text injected as
    already-committed words into one app.live.session.MeetingSession, questions asked at each mark."""
    if args.minutes is None:
        return None
    from app.live.runtime import Runtime
    from app.text.transcript import Transcript

    marks = [float(m) for m in args.minutes.split(",")]
    runtime = Runtime(settings)
    runtime.warm_up()
    session = runtime.new_session(source="qmsum")
    full = _qmsum_turns(args.qmsum, max(marks))
    cumulative = list(itertools.accumulate(len(t.text.split()) for t in full.turns))
    rows, done = [], 0
    for mark in marks:
        # the turns that fit ``mark`` minutes at 150 words/min (same cut as _qmsum_turns)
        end = bisect.bisect_right(cumulative, mark * 60 * 2.5)
        started = time.perf_counter()
        session.add_transcript(Transcript(turns=full.turns[done:end]))
        session.wait_until_prefilled()
        prefill_s = time.perf_counter() - started
        added_words = sum(len(t.text.split()) for t in full.turns[done:end])
        done = end
        ttfts, totals = [], []
        for question in QUESTIONS:
            t0 = time.perf_counter()
            session.ask(question)
            totals.append(time.perf_counter() - t0)
            ttfts.append(session.snapshot().kv["question_ttft"])
        kv = session.kv_stats()
        row = {
            "minutes": mark, "tokens": kv["tokens"], "prefill_s": round(prefill_s, 2),
            "prefill_words_per_s": round(added_words / prefill_s, 1) if prefill_s else None,
            "ttft_s": sorted(ttfts)[len(ttfts) // 2], "ttft_max_s": max(ttfts),
            "answer_s": sorted(totals)[len(totals) // 2],
            "kv_bytes": kv["tiered_kv_bytes"], "kv_full_bytes": kv["full_precision_bytes"],
            "rss_mib": round(_rss_mib(), 1),
        }
        print(json.dumps(row))
        rows.append(row)
    runtime.close()
    return {"questions": list(QUESTIONS), "rows": rows}


def write_outputs(out: Path, audio: dict | None, long: dict | None, machine: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "live_latency.json").write_text(json.dumps({"machine": machine, "audio": audio, "long_meeting": long}, indent=2) + "\n")
    md: list[str] = []
    if audio is not None:
        md += [
            "| sample | mode | words | commit latency p50 | p95 | RTF | WER | speaker acc. (shown / final) | machine |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| {audio['sample']} | {audio['mode']}, chunk {audio['chunk_s']} s, min chunk {audio['min_chunk_s']} s, beam {audio['beam_size']} "
            f"| {audio['words']} | {audio['latency_p50_s']:.2f} s | {audio['latency_p95_s']:.2f} s | {audio['rtf']:.2f} | {audio['wer']:.1%} "
            f"| {audio['speaker_accuracy_shown']:.1%} / {audio['speaker_accuracy_final']:.1%} | {machine} |",
            "",
        ]
    if long is not None:
        md += [
            "| meeting | tokens in KV | prefill of the new part | TTFT median (max) | answer | KV held / full | RSS |",
            "|---|---|---|---|---|---|---|",
        ]
        md += [
            f"| {r['minutes']:.0f} min | {r['tokens']} | {r['prefill_s']:.1f} s ({r['prefill_words_per_s']} words/s) "
            f"| {r['ttft_s']:.2f} s ({r['ttft_max_s']:.2f} s) | {r['answer_s']:.2f} s "
            f"| {r['kv_bytes'] / 2**20:.1f} / {r['kv_full_bytes'] / 2**20:.1f} MiB | {r['rss_mib']:.0f} MiB |"
            for r in long["rows"]
        ]
    (out / "live_latency.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    if audio is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(audio["latencies"], bins=30, color="#4477aa")
    for q, style in (("latency_p50_s", "-"), ("latency_p95_s", "--")):
        ax.axvline(audio[q], color="k", linestyle=style, label=f"{q.split('_')[1]} {audio[q]:.2f} s")
    ax.axvline(2.0, color="g", linestyle=":", label="target p50 2.0 s")
    ax.axvline(3.3, color="r", linestyle=":", label="target p95 3.3 s")
    ax.set_xlabel("commit latency (s, word end -> commit)")
    ax.set_ylabel("words")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "live_latency.png", dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None)
    ap.add_argument("--sample", type=Path, default=ROOT / "samples" / "standup")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--realtime", action="store_true", help="pace the replay by the wall clock")
    ap.add_argument("--chunk", type=float, default=0.5, help="seconds of audio per capture chunk")
    ap.add_argument("--min-chunk", type=float, default=1.0, help="new audio needed before a decode")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--minutes", default=None, help="long-meeting part: e.g. 10,30,60 minutes of injected QMSum text")
    ap.add_argument("--qmsum", type=Path, default=qmsum_val())
    ap.add_argument("--skip-audio", action="store_true", help="only the long-meeting part")
    args = ap.parse_args(argv)
    settings = load_settings(args.config)
    machine = f"{os.cpu_count()} cores, {cpu_model()}, load avg {os.getloadavg()[0]:.1f} at start"
    audio = None if args.skip_audio else audio_part(args, settings)
    long = long_meeting_part(args, settings)
    write_outputs(args.out, audio, long, machine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
