"""What a live meeting is to whoever feeds it and asks it, wherever it runs: the local ``MeetingSession``
(app/live/session.py) and the bot's ``RemoteSession`` over a Ray room host (app/rooms/remote_session.py) both are
one. The bot's ``Meetings``, the page and the CLI's live loop depend on this, not on either class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from app.answering.answers import Answer
    from app.live.events import SessionEvent
    from app.live.session_view import SessionSnapshot
    from app.text.transcript import Transcript


@runtime_checkable
class LiveMeeting(Protocol):
    session_id: str

    @property
    def state(self) -> str:
        """"idle", "running", "finished", "closed" or "error"."""

    def feed_audio(self, samples: np.ndarray, sample_rate: int) -> None:
        """More of the meeting's audio (mono float32)."""

    def feed_video(self, frame: np.ndarray) -> None:
        """One video frame (HxWx3 uint8 RGB): slides are read from it."""

    def finish(self, timeout: float | None = None) -> None:
        """The input ended: commit the last words."""

    def ask(self, question: str) -> "Answer":
        """An answer from the meeting so far, citing its lines."""

    def snapshot(self) -> "SessionSnapshot":
        """The meeting's state for a page or a report."""

    def transcript(self) -> "Transcript":
        """What was said so far, by speaker."""

    def rename_speaker(self, speaker: str, name: str) -> str:
        """Call a speaker by name from now on (and in what was said); returns the name kept."""

    def keep_names(self, names: dict[str, str]) -> None:
        """Names known before anyone speaks (a room's participants)."""

    def subscribe(self, callback: Callable[["SessionEvent"], None]) -> Callable[[], None]:
        """Events as they happen; returns the call that stops them."""

    def close(self) -> None:
        """Let go of what the meeting holds."""
