"""The batch path on the bundled stand-up with the real embedded models (Whisper base, Gemma 3 270M).

Needs the models provisioned in MINUTIA_HOME (`minutia models`; `make test` does it). The commands run
with a fresh home of their own (its models/ linked to the provisioned ones), so the recording really is
transcribed in every run, once, and the later commands reuse that transcript from the home's cache.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.platform.config import load_settings
from app.platform.models import EMBEDDED_ASR, EMBEDDED_LLM, models_dir

ROOT = Path(__file__).resolve().parent.parent
STANDUP = ROOT / "samples" / "standup"
sys.path.insert(0, str(ROOT / "samples"))
from textnorm import normalize  # noqa: E402

_HOME = load_settings().home
_MISSING = [m for m in (EMBEDDED_ASR, EMBEDDED_LLM) if not (models_dir(_HOME) / m / ".minutia-complete").is_file()]
pytestmark = pytest.mark.skipif(
    bool(_MISSING), reason=f"embedded models {_MISSING} not provisioned in {_HOME}: run `minutia models` (make test does)"
)


_RUN_HOME: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def fresh_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("home")
    (home / "models").symlink_to(models_dir(_HOME), target_is_directory=True)
    _RUN_HOME[:] = [home]
    return home


def _minutia(*args: str, timeout: float = 300) -> dict:
    script = Path(sys.executable).with_name("minutia")
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "app.cli"]
    proc = subprocess.run([*cmd, *args, "--json"], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "MINUTIA_HOME": str(_RUN_HOME[0])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads((STANDUP / "reference.json").read_text())


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def transcript(out_dir) -> dict:
    return _minutia("transcribe", str(STANDUP), "--out", str(out_dir))


def _reference_turn_at(reference: dict, t: float) -> dict:
    return min(reference["turns"], key=lambda r: 0.0 if r["start"] <= t <= r["end"] else min(abs(t - r["start"]), abs(t - r["end"])))


def test_transcribe_writes_every_format(transcript, out_dir):
    for suffix in ("json", "srt", "vtt", "md"):
        path = out_dir / f"standup.transcript.{suffix}"
        assert path.is_file() and path.stat().st_size > 0, path
    assert json.loads((out_dir / "standup.transcript.json").read_text()) == transcript
    assert (out_dir / "standup.transcript.vtt").read_text().startswith("WEBVTT")
    srt = (out_dir / "standup.transcript.srt").read_text()
    assert re.search(r"^1\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\n", srt, re.MULTILINE)
    assert "**[00:0" in (out_dir / "standup.transcript.md").read_text()
    assert sorted(p.name for p in out_dir.iterdir() if p.name.startswith(".")) == []  # no temp files left


def test_transcribe_speakers_and_word_times(transcript, reference):
    assert transcript["format"] == "minutia.transcript/1"
    assert transcript["duration"] == pytest.approx(reference["duration"], abs=0.5)
    named = set(transcript["speakers"]) & {"Alice", "Bob", "Carol"}
    assert len(named) >= 2, transcript["speakers"]
    previous = 0.0
    words = [w for turn in transcript["turns"] for w in turn["words"]]
    assert len(words) > 200
    for turn in transcript["turns"]:
        assert turn["words"], turn
        assert turn["start"] == turn["words"][0]["start"] and turn["end"] == turn["words"][-1]["end"]
        for w in turn["words"]:
            assert w["speaker"] == turn["speaker"]
            assert previous - 0.05 <= w["start"] <= w["end"] <= transcript["duration"] + 0.05, w
            previous = w["start"]
    # Who spoke: most words carry the speaker of the reference turn at their time.
    right = sum(_reference_turn_at(reference, (w["start"] + w["end"]) / 2)["speaker"] == w["speaker"] for w in words)
    assert right / len(words) >= 0.85


def test_transcribe_word_error_rate(transcript, reference):
    import jiwer

    ref = normalize(" ".join(t["text"] for t in reference["turns"]))
    hyp = normalize(" ".join(t["text"] for t in transcript["turns"]))
    assert jiwer.wer(ref, hyp) <= 0.10, hyp


def test_ask_pilot_cost(transcript, reference):
    answer = _minutia("ask", str(STANDUP), "How much will the pilot cost?")
    assert "12000" in answer["text"].replace(",", "").replace("$", "") or "12000" in normalize(answer["text"]), answer
    said = next(t for t in reference["turns"] if "twelve thousand" in t["text"])
    assert any(
        c["speaker"] == said["speaker"] and said["start"] - 1.0 <= c["start"] <= said["end"] for c in answer["citations"]
    ), answer["citations"]
    assert answer["parts"] == 1 and 0.0 < answer["confidence"] <= 1.0


def test_summarize_action_items(transcript, out_dir):
    summary = _minutia("summarize", str(STANDUP), "--out", str(out_dir))
    assert [a["owner"] for a in summary["action_items"]] == ["Bob", "Carol", "Alice"]
    for item, day in zip(summary["action_items"], ("Thursday", "Friday", "Wednesday")):
        assert item["due"] and day in item["due"], item
    assert len(summary["decisions"]) == 2
    assert any("12,000" in f["text"] or "12000" in normalize(f["text"]) for f in summary["key_facts"])
    assert summary["summary"].startswith("The meeting was about")
    assert json.loads((out_dir / "standup.summary.json").read_text()) == summary
    assert "| Bob |" in (out_dir / "standup.summary.md").read_text()


def test_ask_overlong_question_is_one_line_error(transcript):
    script = Path(sys.executable).with_name("minutia")
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "app.cli"]
    question = "What did they decide about the pilot budget and the launch date? " * 250  # > 1/4 of 8192 tokens
    proc = subprocess.run([*cmd, "ask", str(STANDUP), question], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "MINUTIA_HOME": str(_RUN_HOME[0])})
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: the question is"), lines
    assert "Traceback" not in proc.stderr and proc.stdout == ""
