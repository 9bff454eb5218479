"""What the page takes from people and what it tells them when something fails: recordings checked before a
meeting is given up for them, and failures said in one plain line (the detail stays in the server log)."""

from __future__ import annotations

import logging
from pathlib import Path

from encoders.errors import InputError

log = logging.getLogger(__name__)

UPLOAD_TYPES = [".wav", ".mp3", ".m4a", ".mp4", ".webm", ".ogg", ".opus", ".flac", ".mkv", ".mov", ".aac"]

def check_upload(path: str | Path, max_mb: float) -> Path:
    """A recording we can decode, under the size limit; else InputError with a message for the page."""
    import av

    path = Path(path)
    size_mb = path.stat().st_size / 1e6
    if size_mb > max_mb:
        raise InputError(f"{path.name} is {size_mb:.1f} MB; the limit is {max_mb:g} MB")
    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise InputError(f"{path.name} has no audio track")
            # a header can pass for audio while nothing after it decodes: one frame is decoded before the
            # meeting on the page is given up for it
            next(container.decode(audio=0))
    except InputError:
        raise
    except Exception as exc:  # av raises many kinds for non-media input
        log.info("upload %s refused: %r", path, exc)  # the detail for the server log, not the page
        raise InputError(f"{path.name} is not an audio or video recording this page can read") from exc
    return path


def user_message(exc: Exception) -> str:
    """What the page says about a failure: an InputError's own line; anything else could carry paths, errnos or
    exception names, so the page says something plain and the server log keeps the detail (logged here)."""
    if isinstance(exc, InputError):
        return str(exc) or "that input cannot be used"
    log.error("ui action failed", exc_info=exc)
    return "something went wrong on the server (the details are in its log); try again or start a new meeting"
