"""What a meeting session tells its listeners, one frozen dataclass per kind of event.

Listeners (the room bot, ``minutia live``) dispatch on the type (``match event: case LineClosed(line):``);
``kind`` is the event's name as logs and the tests see it. The bot's data-channel messages are built
from these events in one place (app/bot.py, ``RoomBot._on_event``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Union

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


@dataclass(frozen=True)
class WordsCommitted:
    """Words the recogniser committed, with their diarizer labels (SPEAKER_xx), in order."""

    words: tuple[TranscriptWord, ...]
    kind: ClassVar[str] = "words"


@dataclass(frozen=True)
class LineClosed:
    """A transcript line closed for the LLM (a sentence, or a speaker change); its speaker is a name once known."""

    line: ContextLine
    kind: ClassVar[str] = "line"


@dataclass(frozen=True)
class TentativeChanged:
    """The recogniser's uncommitted tail ("" once it is committed)."""

    text: str
    kind: ClassVar[str] = "tentative"


@dataclass(frozen=True)
class SlideShown:
    slide: Slide
    kind: ClassVar[str] = "slide"


@dataclass(frozen=True)
class Answered:
    answer: Answer
    kind: ClassVar[str] = "answer"


@dataclass(frozen=True)
class StateChanged:
    state: str  # "live" | "finished"
    kind: ClassVar[str] = "state"


@dataclass(frozen=True)
class Failed:
    """A worker failed: the session is in the "error" state with this message."""

    message: str
    kind: ClassVar[str] = "error"


SessionEvent = Union[WordsCommitted, LineClosed, TentativeChanged, SlideShown, Answered, StateChanged, Failed]
