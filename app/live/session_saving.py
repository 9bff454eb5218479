"""Where a live meeting is kept: its saves in the encrypted session store and its entry in the meeting library."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from app.live.session_store import Checkpoints, LineMark, SavedState
from app.platform.cost import REMOTE_TIERS
from encoders.errors import InputError

if TYPE_CHECKING:
    from threading import Event, RLock

    from app.live.events import Slide
    from app.live.session_names import SpeakerNames
    from app.live.session_speech import SpeechLines
    from app.live.session_store import LineLedger
    from app.llm.context import MeetingContext
    from app.platform.cost import UsageMeter
    from app.text.transcript import TranscriptWord
    from kvstore.persist import SaveReport
    from kvstore.timeline import TimelineIndex

log = logging.getLogger("minutia.session")


class Held(NamedTuple):
    """What a save keeps of a meeting (and a snapshot shows, app/live/session_view.py), as its session holds it: the
    session's own lock, lists and parts (shared, not copies) and its clock, (stream time at which this process's
    input starts, stream seconds heard)."""

    lock: RLock
    words: list[TranscriptWord]
    slides: list[Slide]
    timeline: TimelineIndex
    ledger: LineLedger
    speech: SpeechLines
    speech_done: Event
    names: SpeakerNames
    usage: UsageMeter
    clock: Callable[[], tuple[float, float]]


class MeetingSaver:
    """Saves a meeting's KV cache with the app state that goes with it (incrementally: app/live/session_store.py's
    Checkpoints) and records the meeting in the meeting library, so that ``minutia resume`` can continue it and
    the library can list and search it; counts what the saves hold and send in the meeting's use."""

    def __init__(self, session_id: str, source: str, settings: Any, held: Held, open_store: Callable[[], Any],
                 restored: bool, library: bool, started: float) -> None:
        """``restored``: the meeting was resumed from a save (its ledger and clock start there); ``library``: it
        goes into the meeting library though it is not saved; ``started``: when it began (wall clock)."""
        self._session_id = session_id
        self._source = source
        self._settings = settings
        self._held = held
        self._checkpoints = Checkpoints(open_store, session_id, held.ledger.base_lines if restored else -1,
                                        held.clock()[0] if restored else None)
        self.library = library
        self._started = started  # the library dates the meeting so, unless an earlier run of it is there

    @property
    def saved_seconds(self) -> float | None:
        """Stream seconds the last save covers (None before one)."""
        return self._checkpoints.saved_seconds

    @property
    def in_library(self) -> bool:
        """Whether the meeting goes into the meeting library (saved, or opened for it)."""
        return self.library and self._settings.store.library

    def due(self, context: MeetingContext) -> bool:
        """Whether an autosave is due: ``store.autosave_seconds`` have passed and the KV holds other lines than then."""
        return self._checkpoints.due(self._settings.store.autosave_seconds, context.lines + context.pending_lines)

    def save(self, context: MeetingContext, rewrite: bool = False,
             on_transfer: Callable[[str, str, int, float], None] | None = None) -> SaveReport:
        """Save ``context``'s cache with the state that goes with it (``rewrite``: every block again); the saved
        meeting is one of the library's from then on. ``on_transfer``: told what the save wrote, and where."""
        settings, usage = self._settings, self._held.usage
        report = self._checkpoints.save(context, self._source, lambda: self.state(context), rewrite)
        held = self._checkpoints.store.session_nbytes(self._session_id)  # None: a store that does not count them
        sent = report.bytes_written if settings.store.backend in REMOTE_TIERS else 0  # Redis: over the network
        usage.saved(held if held is not None else max(usage.snapshot().stored_bytes, report.bytes_written), sent)
        if on_transfer is not None:
            on_transfer("device", settings.store.backend, report.bytes_written, report.seconds)
        self.library = True
        return report

    def record(self, title: str, strict: bool = False) -> bool:
        """The meeting goes into the meeting library under its session id (again after a rename or a forget's
        rebuild, replacing what was there); True once it has. A library that cannot be written costs a save nothing
        (a warning in the log, False); ``strict`` (a forget, which must reach the library) raises instead."""
        from app.library.record import library_detector, open_library, record_meeting

        names = self._held.names
        try:
            with open_library(self._settings) as library:
                started = library.started(self._session_id) or self._started  # a resumed meeting keeps its date
                record_meeting(library, names.transcript(), title=title, started=started, meeting=self._session_id,
                               detector=library_detector(self._settings), forgotten=names.forgotten)
        except Exception as exc:
            if strict:
                raise InputError(f"the meeting library could not be updated: {exc}") from None
            log.warning("session %s: not recorded in the meeting library", self._session_id, exc_info=True)
            return False
        return True

    def saved_state(self, context: MeetingContext) -> SavedState:
        """What :meth:`save` would store with ``context``'s KV now."""
        with context._lock:
            return SavedState.from_dict(self.state(context), self._session_id, self._source)

    def state(self, context: MeetingContext) -> dict:
        """The app state that goes with the KV as it is now (call with ``context._lock`` held): the words and
        slides of the lines the KV holds, and the position up to which they cover the meeting. Words of
        lines not yet prefilled, and of the open line, are left out; audio from the position on is what a
        continuation has to bring again."""
        held = self._held
        lines = context.lines
        with held.lock:
            time_offset, heard = held.clock()
            drained = not held.ledger.pending and not context.pending_lines and not held.speech.line
            complete = held.speech_done.is_set() and drained
            if complete or context.full:
                # All of it: at the end nothing is left out; with the model's positions used up no further line
                # enters the KV, and answers read the transcript instead, so the transcript must go on.
                mark = LineMark(len(held.words), len(held.slides), held.speech.last_speaker)
            else:
                mark = held.ledger.mark(lines)
            words = held.words[:mark.words]
            position = heard if complete else max(time_offset, words[-1].end if words else 0.0)
            return SavedState(self._source, position, heard, lines, mark.last_speaker, words,
                              held.slides[:mark.slides], held.timeline, held.names.forgotten,
                              held.names.kept, held.usage.snapshot().to_dict(),
                              self._settings.pii.model_dump(mode="json")).to_dict()
