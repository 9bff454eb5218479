"""`minutia batch`: what to process, what is finished, and one recording's work.

A batch writes each recording's files into ``OUT/<name>/`` (the transcript in every format, the summary),
keeps ``OUT/manifest.json`` (what is finished, from which version of the source) and rebuilds
``OUT/index.jsonl`` (every turn of every finished recording, one JSON line each, for grep or jq).
The Ray side (workers, placement, retries) is app/batch/cluster.py.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from app.platform.config import Settings
from app.batch.pipeline import MEDIA_SUFFIXES
from app.text.transcript import WRITERS, atomic_write, load_transcript
from encoders.errors import InputError

MANIFEST = "manifest.json"
INDEX = "index.jsonl"
REPORT = "report.json"
PARTIAL = ".partial"  # a job's files are written here, then moved into place whole


@dataclass(frozen=True)
class BatchJob:
    """One recording: ``name`` is its output folder under OUT, ``size``/``mtime_ns`` the version processed."""

    name: str
    source: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, name: str, path: Path) -> "BatchJob":
        stat = path.stat()
        return cls(name, str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@dataclass
class JobResult:
    """What a worker reports for one job (``retriable``: a crash or an unexpected error, not bad input)."""

    name: str
    status: str  # done | failed
    seconds: float = 0.0
    duration: float = 0.0
    words: int = 0
    speakers: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    error: str | None = None
    retriable: bool = False
    worker: str = ""  # host:pid of the worker process
    node: str = ""  # the Ray node it ran on
    asr_loads: int = 0
    llm_loads: int = 0
    stages: dict[str, float] = field(default_factory=dict)  # seconds per step (models loaded on first use count there)


def find_jobs(inputs: Sequence[str | Path]) -> list[BatchJob]:
    """Recordings named, and every recording under each folder named (recursively), in a stable order.

    A folder's recordings are named by their path inside it (``team/monday.wav`` -> ``team/monday``);
    two recordings that would share a name get their suffix appended (``monday-mp3``).
    """
    found: list[tuple[str, Path]] = []
    for raw in inputs:
        path = Path(raw)
        if not path.exists():
            raise InputError(f"not found: {path}")
        if path.is_dir():
            media = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in MEDIA_SUFFIXES
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not media:
                raise InputError(f"{path} holds no recording ({', '.join(sorted(MEDIA_SUFFIXES))})")
            found += [(p.relative_to(path).with_suffix("").as_posix(), p) for p in media]
        elif path.suffix.lower() in MEDIA_SUFFIXES:
            found.append((path.stem, path))
        else:
            raise InputError(f"{path} is not a recording ({', '.join(sorted(MEDIA_SUFFIXES))})")
    jobs, names, seen = [], set(), set()
    for name, path in found:
        real = path.resolve()
        if real in seen:
            continue
        seen.add(real)
        base = name if name not in names else f"{name}-{path.suffix.lower().lstrip('.')}"
        name, k = base, 2
        while name in names:
            name, k = f"{base}~{k}", k + 1
        names.add(name)
        jobs.append(BatchJob.of(name, path))
    return jobs


class Manifest:
    """``OUT/manifest.json``: each finished or failed recording, with the source version it was made from.
    Only the driver writes it, after each job, atomically."""

    def __init__(self, out: Path):
        self.path = Path(out) / MANIFEST
        self.entries: dict[str, dict] = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
                self.entries = dict(data["jobs"])
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"{self.path} is not a minutia batch manifest ({exc}); move it away to start over") from None

    def finished(self, job: BatchJob, wanted: dict | None = None) -> bool:
        """Done from this very version of the source, with the outputs ``wanted`` (formats, summaries),
        every output still in place."""
        entry = self.entries.get(job.name)
        if not entry or entry.get("status") != "done":
            return False
        made = entry.get("options") or {}
        if wanted and (not set(wanted["formats"]) <= set(made.get("formats", ()))
                       or wanted["summaries"] and not made.get("summaries")):
            return False
        if (entry.get("source"), entry.get("size"), entry.get("mtime_ns")) != (job.source, job.size, job.mtime_ns):
            return False
        return all((self.path.parent / rel).is_file() for rel in entry.get("outputs", ()))

    def record(self, job: BatchJob, result: JobResult, attempts: int, options: dict | None = None) -> None:
        entry = asdict(job) | asdict(result) | {"attempts": attempts, "finished_at": time.time(), "options": options}
        entry.pop("retriable")
        self.entries[job.name] = entry
        atomic_write(self.path, json.dumps({"version": 1, "jobs": self.entries}, indent=1, ensure_ascii=False) + "\n")

    def write_index(self) -> Path:
        """``OUT/index.jsonl`` from the transcripts of every finished recording."""
        lines = []
        for name, entry in sorted(self.entries.items()):
            if entry.get("status") != "done":
                continue
            json_file = next((rel for rel in entry.get("outputs", ()) if rel.endswith(".transcript.json")), None)
            if json_file is None:
                continue
            transcript = load_transcript(self.path.parent / json_file)
            for turn in transcript.turns:
                lines.append(json.dumps({"recording": name, "start": turn.start, "end": turn.end,
                                         "speaker": turn.speaker, "text": turn.text}, ensure_ascii=False))
        return atomic_write(self.path.parent / INDEX, "".join(line + "\n" for line in lines))


def _ray_node() -> str:
    """The Ray node this process runs on ("" outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except ImportError:  # pragma: no cover - ray is a dependency
        return ""


class BatchWorker:
    """One worker's models, loaded on first use and kept for every recording it is given
    (a Ray actor in app/batch/cluster.py; a plain object works the same in one process)."""

    def __init__(self, settings: dict, cpus: int = 1, summaries: bool = True, formats: Sequence[str] = tuple(WRITERS)):
        from rich.console import Console

        from app.batch.pipeline import Recogniser

        self.settings = Settings(**settings)
        if self.settings.asr.cpu_threads == 0:
            self.settings.asr.cpu_threads = cpus
        try:
            import torch

            torch.set_num_threads(cpus)
        except ImportError:  # pragma: no cover - torch is a dependency
            pass
        self.summaries = summaries
        self.formats = list(formats)
        self.console = Console(file=io.StringIO(), stderr=False)  # progress bars would go nowhere useful
        self.recogniser = Recogniser(self.settings, self.console)
        self._assistant = None
        self._detector = None
        self.llm_loads = 0
        self.id = f"{os.uname().nodename}:{os.getpid()}"
        self.node = _ray_node()

    @property
    def assistant(self):
        if self._assistant is None:
            from app.llm.assistant import Assistant
            from app.llm.engine import LLMEngine

            self._assistant = Assistant(LLMEngine.from_settings(self.settings.llm, self.settings.home, self.settings.kv))
            self.llm_loads += 1
        return self._assistant

    @property
    def detector(self):
        if self._detector is None and self.settings.pii.mask_exports:
            from app.batch.exports import export_detector

            self._detector = export_detector(self.settings)
        return self._detector

    def run(self, job: BatchJob, out: str) -> JobResult:
        """Process ``job`` into ``out/<name>/``; the folder appears whole or not at all."""
        started = time.perf_counter()
        try:
            result = self._process(job, Path(out))
        except InputError as exc:
            result = JobResult(job.name, "failed", error=str(exc))
        except Exception as exc:  # noqa: BLE001 - one recording's failure is reported, the batch goes on
            result = JobResult(job.name, "failed", error=f"{type(exc).__name__}: {exc}", retriable=True)
        result.seconds = round(time.perf_counter() - started, 3)
        result.worker, result.node = self.id, self.node
        result.asr_loads, result.llm_loads = self.recogniser.loads, self.llm_loads
        return result

    def _process(self, job: BatchJob, out: Path) -> JobResult:
        from app.batch.exports import for_the_model, write_summary, write_transcript
        from app.batch.pipeline import load_meeting

        stem = Path(job.name).name
        partial = out / PARTIAL / f"{job.name.replace('/', '__')}.{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        stages, clock = {}, time.perf_counter()
        try:
            transcript = load_meeting(job.source, self.settings, self.console, self.recogniser)
            stages["transcript"] = round(time.perf_counter() - clock, 3)
            _, paths = write_transcript(transcript, self.settings, partial, f"{stem}.transcript", self.formats,
                                        self.detector)
            if self.summaries:
                summary = self.assistant.summarize(for_the_model(transcript, self.settings, self.detector))
                paths += write_summary(summary, transcript.source, self.settings, partial, stem, self.detector)[2]
                stages["summary"] = round(time.perf_counter() - clock - stages["transcript"], 3)
            final = out / job.name
            if final.exists():  # an earlier run's files for an older version of the source
                shutil.rmtree(final)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(partial, final)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        words = [w for turn in transcript.turns for w in turn.words]
        return JobResult(
            job.name, "done", duration=transcript.duration or 0.0, words=len(words),
            speakers=sorted({turn.speaker for turn in transcript.turns}),
            outputs=[(Path(job.name) / p.name).as_posix() for p in paths], stages=stages,
        )
