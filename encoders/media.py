"""A recording decoded as a live stream: audio chunks and video frames interleaved in stream time.

Used to replay a file as if it were a meeting happening now (``minutia live``, the demo page, the
tests and the latency benchmark); decoding is incremental, so memory does not grow with the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from encoders.audio import SAMPLE_RATE
from encoders.errors import InputError


@dataclass(frozen=True)
class MediaItem:
    time: float  # stream time of the item's start, seconds
    audio: np.ndarray | None = None  # float32 mono 16 kHz
    frame: np.ndarray | None = None  # HxWx3 uint8 RGB


def iter_media(path: Path, chunk_seconds: float = 0.5, video_fps: float = 2.0) -> Iterator[MediaItem]:
    """Audio in ``chunk_seconds`` pieces and at most ``video_fps`` frames per second, in time order."""
    import av

    if not path.is_file():
        raise InputError(f"recording not found: {path}")
    if path.stat().st_size == 0:
        raise InputError(f"{path} is empty")
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, ValueError) as exc:
        raise InputError(f"cannot open {path} as a recording: {exc}") from exc
    with container:
        audio_stream = container.streams.audio[0] if container.streams.audio else None
        video_stream = container.streams.video[0] if container.streams.video else None
        if audio_stream is None and video_stream is None:
            raise InputError(f"{path} has neither an audio nor a video stream")
        streams = [s for s in (audio_stream, video_stream) if s is not None]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        chunk = max(1, int(chunk_seconds * SAMPLE_RATE))
        buffered: list[np.ndarray] = []
        buffered_len = 0
        emitted = 0  # audio samples handed out
        next_frame_time = 0.0
        try:
            for packet in container.demux(*streams):
                for frame in packet.decode():
                    if isinstance(frame, av.AudioFrame):
                        for out in resampler.resample(frame):
                            samples = out.to_ndarray().reshape(-1)
                            buffered.append(samples)
                            buffered_len += len(samples)
                        while buffered_len >= chunk:
                            data = np.concatenate(buffered)
                            yield MediaItem(emitted / SAMPLE_RATE, audio=data[:chunk].astype(np.float32))
                            emitted += chunk
                            buffered, buffered_len = [data[chunk:]], len(data) - chunk
                    elif isinstance(frame, av.VideoFrame) and frame.time is not None:
                        if frame.time + 1e-6 >= next_frame_time:
                            next_frame_time = frame.time + 1.0 / video_fps
                            yield MediaItem(float(frame.time), frame=frame.to_ndarray(format="rgb24"))
            for out in resampler.resample(None):
                buffered.append(out.to_ndarray().reshape(-1))
        except (av.error.FFmpegError, ValueError) as exc:
            raise InputError(f"cannot decode {path}: {exc}") from exc
        if buffered:
            data = np.concatenate(buffered)
            if len(data):
                yield MediaItem(emitted / SAMPLE_RATE, audio=data.astype(np.float32))
