"""Every container the batch path promises (wav, mp3, m4a, mp4, webm) decodes through PyAV to the same audio."""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from encoders.audio import SAMPLE_RATE, load_audio
from encoders.errors import InputError

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "standup" / "meeting.ogg"


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """The first 8 s of the sample as wav (the reference the other containers are compared to)."""
    if not shutil.which("ffmpeg"):
        pytest.fail("ffmpeg missing: `make sysdeps` installs it")
    out = tmp_path_factory.mktemp("formats") / "clip.wav"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(SAMPLE), "-t", "8", "-ar", "16000", "-ac", "1", str(out)],
                   check=True)
    return out


@pytest.mark.parametrize(
    "suffix,args",
    [
        (".mp3", ["-c:a", "libmp3lame", "-b:a", "64k"]),
        (".m4a", ["-c:a", "aac", "-b:a", "64k"]),
        (".mp4", ["-f", "lavfi", "-i", "color=c=white:s=160x120:d=8", "-shortest", "-c:v", "libx264", "-c:a", "aac"]),
        (".webm", ["-f", "lavfi", "-i", "color=c=white:s=160x120:d=8", "-shortest", "-c:v", "libvpx", "-c:a", "libopus"]),
    ],
)
def test_container_decodes_like_wav(clip: Path, suffix: str, args: list[str]) -> None:
    target = clip.with_suffix(suffix)
    # Video containers get a synthetic video stream beside the audio (the lavfi input in ``args``).
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(clip), *args, str(target)], check=True)
    reference, decoded = load_audio(clip), load_audio(target)
    assert abs(len(decoded) - len(reference)) < 0.15 * SAMPLE_RATE  # encoder padding only
    n = min(len(reference), len(decoded))
    # Lossy codecs shift samples a little: compare loudness envelopes in 100 ms frames.
    frames = n // 1600
    env_ref = np.sqrt((reference[: frames * 1600].reshape(frames, -1) ** 2).mean(1))
    env_dec = np.sqrt((decoded[: frames * 1600].reshape(frames, -1) ** 2).mean(1))
    assert np.corrcoef(env_ref, env_dec)[0, 1] > 0.95


def test_video_without_audio_is_a_clear_error(tmp_path: Path) -> None:
    target = tmp_path / "silent.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "color=c=black:s=64x64:d=1", "-c:v", "libx264",
                    str(target)], check=True)
    with pytest.raises(InputError, match="no audio stream"):
        load_audio(target)
