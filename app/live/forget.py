"""Forget one content source of a saved meeting (a speaker, or the shared screen), in the transcript and the KV.

A KV block mixes the tokens of every source whose lines it holds (app/live/lineage.py says which), and every later
token attended to the forgotten ones, so no set of blocks can be shredded to forget one source. The meeting is
rebuilt instead: the saved words and slides without that source's are prefilled into a new cache, saved under a
new key source (every block written again under its own data key), and then every old key source of the meeting
is crypto-shredded, so the old blocks, and any copy of them (a backup), can no longer be decrypted. The new cache
is the one a meeting without that source would have: the model cannot read what was never prefilled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.live.lineage import SCREEN, SourceBlocks, blocks_of, is_screen, lineage, source_kind
from app.live.session_store import SavedState
from app.text.speakers import speaker_label, speaker_names
from app.text.textnorm import counted
from app.text.transcript import Transcript, realign_to_sentences, turns_from_words
from encoders.errors import InputError

if TYPE_CHECKING:
    from app.platform.cost import Usage
    from app.live.runtime import Runtime
    from app.live.session import MeetingSession
    from kvstore.crypto import ShredReport

# A forget is asked for, then confirmed (the page's second press, a room's "forget: yes") within this many seconds.
FORGET_CONFIRM_S = 120.0


@dataclass(frozen=True)
class ForgetReport:
    session: str
    forgotten: str  # the speaker label forgotten, or SCREEN
    name: str | None  # the name the speaker went by in the transcript, if any
    words_removed: int
    words_kept: int
    slides: int  # kept
    slides_removed: int
    blocks: int  # KV blocks that held the forgotten source's tokens (its lineage)
    shared_blocks: int  # of those, blocks that held another source's tokens too
    tokens: int  # in the rebuilt KV cache
    source: str  # the rebuilt meeting's key source
    shredded: tuple[ShredReport, ...]  # one per old key source

    @property
    def speaker(self) -> str | None:
        """The speaker label forgotten (None when the screen was)."""
        return self.forgotten if source_kind(self.forgotten) == "speaker" else None

    def shown(self) -> str:
        return f"{self.name} ({self.forgotten})" if self.name else self.forgotten

    def removed(self) -> str:
        """What went, in words: "8 words", "1 slide"."""
        return counted(self.slides_removed, "slide") if self.speaker is None else counted(self.words_removed, "word")


def forget_source(runtime: Runtime, session_id: str, source: str, timeout: float | None = None) -> ForgetReport:
    """Rebuild saved meeting ``session_id`` without ``source`` (a speaker's label or the name it goes by, or the
    screen: ``screen``, ``slides``, ``video``, ``camera``), save it and shred the old key sources. Holds the
    session's name against other processes while it works; a crash before the new save leaves the old meeting as
    it was, and one after it leaves the rebuilt meeting."""
    from app.platform.store import SessionClaim

    claim = SessionClaim(runtime.settings.home, session_id)
    try:
        store = runtime.session_store(create_key=False)
        saved = _saved(store, session_id)
        old_sources = store.sources(session_id)
        plan = _Plan.of(saved, source, runtime.settings.asr.hotwords, old_sources, runtime.settings.kv.block_size)
        session = _rebuilt(runtime, session_id, saved, plan, autosave=False)  # only the finished rebuild is saved
        try:
            session.finish(timeout)
            if session.state != "finished":
                raise InputError(f"session {session_id} could not be rebuilt: {session.snapshot().error}")
            report = session.save(rewrite=True)
            unrecorded = None
            if session.in_library and not session.recorded:  # the save warned: a forget must reach it, or say so
                try:
                    session.record_in_library(strict=True)
                except InputError as exc:  # said once the old sources are shredded, which must happen anyway
                    unrecorded = exc
        finally:
            runtime.close_session(session_id)
        shredded = tuple(store.shred(old, session_id) for old in old_sources if old != plan.source)
        log = getattr(store, "log", None)
        if log is not None:  # what was forgotten, beside the shreds' own records
            log.record(session_id, "delete", [], plan.label, forgot=plan.label, kind=plan.kind,
                       words_removed=plan.removed, slides_removed=plan.slides_removed, blocks=plan.blocks,
                       shared_blocks=plan.shared_blocks, rebuilt_as=plan.source,
                       shredded_sources=[r.source for r in shredded])
        if unrecorded is not None:
            raise InputError(f"{plan.label} was forgotten in the saved meeting {session_id}, but {unrecorded}; "
                             f"forget them there too: minutia library forget {session_id} --speaker {plan.label}")
        return plan.report(session_id, report.seq_length, shredded)
    finally:
        claim.release()


def forget_in_live_meeting(runtime: Runtime, session: MeetingSession, source: str,
                           timeout: float | None = None) -> tuple[MeetingSession, ForgetReport]:
    """Forget ``source`` (a speaker or the screen) while the meeting goes on; returns the session that continues it
    (new audio and frames go there: the screen forgotten is what it showed so far).

    What was heard so far is transcribed first (the session is finished), so nothing said before the forget
    escapes it. A session that saves itself (autosave) is saved, rebuilt and shredded as :func:`forget_source`
    does, and resumed; any other one is rebuilt in memory, and its old cache is closed."""
    session_id = session.session_id
    if not is_screen(source):
        session.speaker_label(source)  # an unknown speaker is refused before anything changes
    session.finish(timeout)
    if session.state != "finished":
        raise InputError(f"the meeting stopped on an error and cannot be rebuilt: {session.snapshot().error}")
    shown = session.snapshot().slides  # with their pictures, which a saved meeting does not keep
    if session.autosave:
        session.save_changes()  # a rename since the end: the rebuilt meeting starts from all of it
        runtime.close_session(session_id)
        report = forget_source(runtime, session_id, source, timeout)
        resumed = runtime.resume_session(session_id, autosave=True)
        resumed.keep_pictures(shown)
        return resumed, report
    saved = session.saved_state()
    plan = _Plan.of(saved, source, runtime.settings.asr.hotwords, [saved.source], runtime.settings.kv.block_size)
    runtime.close_session(session_id)
    rebuilt = _rebuilt(runtime, session_id, saved, plan, autosave=False, library=session.in_library)
    rebuilt.title = session.title
    rebuilt.keep_pictures(shown)
    rebuilt.wait_until_prefilled(timeout)
    if rebuilt.in_library:  # the end recorded the meeting with them: it is recorded again without
        rebuilt.record_in_library(strict=True)
    return rebuilt, plan.report(session_id, rebuilt.kv_stats().get("tokens", 0), ())


@dataclass(frozen=True)
class _Plan:
    """Which source goes (a speaker label or SCREEN), which words and slides stay, the blocks it held, and the
    names and key source the rebuilt meeting gets."""

    label: str
    names: dict[str, str]  # label -> name before the forget
    kept: list  # the words that stay
    removed: int
    slides: list  # the slides that stay
    slides_removed: int
    blocks: int
    shared_blocks: int
    source: str

    @property
    def kind(self) -> str:
        return source_kind(self.label)

    @classmethod
    def of(cls, saved: SavedState, source: str, hotwords: tuple[str, ...], taken: list[str],
           block_size: int) -> _Plan:
        words = realign_to_sentences(saved.words)
        names = _names(words, hotwords, saved.forgotten_names, saved.kept_names)
        if is_screen(source):
            if not saved.slides:
                raise InputError("the meeting holds nothing from the screen: no slide was read")
            label, kept, slides = SCREEN, words, []
        else:
            label = speaker_label(source, [w.speaker for w in words], names)
            kept, slides = [w for w in words if w.speaker != label], list(saved.slides)
        held = blocks_of(saved.timeline, block_size, label, names)
        return cls(label, names, kept, len(words) - len(kept), slides, len(saved.slides) - len(slides),
                   len(held.blocks) if held else 0, held.shared if held else 0,
                   _new_source(saved.source or "meeting", label, taken))

    def report(self, session_id: str, tokens: int, shredded: tuple) -> ForgetReport:
        return ForgetReport(session_id, self.label, self.names.get(self.label), self.removed, len(self.kept),
                            len(self.slides), self.slides_removed, self.blocks, self.shared_blocks, tokens,
                            self.source, shredded)


def _rebuilt(runtime: Runtime, session_id: str, saved: SavedState, plan: _Plan, autosave: bool,
             library: bool = False) -> MeetingSession:
    """A new session holding ``saved`` without the plan's source (still open: finish it or feed it on)."""
    session = runtime.new_session(session_id, source=plan.source, autosave=autosave, library=library)
    # Others still address the forgotten speaker ("Bob, can you...?"): that name must not pass to whoever now
    # speaks next; and those who stay keep the names they had, even where the evidence was the forgotten turns.
    forgotten = plan.names.get(plan.label)
    session.forgotten_names = saved.forgotten_names + ((forgotten,) if forgotten else ())
    session.kept_names = {label: name for label, name in plan.names.items() if label != plan.label}
    session.add_usage(saved.usage)  # the meeting's cost goes on from what it used before the rebuild
    timeline = saved.timeline  # the slides' image embeddings, so the timeline still finds them by picture
    shown = {slide.time for slide in plan.slides}
    pictures = {seg.start_s: vec for seg in timeline.segments() if seg.modality == "video" and seg.start_s in shown
                and (vec := timeline.embedding(seg.index)) is not None}
    session.add_transcript(Transcript(turns_from_words(plan.kept), source=plan.source), slides=plan.slides,
                           until=saved.position, slide_embeddings=pictures)
    return session


