"""`minutia batch` on Ray: recordings as tasks on worker actors (models loaded once per worker), placed by Ray.

Without an address a local Ray runtime is started for the run, so one machine works the same way as a
cluster (`--ray-address auto` or HOST:PORT joins one; its workers need minutia installed). A job that
fails on bad input is reported and not retried in the run; one whose worker died or hit an unexpected
error is retried up to ``retries`` times on a fresh worker. Finished jobs are skipped by a later run.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app.batch.jobs import PARTIAL, REPORT, BatchJob, BatchWorker, JobResult, Manifest
from app.platform.config import Settings
from app.platform.ray_cluster import join_ray, leave_ray
from app.platform.store import ProcessLock
from app.text.transcript import WRITERS, atomic_write
from encoders.errors import InputError

log = logging.getLogger(__name__)


@dataclass
class BatchOptions:
    out: Path
    ray_address: str | None = None  # None: a local Ray runtime for this run
    workers: int | None = None  # None: the cluster's CPUs / cpus_per_worker
    cpus_per_worker: int = 1
    retries: int = 1
    summaries: bool = True
    formats: Sequence[str] = tuple(WRITERS)

    def __post_init__(self):
        if self.cpus_per_worker < 1 or (self.workers is not None and self.workers < 1) or self.retries < 0:
            raise InputError("--workers and --cpus-per-worker must be at least 1, --retries at least 0")


@dataclass
class BatchReport:
    """``OUT/report.json``: this run's jobs and totals."""

    out: str
    ray_address: str
    workers: int
    wall_seconds: float = 0.0
    jobs: list[dict] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for job in self.jobs if job["status"] == status)

    @property
    def audio_seconds(self) -> float:
        return sum(job.get("duration", 0.0) for job in self.jobs if job["status"] == "done")

    def to_dict(self) -> dict:
        hours_per_hour = self.audio_seconds / self.wall_seconds if self.wall_seconds > 0 else None
        return asdict(self) | {"recordings": len(self.jobs), "done": self.count("done"),
                               "skipped": self.count("skipped"), "failed": self.count("failed"),
                               "audio_seconds": round(self.audio_seconds, 3),
                               "recording_hours_per_wall_hour": None if hours_per_hour is None else round(hours_per_hour, 3)}


def _capacity(options: BatchOptions, console: Console) -> int:
    """Workers the cluster can place at once (an actor Ray cannot place would hold its recording forever)."""
    import ray

    per_node = [int(node["Resources"].get("CPU", 0)) // options.cpus_per_worker
                for node in ray.nodes() if node.get("Alive")]
    fits = sum(per_node)
    if fits < 1:
        raise InputError(f"no node of the Ray cluster has {options.cpus_per_worker} CPUs for a worker "
                         f"(largest: {max(per_node, default=0) * options.cpus_per_worker})")
    if options.workers and options.workers > fits:
        console.print(f"[yellow]{options.workers} workers asked, the cluster has room for {fits}[/]")
    return min(options.workers or fits, fits)


def run_batch(jobs: Sequence[BatchJob], settings: Settings, options: BatchOptions, console: Console | None = None,
              worker_cls: type = BatchWorker, on_result: Callable[[JobResult], None] | None = None) -> BatchReport:
    """Process ``jobs`` not finished yet into ``options.out``; the report is also written as OUT/report.json."""
    console = console or Console(stderr=True)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    lock = ProcessLock(out / ".lock", f"another minutia batch (pid {{pid}}) is writing {out}")
    try:
        return _run(jobs, settings, options, console, worker_cls, on_result, out)
    finally:
        lock.release()


