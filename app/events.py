"""What a meeting session tells its listeners, one frozen dataclass per kind of event.

Listeners (the room bot, ``minutia live``) dispatch on the type (``match event: case LineClosed(line):``);
``kind`` is the event's name as logs and the tests see it. The bot's data-channel messages are built
from these events in one place (app/bot.py, ``RoomBot._on_event``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from app.answers import Answer
    from app.context import ContextLine
    from app.transcript import TranscriptWord


@dataclass(frozen=True)
class Slide:
    time: float
    text: str
    thumbnail: np.ndarray | None = None  # HxWx3 uint8, small


class SessionEvent:
    """Base of the events below; ``kind`` is the event's name (logs, tests), given as a class keyword."""

    kind: ClassVar[str]

    def __init_subclass__(cls, kind: str, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = kind


@dataclass(frozen=True)
class WordsCommitted(SessionEvent, kind="words"):
    """Words the recogniser committed, with their diarizer labels (SPEAKER_xx), in order."""

    words: tuple[TranscriptWord, ...]


@dataclass(frozen=True)
class LineClosed(SessionEvent, kind="line"):
    """A transcript line closed for the LLM (a sentence, or a speaker change); its speaker is a name once known."""

    line: ContextLine


@dataclass(frozen=True)
class TentativeChanged(SessionEvent, kind="tentative"):
    """The recogniser's uncommitted tail ("" once it is committed)."""

    text: str


@dataclass(frozen=True)
class SlideShown(SessionEvent, kind="slide"):
    """The vision worker read a new slide."""

    slide: Slide


@dataclass(frozen=True)
class Answered(SessionEvent, kind="answer"):
    """A question asked of the session was answered (in the asker's thread)."""

    answer: Answer


@dataclass(frozen=True)
class StateChanged(SessionEvent, kind="state"):
    """The session went "live" (input arrived) or "finished" (all input transcribed and prefilled)."""

    state: str


@dataclass(frozen=True)
class Failed(SessionEvent, kind="error"):
    """A worker failed: the session is in the "error" state with this message."""

    message: str