def saved_speakers(store, session_id: str, hotwords: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Label -> the name the transcript gives it (None when unnamed), for a saved meeting in ``store``."""
    saved = _saved(store, session_id)
    words = realign_to_sentences(saved.words)
    names = _names(words, hotwords, saved.forgotten_names, saved.kept_names)
    return {label: names.get(label) for label in dict.fromkeys(w.speaker for w in words)}


def saved_lineage(store, session_id: str, block_size: int, hotwords: tuple[str, ...] = ()) -> list[SourceBlocks]:
    """A saved meeting's content sources with the KV blocks their tokens sit in (app/live/lineage.py)."""
    saved = _saved(store, session_id)
    names = _names(realign_to_sentences(saved.words), hotwords, saved.forgotten_names, saved.kept_names)
    return lineage(saved.timeline, block_size, names)


def saved_usage(store, session_id: str) -> Usage:
    """What a saved meeting used while it ran (app.platform.cost.Usage), as saved with it."""
    from app.platform.cost import Usage

    return Usage.from_dict(_saved(store, session_id).usage)


def _names(words, hotwords, forgotten: tuple[str, ...], kept: dict[str, str]) -> dict[str, str]:
    """Label -> name as the session names them (a forgotten speaker's name goes to no one)."""
    return speaker_names(Transcript(turns_from_words(words)), hotwords, forgotten, kept)


def _saved(store, session_id: str) -> SavedState:
    from kvstore.persist import SessionNotFound, session_info

    try:
        return SavedState.from_dict(session_info(store, session_id).metadata, session_id, "")
    except SessionNotFound:
        raise InputError(f"no saved session {session_id!r} in the {getattr(store, 'tier', 'session')} store") from None


def _new_source(base: str, label: str, taken: list[str]) -> str:
    """A source name for the rebuilt meeting that no key of the session has."""
    stem = f"{base}-without-{label}"
    source, n = stem, 1
    while source in taken:
        n += 1
        source = f"{stem}-{n}"
    return source
