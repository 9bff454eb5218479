"""Decode any recording (wav, ogg, mp3, m4a, video files) to the one format every encoder takes.

The convention across encoders is mono float32 at 16 kHz; decoding and resampling live here so
no encoder has to care about containers or sample rates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from encoders.errors import InputError

SAMPLE_RATE = 16000


def load_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Decode the first audio stream of ``path`` to mono float32 at ``sample_rate`` with PyAV (FFmpeg)."""
    import av  # heavy; only needed when a file is actually decoded

    path = Path(path)
    if not path.is_file():
        raise InputError(f"audio file not found: {path}")
    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise InputError(f"{path} has no audio stream")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
            chunks: list[np.ndarray] = []
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):  # flush the resampler's buffered tail
                chunks.append(out.to_ndarray().reshape(-1))
    except InputError:
        raise
    except (av.error.FFmpegError, ValueError) as exc:
        raise InputError(f"cannot decode audio from {path}: {exc}") from exc
    if not chunks:
        raise InputError(f"{path} contains no audio samples")
    return np.ascontiguousarray(np.concatenate(chunks), dtype=np.float32)


def check_audio(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Validate the in-memory convention once, so encoders can fail with one clear line."""
    if sample_rate <= 0:
        raise InputError(f"sample rate must be positive, got {sample_rate}")
    audio = np.asarray(audio)
    if audio.ndim != 1:
        raise InputError(f"audio must be mono (1-D), got shape {audio.shape}")
    if audio.size == 0:
        raise InputError("audio is empty")
    if not np.issubdtype(audio.dtype, np.floating):
        raise InputError(f"audio must be float samples in [-1, 1], got dtype {audio.dtype}")
    audio = audio.astype(np.float32, copy=False)
    if not np.isfinite(audio).all():
        raise InputError("audio contains NaN or infinite samples")
    return audio


def resample(audio: np.ndarray, orig_rate: int, target_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Resample in memory (callers that did not decode through :func:`load_audio`)."""
    if orig_rate == target_rate:
        return audio
    import librosa

    return librosa.resample(audio, orig_sr=orig_rate, target_sr=target_rate).astype(np.float32)
