"""What a meeting session tells its listeners, one frozen dataclass per kind of event.

Listeners (the room bot, ``minutia live``) dispatch on the type (``match event: case LineClosed(line):``);
``kind`` is the event's name as logs and the tests see it. The bot's data-channel messages are built
from these events in one place (app/rooms/bot.py, ``RoomBot._on_event``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from threading import RLock

    from app.answering.answers import Answer
    from app.llm.context import ContextLine
    from app.text.transcript import TranscriptWord


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


class SessionOutput(NamedTuple):
    """Where a session's parts put what they make: lines for the KV (``append_line(line, words it closes)``),
    events for the listeners, and ``bump``, which tells readers the session changed; ``lock`` guards it all."""

    lock: RLock
    append_line: Callable[[ContextLine, int], None]
    emit: Callable[[SessionEvent], None]
    bump: Callable[[], None]


class Listeners:
    """The callbacks subscribed to one session's events, under the session's lock; a callback that raises is
    logged and the others still hear the event (a broken listener must not stop the meeting)."""

    def __init__(self, lock: RLock, session_id: str) -> None:
        self._lock = lock
        self._session_id = session_id
        self._callbacks: list[Callable[[SessionEvent], None]] = []

    def subscribe(self, callback: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Add ``callback``; returns the function that removes it."""
        with self._lock:
            self._callbacks.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return unsubscribe

    def emit(self, event: SessionEvent) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(event)
            except Exception:
                logging.getLogger("minutia.session").exception("session %s: listener failed on %s",
                                                               self._session_id, event.kind)
