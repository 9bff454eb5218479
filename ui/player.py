"""The recording beside the transcript, so a click on a line's time plays what was said there.

The page serves a copy from its own media folder (the only folder it lets the browser read). Chromium
plays Ogg, Opus, WebM, WAV, MP3 and FLAC itself; other containers (m4a, mp4, mov, mkv, aac) may need
codecs a Debian build lacks, so their audio is decoded and written as Ogg Vorbis first.
"""

from __future__ import annotations

import html
import os
import shutil
from pathlib import Path
from urllib.parse import quote

PLAYABLE = (".ogg", ".opus", ".webm", ".wav", ".mp3", ".flac")


def playable_copy(source: Path, folder: Path) -> Path:
    """A copy of ``source``'s audio in ``folder`` that the browser can play; written whole, then renamed."""
    folder.mkdir(parents=True, exist_ok=True)
    suffix = source.suffix.lower()
    if suffix not in PLAYABLE:
        from encoders.audio import load_audio

        return _write_ogg(load_audio(source), folder)
    target, partial = folder / f"recording{suffix}", folder / f".partial{suffix}"
    shutil.copyfile(source, partial)
    os.replace(partial, target)
    return target


def _write_ogg(audio, folder: Path) -> Path:
    """16 kHz mono ``audio`` as ``folder``/recording.ogg (Ogg Vorbis), written whole, then renamed."""
    import soundfile

    from encoders.audio import SAMPLE_RATE

    target, partial = folder / "recording.ogg", folder / ".partial.ogg"
    soundfile.write(partial, audio, SAMPLE_RATE, format="OGG", subtype="VORBIS")
    os.replace(partial, target)
    return target


def player_html(path: Path | None) -> str:
    """An audio player for ``path`` (served through Gradio's file route), or nothing."""
    if path is None:
        return ""
    src = "gradio_api/file=" + quote(str(path.resolve()))
    return (f'<audio class="mt-audio" controls preload="metadata" src="{html.escape(src)}"></audio>'
            '<div class="mt-player-hint">Click a line\'s time (or a cited source) to hear it.</div>')


def muted_copy(source: Path, folder: Path, spans: list[tuple[float, float]], until: float | None = None,
               margin: float = 0.25) -> Path:
    """A playable copy of ``source`` (Ogg Vorbis, 16 kHz mono) with silence over ``spans`` (seconds, each widened
    by ``margin``) and nothing after ``until``: the player of a meeting one speaker was forgotten from keeps the
    others' voices and not theirs (what they say after the forget is not in it either)."""
    import numpy as np

    from encoders.audio import SAMPLE_RATE, load_audio

    audio = np.array(load_audio(source), dtype=np.float32)
    if until is not None:
        audio = audio[:max(0, int(until * SAMPLE_RATE))]
    for start, end in spans:
        a, b = max(0, int((start - margin) * SAMPLE_RATE)), max(0, int((end + margin) * SAMPLE_RATE))
        audio[a:b] = 0.0
    folder.mkdir(parents=True, exist_ok=True)
    return _write_ogg(audio, folder)
