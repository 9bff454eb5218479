"""`minutia batch` (issue 20): recordings found and named, a manifest that lets a rerun skip finished work,
and the real thing on a local Ray runtime: two short recordings through the embedded models (Whisper base,
the diarizer, Gemma 3 270M) on two workers, a silent one reported as failed, a rerun that skips what is done,
and a worker that dies mid-recording replaced and its recording retried."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.batch.jobs import BatchJob, JobResult, Manifest, find_jobs
from app.platform.config import load_settings
from app.platform.models import EMBEDDED_ASR, EMBEDDED_LLM, models_dir
from encoders.errors import InputError

import batch_parts
from batch_parts import STANDUP, DiesOnceWorker, _cut, _silence

ROOT = Path(__file__).resolve().parent.parent
_HOME = load_settings().home
_MISSING = [m for m in (EMBEDDED_ASR, EMBEDDED_LLM) if not (models_dir(_HOME) / m / ".minutia-complete").is_file()]
needs_models = pytest.mark.skipif(bool(_MISSING), reason=f"embedded models {_MISSING} not provisioned in {_HOME}")


# ---- what a batch is made of -------------------------------------------------------------------


def test_recordings_are_found_in_folders_and_named_by_their_path(tmp_path):
    for rel in ("a.wav", "team/monday.ogg", "team/monday.mp3", ".hidden/x.wav", "notes.txt", "team/.cache/y.wav"):
        (tmp_path / "in" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / rel).write_bytes(b"x")
    single = tmp_path / "single.webm"
    single.write_bytes(b"y")
    jobs = find_jobs([tmp_path / "in", single, tmp_path / "in" / "a.wav"])  # a.wav named twice: processed once
    assert [j.name for j in jobs] == ["a", "team/monday", "team/monday-ogg", "single"]
    assert jobs[0].source == str((tmp_path / "in" / "a.wav").resolve()) and jobs[0].size == 1


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing", "not found"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "holds no recording"),
    (lambda d: (d / "notes.txt").write_text("hi") and d / "notes.txt", "is not a recording"),
])
def test_bad_inputs_are_refused_in_one_line(tmp_path, make, message):
    with pytest.raises(InputError, match=message):
        find_jobs([make(tmp_path)])


def test_the_manifest_says_finished_only_for_the_same_source_with_its_files(tmp_path):
    source = tmp_path / "m.wav"
    source.write_bytes(b"abc")
    out = tmp_path / "out"
    (out / "m").mkdir(parents=True)
    (out / "m" / "m.transcript.json").write_text("{}")
    job = BatchJob.of("m", source)
    manifest = Manifest(out)
    assert not manifest.finished(job)
    manifest.record(job, JobResult("m", "failed", error="boom"), attempts=2)
    assert not Manifest(out).finished(job)  # failed: a rerun tries again
    made = {"formats": ["json"], "summaries": False}
    manifest.record(job, JobResult("m", "done", outputs=["m/m.transcript.json"]), attempts=1, options=made)
    assert Manifest(out).finished(job) and Manifest(out).finished(job, made)
    assert not Manifest(out).finished(job, {"formats": ["json"], "summaries": True})  # summaries wanted now
    assert not Manifest(out).finished(job, {"formats": ["json", "srt"], "summaries": False})
    os.utime(source, ns=(job.mtime_ns + 10**9, job.mtime_ns + 10**9))
    assert not Manifest(out).finished(BatchJob.of("m", source))  # the recording changed since
    (out / "m" / "m.transcript.json").unlink()
    assert not Manifest(out).finished(job)  # its files are gone
    (out / "manifest.json").write_text("not json")
    with pytest.raises(InputError, match="not a minutia batch manifest"):
        Manifest(out)


# ---- on Ray ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_runtime():
    ray = pytest.importorskip("ray")
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(batch_parts)  # the test's worker class travels by value
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=128 * 1024 * 1024)
    yield ray
    ray.shutdown()


def test_a_worker_that_dies_is_replaced_and_its_recording_retried(tmp_path, ray_runtime):
    from app.batch.cluster import BatchOptions, run_batch

    inputs = [_silence(tmp_path / "in" / name) for name in ("crash.wav", "fine.wav")]
    settings = load_settings(None, {"home": str(tmp_path / "home")})
    jobs = find_jobs(inputs)

    report = run_batch(jobs, settings, BatchOptions(tmp_path / "out", workers=2, retries=0), worker_cls=DiesOnceWorker)
    by_name = {job["name"]: job for job in report.to_dict()["jobs"]}
    assert by_name["crash"]["status"] == "failed" and "died" in by_name["crash"]["error"]
    assert by_name["fine"]["status"] == "done"
    assert not (tmp_path / "out" / "crash").exists()  # nothing half-written

    report = run_batch(jobs, settings, BatchOptions(tmp_path / "out2", workers=1, retries=1), worker_cls=DiesOnceWorker)
    data = report.to_dict()
    by_name = {job["name"]: job for job in data["jobs"]}
    assert by_name["crash"]["status"] == "done" and by_name["crash"]["attempts"] == 2
    died = int((tmp_path / "out2" / ".died-crash").read_text())
    assert by_name["crash"]["worker"].split(":")[1] != str(died)  # a fresh worker finished it
    assert data["failed"] == 0 and data["done"] == 2
    index = [json.loads(line) for line in (tmp_path / "out2" / "index.jsonl").read_text().splitlines()]
    assert {(line["recording"], line["text"]) for line in index} == {("crash", "hello from crash"), ("fine", "hello from fine")}

    # the first output folder's failed recording is done by a rerun, the finished one skipped
    report = run_batch(jobs, settings, BatchOptions(tmp_path / "out", workers=1), worker_cls=DiesOnceWorker)
    assert [(j["name"], j["status"]) for j in report.to_dict()["jobs"]] == [("crash", "done"), ("fine", "skipped")]


def test_a_worker_the_cluster_cannot_place_is_refused(tmp_path, ray_runtime):
    from app.batch.cluster import BatchOptions, run_batch

    jobs = find_jobs([_silence(tmp_path / "in" / "a.wav", 0.5)])
    with pytest.raises(InputError, match="no node of the Ray cluster has 64 CPUs"):
        run_batch(jobs, load_settings(), BatchOptions(tmp_path / "out", cpus_per_worker=64), worker_cls=DiesOnceWorker)
    with pytest.raises(InputError, match="at least 1"):
        BatchOptions(tmp_path / "out", workers=0)


@pytest.mark.parametrize("args, message", [
    (["--ray-address", "127.0.0.1:1"], "no Ray cluster answers at 127.0.0.1:1"),
    (["--ray-address", "nonsense"], "must be 'auto' or HOST:PORT"),
    (["--formats", "json,pdf"], "unknown format(s) pdf"),
    (["--retries", "-1"], "--retries at least 0"),
])
def test_bad_batch_options_get_one_line_and_exit_2(tmp_path, args, message):
    recording = _silence(tmp_path / "a.wav", 0.5)
    script = Path(sys.executable).with_name("minutia")
    proc = subprocess.run([str(script), "batch", str(recording), "--out", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_sigterm_stops_the_batch_keeping_what_is_finished(tmp_path):
    import signal
    import time

    for name in ("quick", "slow"):
        _silence(tmp_path / "in" / f"{name}.wav", 0.5)
    script = f"import batch_parts; batch_parts.run_slow_batch({str(tmp_path / 'in')!r}, {str(tmp_path / 'out')!r})"
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parent, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MINUTIA_HOME": str(tmp_path / "home")})
    manifest = tmp_path / "out" / "manifest.json"
    deadline = time.monotonic() + 120
    while not (manifest.is_file() and "quick" in manifest.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    stderr = proc.communicate(timeout=60)[1]
    assert proc.returncode != 0 and "interrupted: 1 recording(s) finished" in stderr, stderr
    assert "SIGTERM received" not in stderr  # no C++ stack dump
    assert not (tmp_path / "out" / ".partial").exists() and not (tmp_path / "out" / "slow").exists()
    entries = json.loads(manifest.read_text())["jobs"]
    assert list(entries) == ["quick"] and entries["quick"]["status"] == "done"


def test_two_batches_cannot_write_one_folder(tmp_path):
    from app.batch.cluster import BatchOptions, run_batch
    from app.platform.store import ProcessLock

    held = ProcessLock(tmp_path / "out" / ".lock", "held")
    try:
        script = ("import sys; from app.batch.cluster import BatchOptions, run_batch; from app.platform.config import load_settings; "
                  f"run_batch([], load_settings(), BatchOptions({str(tmp_path / 'out')!r}))")
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode != 0 and "another minutia batch" in proc.stderr
    finally:
        held.release()
    assert run_batch([], load_settings(), BatchOptions(tmp_path / "out")).to_dict()["recordings"] == 0


@needs_models
def test_minutia_batch_on_a_local_ray_runtime(tmp_path):
    """The command as a user runs it: real models on two Ray workers, a failure reported, a rerun that skips."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(models_dir(_HOME), target_is_directory=True)
    _cut(tmp_path / "in" / "monday.wav", 0, 14)
    _cut(tmp_path / "in" / "team" / "tuesday.ogg", 24, 14)
    _silence(tmp_path / "in" / "silent.wav")
    script = Path(sys.executable).with_name("minutia")

    def batch(*extra):
        proc = subprocess.run([str(script), "batch", str(tmp_path / "in"), "--out", str(tmp_path / "out"),
                               "--workers", "2", "--json", *extra], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "MINUTIA_HOME": str(home)})
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        return proc.returncode, json.loads(proc.stdout)

    code, report = batch()
    assert code == 1  # the silent recording failed
    jobs = {job["name"]: job for job in report["jobs"]}
    assert jobs["silent"]["status"] == "failed" and "no speech" in jobs["silent"]["error"]
    assert not (tmp_path / "out" / "silent").exists()
    for name in ("monday", "team/tuesday"):
        job = jobs[name]
        assert job["status"] == "done", job
        assert job["asr_loads"] == 1 and job["llm_loads"] == 1  # models loaded once per worker
        stem = Path(name).name
        files = {p.name for p in (tmp_path / "out" / name).iterdir()}
        assert files == {f"{stem}.transcript.{f}" for f in ("json", "srt", "vtt", "md")} | {f"{stem}.summary.md", f"{stem}.summary.json"}
        transcript = json.loads((tmp_path / "out" / name / f"{stem}.transcript.json").read_text())
        assert len(transcript["turns"]) >= 2 and job["words"] >= 20
    assert "weekly meeting" in (tmp_path / "out" / "monday" / "monday.transcript.md").read_text().lower()
    assert len({jobs[n]["worker"] for n in ("monday", "team/tuesday", "silent")}) == 2  # spread over both workers
    assert report["done"] == 2 and report["failed"] == 1 and report["recording_hours_per_wall_hour"] > 0
    index = [json.loads(line) for line in (tmp_path / "out" / "index.jsonl").read_text().splitlines()]
    assert {line["recording"] for line in index} == {"monday", "team/tuesday"}
    assert json.loads((tmp_path / "out" / "report.json").read_text())["done"] == 2
    listed = subprocess.run([str(script), "library", "list", "--json"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "MINUTIA_HOME": str(home)})
    assert sorted(m["title"] for m in json.loads(listed.stdout)) == ["monday.wav", "tuesday.ogg"], listed.stderr

    (tmp_path / "in" / "silent.wav").unlink()
    code, report = batch()
    assert code == 0
    assert {job["name"]: job["status"] for job in report["jobs"]} == {"monday": "skipped", "team/tuesday": "skipped"}
    assert report["workers"] == 0  # nothing to do: no Ray runtime started
