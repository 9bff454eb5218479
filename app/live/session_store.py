"""A meeting's checkpoints in the encrypted session store: incremental saves and when the last one was."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from app.live.events import Slide
from app.text.transcript import TranscriptWord
from encoders.errors import InputError

if TYPE_CHECKING:
    from app.llm.context import ContextLine, MeetingContext
    from kvstore.persist import SaveReport
    from kvstore.timeline import TimelineIndex

FORMAT = "minutia.session/1"


@dataclass(frozen=True)
class SavedState:
    """The app state saved with a meeting's KV: the words and slides of the lines the KV holds, and the position
    up to which they cover the meeting (audio from there on is what a continuation has to bring again)."""

    source: str
    position: float
    received: float  # stream seconds received when saved
    lines: int
    last_speaker: str | None
    words: list[TranscriptWord]
    slides: list[Slide]
    timeline: TimelineIndex
    forgotten_names: tuple[str, ...] = ()  # names of speakers forgotten (app/live/forget.py): never given again
    kept_names: dict[str, str] = field(default_factory=dict)  # label -> name known before a forget: kept
    usage: dict = field(default_factory=dict)  # app.platform.cost.Usage as a dict: what the meeting used so far
    pii: dict = field(default_factory=dict)  # app.platform.config.PIISettings it was held under: a resume keeps to it

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "source": self.source,
            "stream_seconds": round(self.position, 3),
            "received_seconds": round(self.received, 3),
            "lines": self.lines,
            "last_line_speaker": self.last_speaker,
            "words": [[w.text, w.start, w.end, w.speaker, w.probability] for w in self.words],
            "slides": [[s.time, s.text] for s in self.slides],
            "timeline": self.timeline.to_dict(),
            "forgotten_names": list(self.forgotten_names),
            "kept_names": dict(self.kept_names),
            "usage": dict(self.usage),
            "pii": dict(self.pii),
        }

    @classmethod
    def from_dict(cls, meta: dict, session_id: str, source: str) -> SavedState:
        """``meta`` as saved; ``source`` where it names none."""
        if meta.get("format") != FORMAT:
            raise InputError(f"session {session_id} was not saved by a meeting session")
        from kvstore.timeline import TimelineIndex

        position = float(meta["stream_seconds"])
        return cls(
            source=meta.get("source", source),
            position=position,
            received=float(meta.get("received_seconds", position)),
            lines=int(meta.get("lines", 0)),
            last_speaker=meta.get("last_line_speaker"),
            words=[TranscriptWord(t, s, e, spk, p) for t, s, e, spk, p in meta["words"]],
            slides=[Slide(t, text) for t, text in meta["slides"]],
            timeline=TimelineIndex.from_dict(meta["timeline"]),
            forgotten_names=tuple(meta.get("forgotten_names", ())),
            kept_names={str(k): str(v) for k, v in (meta.get("kept_names") or {}).items()},
            usage=dict(meta.get("usage") or {}),
            pii=dict(meta.get("pii") or {}),
        )


@dataclass
class SavedMeeting:
    """A meeting loaded from the session store: its KV cache and the app state saved with it."""

    cache: Any
    metadata: dict


class LineMark(NamedTuple):
    """What the transcript held when a line closed: committed words, slides, the speaker of the last line."""

    words: int
    slides: int
    last_speaker: str | None


class LineLedger:
    """Closed lines on their way into the KV, each with its mark: a checkpoint saves the words and slides of the
    lines the KV holds (not of those still waiting), so that transcript, KV and position agree."""

    def __init__(self, base: LineMark = LineMark(0, 0, None), base_lines: int = 0) -> None:
        self.pending: deque[ContextLine] = deque()  # closed lines waiting for the LLM worker
        self.lined_words = base.words  # committed words in closed lines (the rest are in the open line)
        self._marks: list[LineMark] = []
        self.base = base  # what the KV held when this process took the meeting over
        self.base_lines = base_lines

    def add(self, line: ContextLine, words: int, slides: int, last_speaker: str | None) -> bool:
        """Queue ``line``, which closes ``words`` committed words (call under the session's lock). A blank line
        is not queued (the context would skip it): its words go with the next mark."""
        self.lined_words += words
        if not line.text.strip():
            return False
        self._marks.append(LineMark(self.lined_words, slides, last_speaker))
        self.pending.append(line)
        return True

    def mark(self, lines: int) -> LineMark:
        """What the transcript held when the KV's ``lines``-th line closed."""
        return self._marks[lines - self.base_lines - 1] if lines > self.base_lines else self.base

    def drain(self, context: MeetingContext) -> None:
        """Hand every waiting line to ``context``."""
        while self.pending:
            context.append(self.pending.popleft())


class Checkpoints:
    """Saves one meeting's KV cache with the app state that goes with it; blocks unchanged since the last save
    are not written again (kvstore.persist.SessionWriter, made on the first save)."""

    def __init__(self, open_store: Callable[[], Any], session_id: str, saved_lines: int = -1,
                 saved_seconds: float | None = None) -> None:
        self._open_store = open_store
        self.session_id = session_id
        self._writer = None
        self.saved_at = time.monotonic()  # wall clock of the last checkpoint
        self.saved_lines = saved_lines  # lines the KV held at the last checkpoint
        # stream seconds the last checkpoint covers: after a crash, audio from here on is brought again
        self.saved_seconds = saved_seconds

    @property
    def store(self) -> Any:
        """The session store the saves write to (None before the first save opened it)."""
        return None if self._writer is None else self._writer.store

    def save(self, context: MeetingContext, source: str, state: Callable[[], dict], rewrite: bool = False) -> SaveReport:
        """Save ``context``'s cache with ``state()`` (read under the context's lock, so that they agree).

        ``rewrite``: write every block again under ``source``, also those saved before with the same content
        under another source (a meeting rebuilt without one speaker, whose old source is shredded next)."""
        import torch

        from kvstore.persist import SessionWriter
        from kvstore.stores import StoreError

        if not hasattr(context.cache, "tiered_layers"):
            raise InputError("saving a meeting needs minutia's TieredCache (kv.enabled: true)")
        with context._lock:
            if self._writer is None or rewrite:
                self._writer = SessionWriter(self._open_store(), self.session_id, source=source, rewrite=rewrite)
            metadata = state()
            try:
                with torch.inference_mode():
                    report = self._writer.save(context.cache, metadata)
            except StoreError as exc:
                raise InputError(f"session {self.session_id} could not be saved: {exc}") from exc
            self.saved_at, self.saved_lines = time.monotonic(), metadata["lines"]
            self.saved_seconds = float(metadata["stream_seconds"])
        return report

    def due(self, every_seconds: float, lines: int) -> bool:
        """Whether an autosave is due: ``every_seconds`` have passed and the KV holds other lines than then."""
        return time.monotonic() - self.saved_at >= every_seconds and lines != self.saved_lines
