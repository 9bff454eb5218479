"""Batch throughput (issue 20): recording-hours processed per wall-clock hour, side by side in one run.

Arms, each on the same recordings, each with a fresh MINUTIA_HOME (its models/ linked to the provisioned
ones, so no arm reuses another's cached transcripts):
  sequential   `minutia summarize REC` per recording, one after the other (what a user did before
               `minutia batch`: a process per recording, models loaded each time; it writes the transcript
               and the summary, as the batch does);
  batch-wN     `minutia batch DIR --workers N` on a local Ray runtime.

    .venv/bin/python bench/batch.py --suite bench/out/suite-dev-clean --limit 6 --workers 1,2 --out bench/out/batch

Writes results.json and results.md under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from app.platform.config import load_settings  # noqa: E402
from app.platform.models import models_dir  # noqa: E402
from app.batch.pipeline import MEDIA_SUFFIXES  # noqa: E402
from encoders.audio import SAMPLE_RATE, load_audio  # noqa: E402

console = Console(stderr=True)
MINUTIA = Path(sys.executable).with_name("minutia")


def _home(root: Path, name: str) -> Path:
    home = root / name
    home.mkdir(parents=True)
    (home / "models").symlink_to(models_dir(load_settings().home), target_is_directory=True)
    return home


def _run(args: list[str], home: Path) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MINUTIA_HOME": str(home)}
    started = time.perf_counter()
    proc = subprocess.run([str(MINUTIA), *args], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(args[:2])} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, required=True, help="a folder of recordings (a generated suite's seed folders)")
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts for the batch arms")
    ap.add_argument("--no-sequential", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "batch")
    args = ap.parse_args(argv)

    recordings = sorted(p for p in args.suite.rglob("*") if p.suffix.lower() in MEDIA_SUFFIXES)[: args.limit]
    if not recordings:
        raise SystemExit(f"error: no recordings under {args.suite}")
    audio_seconds = sum(len(load_audio(p, SAMPLE_RATE)) / SAMPLE_RATE for p in recordings)
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="minutia-batch-bench-") as tmp:
        root = Path(tmp)
        inputs = root / "in"
        for rec in recordings:  # one folder of recordings, named after their seed folders
            (inputs / f"{rec.parent.name}{rec.suffix}").parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(rec, inputs / f"{rec.parent.name}{rec.suffix}")
        arms = ([] if args.no_sequential else ["sequential"]) + [f"batch-w{w}" for w in workers]
        for arm in arms:
            home = _home(root, arm)
            console.print(f"[bold]{arm}[/]: {len(recordings)} recordings, {audio_seconds / 60:.1f} min of audio")
            if arm == "sequential":
                wall = sum(_run(["summarize", str(p), "--out", str(root / arm / "out")], home)
                           for p in sorted(inputs.iterdir()))
            else:
                out = root / arm / "out"
                wall = _run(["batch", str(inputs), "--out", str(out), "--workers", arm.split("-w")[1]], home)
                report = json.loads((out / "report.json").read_text())
                assert report["done"] == len(recordings), report
            rows.append({"arm": arm, "wall_seconds": round(wall, 1),
                         "recording_hours_per_wall_hour": round(audio_seconds / wall, 3)})
            console.print(f"  {wall:.0f} s: {audio_seconds / wall:.2f} recording-hours per hour")
    base = rows[0]["wall_seconds"]
    for row in rows:
        row["speedup_vs_first"] = round(base / row["wall_seconds"], 2)
    result = {"recordings": len(recordings), "audio_seconds": round(audio_seconds, 1), "suite": str(args.suite),
              "cpus": os.cpu_count(), "rows": rows}
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["| arm | wall s | recording-hours per hour | speed-up |", "|---|---|---|---|"]
    lines += [f"| {r['arm']} | {r['wall_seconds']} | {r['recording_hours_per_wall_hour']} | {r['speedup_vs_first']}x |"
              for r in rows]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
