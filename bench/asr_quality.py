"""Word error rate and real-time factor of the batch transcription path on the bundled sample.

Runs the same code as `minutia transcribe` (faster-whisper with VAD and the anti-hallucination
guards, the embedded diarizer, per-word speakers) and scores it against the reference transcript:
WER with jiwer after number normalisation (samples/textnorm.py), speaker-attributed word accuracy,
and the real-time factor (wall time / audio duration) of ASR and diarization separately.

    .venv/bin/python bench/asr_quality.py [--config cpu-small] [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "samples"))

from textnorm import normalize  # noqa: E402

from app.platform.config import load_settings  # noqa: E402
from app.platform.models import EMBEDDED_ASR, resolve_model  # noqa: E402
from app.text.transcript import load_transcript  # noqa: E402
from encoders.asr import Transcriber, TranscribeOptions  # noqa: E402
from encoders.audio import SAMPLE_RATE, load_audio  # noqa: E402
from encoders.diarize import make_diarizer  # noqa: E402


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    import jiwer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None)
    ap.add_argument("--sample", type=Path, default=ROOT / "samples" / "standup")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    settings = load_settings(args.config)
    recording = next(p for p in sorted(args.sample.iterdir()) if p.suffix in {".ogg", ".wav", ".mp3"})
    reference = load_transcript(args.sample / "reference.json")
    audio = load_audio(recording, SAMPLE_RATE)
    duration = len(audio) / SAMPLE_RATE

    folder = resolve_model(settings.asr.model, settings.home, "ASR", EMBEDDED_ASR, "model.bin")
    transcriber = Transcriber(folder, settings.asr.device, settings.asr.compute_type, settings.asr.cpu_threads)
    options = TranscribeOptions(language=settings.asr.language, beam_size=settings.asr.beam_size)
    t0 = time.perf_counter()
    words = [w for seg in transcriber.transcribe(audio, options) for w in seg.words]
    asr_s = time.perf_counter() - t0

    diarizer = make_diarizer(settings.diarization.backend, settings.diarization.model, settings.diarization.embedding)
    t0 = time.perf_counter()
    diarizer.diarize(audio, SAMPLE_RATE)
    diar_s = time.perf_counter() - t0

    ref_text = normalize(" ".join(t.text for t in reference.turns))
    hyp_text = normalize(" ".join(w.text for w in words))
    wer = jiwer.wer(ref_text, hyp_text)
    result = {
        "sample": str(recording.relative_to(ROOT)),
        "audio_s": round(duration, 2),
        "asr_model": settings.asr.model,
        "compute_type": settings.asr.compute_type,
        "beam_size": settings.asr.beam_size,
        "wer": round(wer, 4),
        "asr_rtf": round(asr_s / duration, 4),
        "diarization_rtf": round(diar_s / duration, 4),
        "machine": f"{os.cpu_count()} cores, {cpu_model()}",
    }
    print(
        "| sample | audio | WER | ASR RTF | diarization RTF | machine |\n|---|---|---|---|---|---|\n"
        f"| {result['sample']} | {duration:.1f} s | {wer:.1%} | {result['asr_rtf']:.3f} | "
        f"{result['diarization_rtf']:.3f} | {result['machine']} |"
    )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "asr_quality.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