def _run(jobs, settings, options, console, worker_cls, on_result, out: Path) -> BatchReport:
    started = time.perf_counter()
    manifest = Manifest(out)
    shutil.rmtree(out / PARTIAL, ignore_errors=True)  # what workers of an interrupted run left (we hold the lock)
    wanted = {"formats": list(options.formats), "summaries": options.summaries}
    todo = [job for job in jobs if not manifest.finished(job, wanted)]
    report = BatchReport(str(out), options.ray_address or "local", 0)
    pending = {job.name for job in todo}
    results: dict[str, dict] = {job.name: {**manifest.entries[job.name], "status": "skipped", "seconds": 0.0}
                                for job in jobs if job.name not in pending}
    if todo:
        recorder = _LibraryRecorder(settings, out, console)
        try:
            report.workers = _schedule(todo, settings, options, console, worker_cls, manifest, results,
                                       _both(on_result, recorder, {job.name: job for job in todo}), out, wanted)
        finally:
            recorder.close()
    report.jobs = [results[job.name] | {"source": job.source} for job in jobs]
    shutil.rmtree(out / PARTIAL, ignore_errors=True)
    manifest.write_index()
    report.wall_seconds = round(time.perf_counter() - started, 3)
    atomic_write(out / REPORT, json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n")
    return report


def _both(on_result, recorder: "_LibraryRecorder", jobs: dict) -> Callable[[JobResult], None]:
    def each(result: JobResult) -> None:
        if result.status == "done":
            recorder.record(jobs[result.name])
        if on_result:
            on_result(result)
    return each


class _LibraryRecorder:
    """Each finished recording into the meeting library (app/library), from the transcript the batch wrote (masked
    as exported); done here, by the driver, so a cluster's workers on other machines write no library of their own.
    A recording the library cannot take is said once and costs the batch nothing."""

    def __init__(self, settings: Settings, out: Path, console: Console) -> None:
        self.settings, self.out, self.console = settings, out, console
        self.library = None
        self.failed = not settings.store.library

    def record(self, job: BatchJob) -> None:
        from app.library.record import open_library, record_meeting
        from app.text.transcript import load_transcript

        path = self.out / job.name / f"{Path(job.name).name}.transcript.json"
        if self.failed or not path.is_file():
            return
        try:
            self.library = self.library or open_library(self.settings)
            source = Path(job.source)
            record_meeting(self.library, load_transcript(path), title=source.name,
                           started=source.stat().st_mtime if source.exists() else None)
        except (InputError, OSError, sqlite3.Error) as exc:
            self.failed = True
            self.console.print(f"[yellow]warning:[/] recordings are not recorded in the library: {exc}")

    def close(self) -> None:
        if self.library is not None:
            self.library.close()


def _schedule(todo, settings, options, console, worker_cls, manifest, results, on_result, out: Path, wanted) -> int:
    import ray
    from ray.exceptions import RayActorError, RayError

    started_here = join_ray(options.ray_address)
    stop = _interrupt_on_sigterm()
    idle, running = [], {}
    try:
        workers = min(len(todo), _capacity(options, console))
        actor = ray.remote(num_cpus=options.cpus_per_worker)(worker_cls)
        make = lambda: actor.remote(settings.model_dump(mode="json"), options.cpus_per_worker,  # noqa: E731
                                    options.summaries, list(options.formats))
        idle += [make() for _ in range(workers)]
        queue, attempts = deque(todo), {job.name: 0 for job in todo}
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(), console=console) as progress:
            task = progress.add_task(f"batch on {workers} worker(s)", total=len(todo), failed=0)
            failed = 0
            while queue or running:
                while idle and queue:
                    job, worker = queue.popleft(), idle.pop()
                    attempts[job.name] += 1
                    running[worker.run.remote(job, str(out))] = (job, worker)
                ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    job, worker = running.pop(ref)
                    try:
                        result = ray.get(ref)
                        idle.append(worker)
                    except RayActorError as exc:  # the worker process died: a fresh one takes its place
                        log.warning("worker died on %s: %s", job.name, str(exc).splitlines()[0] if str(exc) else exc)
                        ray.kill(worker, no_restart=True)
                        idle.append(make())
                        result = JobResult(job.name, "failed", error="the worker processing it died", retriable=True)
                    except RayError as exc:  # Ray could not run the call (an object lost, a task error outside run)
                        idle.append(worker)
                        result = JobResult(job.name, "failed", retriable=True,
                                           error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                    if result.status == "failed" and result.retriable and attempts[job.name] <= options.retries:
                        queue.append(job)
                        continue
                    manifest.record(job, result, attempts[job.name], wanted)
                    results[job.name] = asdict(result) | {"attempts": attempts[job.name]}
                    failed += result.status == "failed"
                    progress.update(task, advance=1, failed=failed)
                    if on_result:
                        on_result(result)
        return workers
    except KeyboardInterrupt:
        for worker in idle + [worker for _, worker in running.values()]:
            ray.kill(worker, no_restart=True)  # a cluster's workers stop too, not only a local runtime's
        shutil.rmtree(out / PARTIAL, ignore_errors=True)
        done = sum(1 for r in results.values() if r["status"] == "done" and r.get("attempts"))
        console.print(f"[red]interrupted[/]: {done} recording(s) finished in this run are kept; "
                      "run the same command again to go on")
        raise
    finally:
        stop()
        if started_here:
            leave_ray()


def _interrupt_on_sigterm() -> Callable[[], None]:
    """SIGTERM ends the run as Ctrl-C does (Ray's handler would exit without shutting the runtime down);
    returns what puts the previous handler back."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)
