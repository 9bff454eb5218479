"""`minutia` on bad input: exit code 2, one `error:` line on stderr, no traceback, no output files.

Every case runs with an empty MINUTIA_HOME: it must fail on the input itself, before any model is
needed (a case that reached model loading would report unprovisioned models instead).
"""

from __future__ import annotations

import os
import subprocess
import sys
import wave
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STANDUP = ROOT / "samples" / "standup"


def _minutia() -> list[str]:
    script = Path(sys.executable).with_name("minutia")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "app.cli"]


def run_cli(args: list[str], home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINUTIA_")}
    env.update(MINUTIA_HOME=str(home), COLUMNS="80", HF_HUB_OFFLINE="1")
    return subprocess.run([*_minutia(), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def assert_input_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got {lines}"
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert proc.stdout == ""
    return lines[0]


@pytest.fixture
def home(tmp_path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def out(tmp_path, home):
    """The --out folder; after the test it must not exist (nothing written) and the home stays empty."""
    path = tmp_path / "out"
    yield path
    assert not path.exists() or not any(path.iterdir()), sorted(path.rglob("*"))
    assert not any(home.iterdir()), sorted(home.rglob("*"))


def _silence(path: Path, seconds: float = 3.0, rate: int = 16000) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * int(seconds * rate))
    return path


@pytest.mark.parametrize("command", ["transcribe", "summarize", "ask"])
def test_missing_file(tmp_path, home, out, command):
    missing = tmp_path / "nope.wav"
    args = [command, str(missing)] + (["What?"] if command == "ask" else ["--out", str(out)])
    assert_input_error(run_cli(args, home), "not found", "nope.wav")


def test_empty_recording(tmp_path, home, out):
    empty = tmp_path / "x.wav"
    empty.touch()
    assert_input_error(run_cli(["transcribe", str(empty), "--out", str(out)], home), "x.wav", "empty")


def test_corrupt_recording(tmp_path, home, out):
    corrupt = tmp_path / "a-recording-with-a-rather-long-name-so-the-message-is-longer-than-a-terminal.mp3"
    corrupt.write_bytes(os.urandom(20_000))
    line = assert_input_error(run_cli(["transcribe", str(corrupt), "--out", str(out)], home), "cannot decode")
    assert len(line) > 80  # a long message stays on one line (no wrapping at the console width)


def test_unsupported_suffix(tmp_path, home, out):
    path = tmp_path / "notes.xyz"
    path.write_text("Alice: hello\n")
    assert_input_error(run_cli(["summarize", str(path), "--out", str(out)], home), "unsupported file type", ".xyz")


def test_silence_only_recording(tmp_path, home, out):
    wav = _silence(tmp_path / "quiet.wav")
    assert_input_error(run_cli(["transcribe", str(wav), "--out", str(out)], home), "no speech", "quiet.wav")


@pytest.mark.parametrize("command", ["summarize", "ask"])
def test_transcript_without_speech(tmp_path, home, out, command):
    path = tmp_path / "silent.json"
    path.write_text('{"turns": [{"speaker": "A", "text": "  "}]}')
    args = [command, str(path)] + (["What?"] if command == "ask" else ["--out", str(out)])
    assert_input_error(run_cli(args, home), "no speech")


@pytest.mark.parametrize("question", ["", "   "])
def test_empty_question(home, question):
    assert_input_error(run_cli(["ask", str(STANDUP / "reference.json"), question], home), "question is empty")


def test_transcribe_needs_a_recording(home, out):
    assert_input_error(
        run_cli(["transcribe", str(STANDUP / "reference.json"), "--out", str(out)], home), "not a recording"
    )


def test_unknown_output_format(home, out):
    assert_input_error(
        run_cli(["transcribe", str(STANDUP), "--formats", "json,pdf", "--out", str(out)], home), "pdf", "json"
    )


def test_unknown_preset(home, out):
    assert_input_error(
        run_cli(["summarize", str(STANDUP / "reference.json"), "--config", "nope", "--out", str(out)], home),
        "nope", "cpu-small", "gpu-8b",
    )


def test_llm_folder_without_config(tmp_path, home, out):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    proc = run_cli(["summarize", str(STANDUP / "reference.json"), "--llm", str(folder), "--out", str(out)], home)
    assert_input_error(proc, "no config.json")


def test_unprovisioned_models(home, out):
    proc = run_cli(["summarize", str(STANDUP / "reference.json"), "--out", str(out)], home)
    assert_input_error(proc, "minutia models")


def test_brackets_in_paths_are_kept(tmp_path, home, out):
    path = tmp_path / "[bold]meeting[/bold].wav"  # not read as console markup
    assert_input_error(run_cli(["transcribe", str(path), "--out", str(out)], home), "[bold]meeting[/bold].wav")


@pytest.mark.parametrize("command", ["transcribe", "summarize"])
def test_an_output_folder_that_cannot_be_written_fails_first(tmp_path, home, command):
    """--out a file, or a folder under a file: refused before any model work (it used to be a traceback after
    the whole transcription or summary)."""
    meeting = STANDUP if command == "transcribe" else STANDUP / "reference.json"
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert_input_error(run_cli([command, str(meeting), "--out", str(blocker)], home), "is a file")
    assert_input_error(run_cli([command, str(meeting), "--out", str(blocker / "sub")], home), "cannot create")
    assert blocker.read_text() == "x"


@pytest.mark.parametrize("body, fragment", [
    ('{"meeting_transcripts": 5}', "must be a list"),
    ('{"meeting_transcripts": null}', "must be a list"),
    ('{"meeting_transcripts": [{"speaker": "A", "content": "hello"}, {"speaker": "B"}]}', "turn 2 needs"),
    ('{"meeting_transcripts": [{"speaker": 3, "content": "hi"}]}', "turn 1 needs"),
    ('{"turns": [{"speaker": "A", "text": "hi", "start": NaN}]}', "malformed turn"),
    ('{"turns": [{"speaker": "A", "text": "hi", "start": -4}]}', "malformed turn"),
    ('{"turns": [{"speaker": "A", "text": "hi", "words": [{"text": "hi", "start": Infinity, "end": 1, '
     '"speaker": "A"}]}]}', "malformed turn"),
    ('{"turns": [{"speaker": "A", "text": "hi", "words": [{"text": "hi", "start": "x", "end": 1, '
     '"speaker": "A"}]}]}', "malformed turn"),
])
def test_malformed_transcript_json(tmp_path, home, out, body, fragment):
    path = tmp_path / "meeting.json"
    path.write_text(body)
    assert_input_error(run_cli(["summarize", str(path), "--out", str(out)], home), fragment)


def test_a_failed_command_leaves_no_empty_output_folder(tmp_path):
    """Issue 49: `--out` folders made for a command that then failed on its input stayed behind, empty."""
    junk = tmp_path / "junk.ogg"
    junk.write_bytes(bytes(range(256)) * 20)
    out = tmp_path / "new" / "deeper"
    proc = run_cli(["transcribe", str(junk), "--out", str(out)], tmp_path / "home")
    assert_input_error(proc, "junk.ogg")
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    assert_input_error(run_cli(["transcribe", str(junk), "--out", str(kept)], tmp_path / "home"), "junk.ogg")
    assert (kept / "notes.txt").read_text() == "mine"  # a folder that was there stays
