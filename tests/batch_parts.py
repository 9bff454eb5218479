"""Parts the batch tests share: short recordings cut from the bundled stand-up, silence, and a worker that dies."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from app.batch.jobs import BatchWorker, JobResult

ROOT = Path(__file__).resolve().parent.parent
STANDUP = ROOT / "samples" / "standup" / "meeting.ogg"


def _cut(target: Path, start: float, seconds: float) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-ss", str(start), "-t", str(seconds), "-i", str(STANDUP),
                    str(target)], check=True)
    return target


def _silence(target: Path, seconds: float = 2.0) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono", "-t",
                    str(seconds), str(target)], check=True)
    return target


class DiesOnceWorker(BatchWorker):
    """A worker whose process exits the first time it is given a recording named ``crash*`` (as an OOM kill
    or a segfault would end it); the work itself is a stand-in that writes one file, no models."""

    def run(self, job, out):
        marker = Path(out) / f".died-{Path(job.name).name}"
        if Path(job.name).name.startswith("crash") and not marker.exists():
            marker.write_text(str(os.getpid()))
            os._exit(1)
        return super().run(job, out)

    def _process(self, job, out):
        folder = out / job.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{job.name}.transcript.json").write_text(
            json.dumps({"source": job.name, "turns": [{"speaker": "SPEAKER_00", "text": f"hello from {job.name}",
                                                          "start": 0.0, "end": 1.0}]}))
        return JobResult(job.name, "done", duration=1.0, outputs=[f"{job.name}/{job.name}.transcript.json"])


class SlowWorker(DiesOnceWorker):
    """The stand-in work, taking a minute for recordings named ``slow*`` (time to interrupt the batch)."""

    def _process(self, job, out):
        if Path(job.name).name.startswith("slow"):
            import time

            time.sleep(60)
        return super()._process(job, out)


def run_slow_batch(inputs: str, out: str) -> None:
    """A batch with SlowWorker, for a subprocess to run and a test to interrupt."""
    import sys

    import ray.cloudpickle

    from app.batch.jobs import find_jobs
    from app.batch.cluster import BatchOptions, run_batch
    from app.platform.config import load_settings

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    run_batch(find_jobs([inputs]), load_settings(), BatchOptions(Path(out), workers=2), worker_cls=SlowWorker)
