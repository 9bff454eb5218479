"""Decode the video stream of a recording to timed RGB frames, the one format the vision encoders take."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from encoders.errors import InputError


def has_video(path: str | Path) -> bool:
    """Whether ``path`` opens and holds a video stream (replay uses this to decide whether to feed frames)."""
    import av

    try:
        with av.open(str(path)) as container:
            return bool(container.streams.video)
    except (av.error.FFmpegError, ValueError, OSError):
        return False


def read_video_frames(path: str | Path, fps: float | None = None) -> Iterator[tuple[float, np.ndarray]]:
    """Yield ``(time in seconds, HxWx3 uint8 RGB frame)`` from the first video stream of ``path``.

    ``fps`` thins the stream to at most that many frames per second (the first frame at or after each
    1/fps step); None yields every decoded frame. Frames are decoded lazily, one at a time, so memory
    does not grow with the length of the recording.
    """
    import av

    path = Path(path)
    if not path.is_file():
        raise InputError(f"video file not found: {path}")
    if fps is not None and fps <= 0:
        raise InputError(f"fps must be positive, got {fps}")
    last_slot = -1  # index of the last 1/fps slot a frame was yielded for
    produced = 0
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputError(f"{path} has no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for frame in container.decode(stream):
                if frame.time is None:  # a frame without a timestamp cannot be placed on the timeline
                    continue
                t = float(frame.time)
                if fps is not None:
                    slot = int(np.floor(t * fps + 1e-6))
                    if slot <= last_slot:
                        continue
                    last_slot = slot
                produced += 1
                yield t, frame.to_ndarray(format="rgb24")
    except InputError:
        raise
    except (av.error.FFmpegError, ValueError) as exc:
        raise InputError(f"cannot decode video from {path}: {exc}") from exc
    if not produced:
        raise InputError(f"{path} contains no video frames")
