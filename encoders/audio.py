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


_OGG_PAGE = b"OggS"
_OGG_MAX_PAGE = 27 + 255 + 255 * 255  # header, segment table, payload


def cut_off(path: str | Path, decoded_seconds: float | None = None) -> str | None:
    """Why ``path`` looks cut off (its end missing: a copy or an upload that stopped early), or None when it looks
    whole or its format cannot tell. Decoders stop quietly at such an end, so a transcript would end there with no
    word of warning.

    - Ogg: the last page must be whole and mark the end of its stream (RFC 3533's end-of-stream flag).
    - WAV: the RIFF header's size must fit in the file (0 and 0xFFFFFFFF mean a live writer that never knew it).
    - Others: the container's own duration, when it states one, must be decoded (``decoded_seconds``), less a second.
    """
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(12)
        if head[:4] == _OGG_PAGE:
            f.seek(max(0, size - _OGG_MAX_PAGE))
            tail = f.read()
            at = tail.rfind(_OGG_PAGE)
            page = tail[at:]
            if at < 0 or len(page) < 27 or len(page) < 27 + page[26]:
                return f"{path.name} looks cut off: it stops in the middle of its last page of sound"
            length = 27 + page[26] + sum(page[27:27 + page[26]])
            if length > len(page):
                return f"{path.name} looks cut off: it stops in the middle of its last page of sound"
            if not page[5] & 0x04:
                return f"{path.name} looks cut off: it stops without the mark that ends a whole recording"
            return None
        if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
            declared = int.from_bytes(head[4:8], "little")
            if declared not in (0, 0xFFFFFFFF) and declared + 8 > size:
                return f"{path.name} looks cut off: it holds {size:,} of the {declared + 8:,} bytes its header promises"
            return None
    if decoded_seconds is None:
        return None
    import av

    try:
        with av.open(str(path)) as container:
            stated = container.duration / 1_000_000 if container.duration else None
    except (av.error.FFmpegError, ValueError):
        return None
    if stated is not None and decoded_seconds < stated - 1.0:
        return f"{path.name} looks cut off: {decoded_seconds:.0f} s of its {stated:.0f} s play"
    return None


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


def to_mono_16k(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """Any PCM layout a browser or WebRTC track gives -> float32 mono at 16 kHz."""
    audio = np.asarray(samples)
    if sample_rate <= 0:
        raise InputError(f"sample rate must be positive, got {sample_rate}")
    if audio.dtype.kind in "iu":  # integer PCM: scale to [-1, 1] by the type's range
        audio = audio.astype(np.float32) / float(np.iinfo(audio.dtype).max + 1)
    elif audio.dtype.kind != "f":
        raise InputError(f"audio samples must be float or integer PCM, got dtype {audio.dtype}")
    if audio.ndim == 2:
        # (n, channels) as browsers send; a (channels, n) block with few rows (WebRTC frames) is transposed
        if audio.shape[0] <= 8 and audio.shape[1] > audio.shape[0]:
            audio = audio.T
        audio = audio.mean(axis=1)
    elif audio.ndim != 1:
        raise InputError(f"audio must be (n,) or (n, channels), got shape {audio.shape}")
    audio = audio.astype(np.float32, copy=False)
    if not np.isfinite(audio).all():
        raise InputError("audio contains NaN or infinite samples")
    if sample_rate != SAMPLE_RATE:
        audio = resample(audio, sample_rate, SAMPLE_RATE)
    return audio
