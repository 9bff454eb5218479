"""A recording whose end is missing (a copy or an upload that stopped early) is said to be cut off: decoders stop
quietly where such a file ends, so a transcript would end there with no word of warning (issue 49)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from app.batch.pipeline import Recogniser
from app.platform.config import load_settings
from encoders.audio import cut_off, load_audio
from encoders.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
OGG = ROOT / "samples" / "standup" / "meeting.ogg"
WEBM = ROOT / "samples" / "standup-video" / "meeting.webm"


def _cut(source: Path, folder: Path, keep: int, suffix: str) -> Path:
    path = folder / f"cut{suffix}"
    path.write_bytes(source.read_bytes()[:keep])
    return path


def _wav(path: Path, seconds: float) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.zeros(int(16000 * seconds), np.int16).tobytes())
    return path


def test_whole_recordings_are_not_cut_off(tmp_path):
    assert cut_off(OGG) is None
    assert cut_off(_wav(tmp_path / "whole.wav", 2.0)) is None
    assert cut_off(WEBM, len(load_audio(WEBM)) / 16000) is None


def test_an_ogg_cut_inside_a_page_or_at_a_page_edge(tmp_path):
    data = OGG.read_bytes()
    assert "looks cut off" in cut_off(_cut(OGG, tmp_path, len(data) // 2 + 13, ".ogg"))
    edge = data.index(b"OggS", len(data) // 2)  # a whole page ends here, but not the stream
    assert "without the mark that ends a whole recording" in cut_off(_cut(OGG, tmp_path, edge, ".ogg"))


def test_a_wav_shorter_than_its_header(tmp_path):
    whole = _wav(tmp_path / "whole.wav", 2.0)
    assert "bytes its header promises" in cut_off(_cut(whole, tmp_path, 20_000, ".wav"))


def test_a_container_that_states_its_length(tmp_path):
    cut = _cut(WEBM, tmp_path, WEBM.stat().st_size // 2, ".webm")
    seconds = len(load_audio(cut)) / 16000
    assert f"{seconds:.0f} s of its" in cut_off(cut, seconds)
    assert cut_off(cut) is None  # without what was decoded, a container file cannot tell


def test_the_batch_path_warns_before_it_transcribes(tmp_path):
    cut = _cut(_wav(tmp_path / "silence.wav", 3.0), tmp_path, 40_000, ".wav")
    console = Console(record=True, width=200)
    with pytest.raises(InputError, match="no speech"):
        Recogniser(load_settings(None), console).recognise(cut)
    assert "warning: cut.wav looks cut off" in console.export_text()
