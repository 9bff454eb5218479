"""Diarization error rate and speed of the embedded diarizer on the samples we can ship.

    .venv/bin/python bench/diarization.py [--out DIR] [--oracle-speakers] [--embedding ge2e]
                                          [--suite DIR] [--limit N] [--set switch_penalty=0.5 ...]

Samples: the real two-speaker recording inside the pyannote.audio wheel (sample.wav +
sample.rttm) and samples/standup (meeting.ogg + reference.rttm, three synthetic voices) when
present; with ``--suite DIR``, every meeting folder under DIR instead (meeting.wav,
reference.rttm, meta.json with ``condition``, as bench/suites/meetings.py writes them), with a
per-condition summary: speaker count right, median DER. DER is pyannote.metrics' DiarizationErrorRate with skip_overlap=False, at collar 0
(pyannote's own benchmark setting, the headline number) and at collar 0.25 s (the older NIST
habit), scored over the whole file. RTF is diarization wall time (VAD included, model loading
excluded) / audio duration; on a shared machine it varies with the load.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.resources
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from encoders.audio import load_audio  # noqa: E402
from encoders.diarize import EmbeddedDiarizer, SpeakerTurn  # noqa: E402
from encoders.speaker_embedding import BACKENDS  # noqa: E402


def read_rttm(path: Path) -> list[SpeakerTurn]:
    """SPEAKER lines of an RTTM file as turns (field 4 onset, 5 duration, 8 name)."""
    turns = []
    for line in path.read_text().splitlines():
        f = line.split()
        if f and f[0] == "SPEAKER":
            turns.append(SpeakerTurn(float(f[3]), float(f[3]) + float(f[4]), f[7]))
    return turns


def annotation(turns: list[SpeakerTurn], uri: str):
    from pyannote.core import Annotation, Segment

    ann = Annotation(uri=uri)
    for i, t in enumerate(turns):
        ann[Segment(t.start, t.end), i] = t.speaker
    return ann


def der(reference: list[SpeakerTurn], hypothesis: list[SpeakerTurn], collar: float, duration: float) -> dict:
    """DER and its components (fractions of reference speech), scored over the whole file."""
    from pyannote.core import Segment, Timeline
    from pyannote.metrics.diarization import DiarizationErrorRate

    metric = DiarizationErrorRate(collar=collar, skip_overlap=False)
    uem = Timeline([Segment(0, duration)])
    parts = metric(annotation(reference, "x"), annotation(hypothesis, "x"), uem=uem, detailed=True)
    total = parts["total"] or 1.0
    return {
        "der": parts["diarization error rate"],
        "missed": parts["missed detection"] / total,
        "false_alarm": parts["false alarm"] / total,
        "confusion": parts["confusion"] / total,
    }


def samples() -> list[tuple[str, Path, Path]]:
    pyannote_dir = Path(str(importlib.resources.files("pyannote.audio") / "sample"))
    found = [("pyannote-sample", pyannote_dir / "sample.wav", pyannote_dir / "sample.rttm")]
    standup = ROOT / "samples" / "standup"
    if (standup / "meeting.ogg").is_file() and (standup / "reference.rttm").is_file():
        found.append(("standup", standup / "meeting.ogg", standup / "reference.rttm"))
    return found


def suite_samples(folder: Path, limit: int | None = None) -> list[tuple[str, Path, Path, str]]:
    """(name, audio, rttm, condition) of each meeting folder under ``folder``."""
    found = []
    for meta in sorted(folder.glob("*/meta.json")):
        d = meta.parent
        audio = next((p for p in sorted(d.glob("meeting.*")) if p.suffix in (".wav", ".ogg", ".flac")), None)
        if audio is not None and (d / "reference.rttm").is_file():
            condition = json.loads(meta.read_text()).get("condition", "clean")
            found.append((d.name, audio, d / "reference.rttm", str(condition)))
    return found[:limit] if limit else found


def summarize(rows: list[dict]) -> list[dict]:
    """Per condition (and all together): meetings, speaker count right, median DER, RTF."""
    import statistics

    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["condition"], []).append(r)
        if r["condition"] != "clean":
            groups.setdefault("degraded (all)", []).append(r)
    groups["all"] = rows
    out = []
    for name, rs in groups.items():
        out.append({
            "condition": name,
            "meetings": len(rs),
            "count_right": sum(r["ref_speakers"] == r["hyp_speakers"] for r in rs) / len(rs),
            "median_der_0": statistics.median(r["collar_0"]["der"] for r in rs),
            "median_der_0.25": statistics.median(r["collar_0.25"]["der"] for r in rs),
            "mean_der_0.25": statistics.fmean(r["collar_0.25"]["der"] for r in rs),
            "rtf": sum(r["seconds"] for r in rs) / sum(r["duration_s"] for r in rs),
        })
    return out


def cpu_model() -> str:
    if Path("/proc/cpuinfo").is_file():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def parse_overrides(pairs: list[str], cls: type = EmbeddedDiarizer) -> dict:
    """``FIELD=VALUE`` pairs as keyword arguments for dataclass ``cls`` (values typed like its defaults)."""
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.name.startswith("_")}
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in fields or not hasattr(cls, key):
            raise SystemExit(f"unknown {cls.__name__} field {key!r}; fields: {', '.join(fields)}")
        default = getattr(cls, key)
        if isinstance(default, bool):
            if value.lower() not in ("true", "false", "1", "0"):
                raise SystemExit(f"{key} takes true or false, not {value!r}")
            out[key] = value.lower() in ("true", "1")
        else:
            out[key] = value if isinstance(default, str) else type(default)(value)
    return out


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write diarization.json here")
    ap.add_argument("--oracle-speakers", action="store_true", help="pass the reference speaker count")
    ap.add_argument("--embedding", choices=sorted(BACKENDS), default=EmbeddedDiarizer.embedding)
    ap.add_argument("--suite", type=Path, default=None, help="folder of generated meetings to score instead")
    ap.add_argument("--limit", type=int, default=None, help="only the first N suite meetings")
    ap.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="EmbeddedDiarizer overrides")
    ap.add_argument("--crop", type=float, default=None, metavar="SECONDS",
                    help="score only each recording's first SECONDS (short recordings: a voice memo, a quick test)")
    args = ap.parse_args(argv)
    if args.crop is not None and args.crop <= 0:
        raise SystemExit("error: --crop takes a positive number of seconds")
    console = Console(stderr=True)

    diarizer = EmbeddedDiarizer(embedding=args.embedding, **parse_overrides(args.set))
    todo = suite_samples(args.suite, args.limit) if args.suite else [(*x, "real") for x in samples()]
    rows = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("warming up (loading models)", total=len(todo) + 1)
        start = time.perf_counter()
        warm = load_audio(todo[0][1])[: 16000 * 15]  # has speech, so every model loads
        diarizer.diarize(warm)
        load_s = time.perf_counter() - start
        progress.advance(task)
        for name, audio_path, rttm_path, condition in todo:
            progress.update(task, description=f"diarizing {name}")
            audio = load_audio(audio_path)
            reference = read_rttm(rttm_path)
            if args.crop:
                audio = audio[: int(args.crop * 16000)]
                reference = [SpeakerTurn(t.start, min(t.end, args.crop), t.speaker) for t in reference if t.start < args.crop - 0.2]
            n_ref = len({t.speaker for t in reference})
            duration = len(audio) / 16000
            start, cpu = time.perf_counter(), time.process_time()
            hyp = diarizer.diarize(audio, num_speakers=n_ref if args.oracle_speakers else None)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            rows.append({
                "sample": name,
                "condition": condition,
                "duration_s": round(duration, 2),
                "ref_speakers": n_ref,
                "hyp_speakers": len({t.speaker for t in hyp}),
                "collar_0": der(reference, hyp, 0.0, duration),
                "collar_0.25": der(reference, hyp, 0.25, duration),
                "seconds": round(elapsed, 3),
                "cpu_seconds": round(cpu, 3),  # all threads; steadier than wall time under load
                "rtf": elapsed / duration,
            })
            progress.advance(task)

    command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
    machine = f"{os.cpu_count()} cores, {cpu_model()}"
    print(f"`{command}` (embedding {args.embedding}, {f'first {args.crop:g} s, ' if args.crop else ''}speaker count {'oracle' if args.oracle_speakers else 'estimated'}, "
          f"model load + warm-up {load_s:.1f} s)\n")
    print("| sample | condition | audio | speakers ref/hyp | DER collar 0 (miss/FA/conf) | DER collar 0.25 | RTF | machine |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        c0, c25 = r["collar_0"], r["collar_0.25"]
        print(f"| {r['sample']} | {r['condition']} | {r['duration_s']:.1f} s | {r['ref_speakers']}/{r['hyp_speakers']} "
              f"| {c0['der']:.1%} ({c0['missed']:.1%}/{c0['false_alarm']:.1%}/{c0['confusion']:.1%}) "
              f"| {c25['der']:.1%} | {r['rtf']:.3f} | {machine} |")
    summary = summarize(rows) if args.suite else []
    if summary:
        print("\n| condition | meetings | speaker count right | median DER collar 0 | median DER collar 0.25 | mean DER collar 0.25 | RTF |")
        print("|---|---|---|---|---|---|---|")
        for g in summary:
            print(f"| {g['condition']} | {g['meetings']} | {g['count_right']:.0%} | {g['median_der_0']:.1%} "
                  f"| {g['median_der_0.25']:.1%} | {g['mean_der_0.25']:.1%} | {g['rtf']:.3f} |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        report = {
            "command": command,
            "machine": {"nproc": os.cpu_count(), "cpu": cpu_model()},
            "load_s": load_s,
            "embedding": args.embedding,
            "oracle_speakers": args.oracle_speakers,
            "crop": args.crop,
            "settings": dataclasses.asdict(diarizer),
            "samples": rows,
            "summary": summary,
        }
        (args.out / "diarization.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
