"""A live meeting: audio and video in, committed speaker-attributed words, slides, answers out.

Threads (seed 11.3; DESIGN "Data flow"):
- the caller's thread(s) push audio and frames into ring buffers and never wait on a model;
- the speech worker drains the audio ring into the streaming recogniser (LocalAgreement-2), gives
  committed words their speaker and closes transcript lines;
- the vision worker turns frames into keyframes, slide text and embeddings;
- the LLM worker prefills closed lines into the meeting's KV cache in chunks, so that a question
  only pays for its own tokens;
- ``ask`` / ``summary`` run in the caller's thread against the same cache (checkpoint + rollback).

A worker that fails puts the session into the "error" state with the message; other sessions of
the same runtime are not affected.

``MeetingSession`` holds the shared state and wires the parts, each with one job: audio and frames in and the
clock (app/live/session_input.py), the words and the lines they close (app/live/session_speech.py), the names
speakers go by (app/live/session_names.py), slides (app/live/session_vision.py), prefilling the KV
(app/live/session_prefill.py), questions and summaries (app/live/session_answers.py), saves and the meeting library
(app/live/session_saving.py, app/live/session_store.py), its snapshot (app/live/session_view.py), its state
(app/live/session_status.py) and its use of the machine (app/live/session_usage.py).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import numpy as np

from app.answering.actions import ActionItem, extract_action_items
from app.answering.answers import Answer
from app.llm.assistant import MeetingSummary
from app.llm.context import ContextLine, MeetingContext, PlacedLine
from app.platform.cost import Usage
from app.live.events import Answered, Listeners, SessionEvent, SessionOutput, Slide
from app.answering.questions import checked_question
from app.live.session_answers import MeetingQuestions
from app.live.session_input import MeetingInput
from app.live.session_names import SpeakerNames
from app.live.session_prefill import Prefiller, meeting_context
from app.live.session_saving import Held, MeetingSaver
from app.live.session_speech import SpeechLines, stream_recogniser
from app.live.session_status import SessionStatus
from app.live.session_store import LineLedger, LineMark, SavedMeeting, SavedState
from app.live.session_usage import measure, usage_meter
from app.live.session_view import SessionSnapshot, SessionView
from app.live.session_vision import SlideWatcher
from app.text.transcript import Transcript, TranscriptWord

if TYPE_CHECKING:
    from app.platform.config import Settings
    from app.llm.engine import LLMEngine
    from app.live.session_speech import SpeechRecogniser, StreamingDiarizer
    from app.live.session_vision import SlidePipeline
    from kvstore.cold import ColdTier

log = logging.getLogger("minutia.session")


class SharedModels(Protocol):
    """What a session takes from the process it runs in (app.live.runtime.Runtime, which creates sessions: the
    runtime imports this module, never the other way round)."""

    settings: Settings

    @property
    def transcriber(self) -> SpeechRecogniser: ...

    @property
    def engine(self) -> LLMEngine: ...

    def online_diarizer(self) -> StreamingDiarizer: ...

    def vision_pipeline(self) -> SlidePipeline: ...

    def cold_tier(self, session_id: str, source: str = "") -> ColdTier | None: ...

    def session_store(self, create_key: bool = True) -> Any: ...

    def sessions(self) -> list["MeetingSession"]: ...


class MeetingSession:
    """A meeting in this process: a LiveMeeting (app/live/meeting.py) with one worker thread and its parts."""

    def __init__(self, runtime: SharedModels, session_id: str, source: str = "live", autosave: bool = False,
                 restored: SavedMeeting | None = None, settings: Any = None, library: bool = False) -> None:
        """``settings``: this meeting's (a canary's KV changes, app/platform/canary.py); the runtime's by default.
        ``library``: record the meeting in the meeting library when it ends though it is not saved (the page's)."""
        self.runtime = runtime
        self.settings = settings if settings is not None else runtime.settings
        self.session_id = session_id
        self.source = source
        self._lock = threading.RLock()
        self._listeners = Listeners(self._lock, session_id)
        self._emit = self._listeners.emit
        self._closed = threading.Event()
        self._finished = threading.Event()
        self._status = SessionStatus(session_id, self._lock, self._emit, self._finished)
        started = time.time()  # when the meeting began here (the library dates it so)
        self.title: str | None = None  # what the library calls the meeting (default: its session id)
        self.recorded = False  # whether the last save after the end reached the library

        self._words: list[TranscriptWord] = []  # committed, with diarizer labels
        self._slides: list[Slide] = []

        self._ledger = LineLedger()  # closed lines on their way into the KV
        self._usage = usage_meter(self.settings)  # what the meeting uses, for its cost (app/live/session_usage.py)
        self._speech_done = threading.Event()
        self._vision_done = threading.Event()
        self.timeline = _make_timeline()
        self.autosave = autosave
        self.on_transfer: Callable[[str, str, int, float], None] | None = None  # (source, target, bytes, s) per save
        self._restored = restored
        # How the runtime's diarizer is wrapped (a bot room's named participants, app/rooms/participants.py); set
        # before the first audio, when the recogniser's thread picks its diarizer.
        self.diarizer_for: Callable[[StreamingDiarizer], StreamingDiarizer] | None = None
        saved = SavedState.from_dict(restored.metadata, session_id, source) if restored is not None else None
        if saved is not None:  # a resumed meeting goes on from its save, and adds to what it used before
            self.source, self._words, self._slides = saved.source, saved.words, saved.slides
            self.timeline = saved.timeline
            self._usage = usage_meter(self.settings, saved.usage)
            self._ledger = LineLedger(LineMark(len(self._words), len(self._slides), saved.last_speaker), saved.lines)
        status = self._status
        self._input = MeetingInput(session_id, self._lock, self._closed, lambda: status.error,
                                   lambda: status.set("live"), saved.position if saved else 0.0)
        self._speakers = SpeakerNames(self._lock, self._words, self.settings.asr.hotwords,
                                      version=lambda: status.version, bump=status.bump, source=lambda: self.source,
                                      heard=lambda: self.stream_seconds,
                                      forgotten=saved.forgotten_names if saved else (),
                                      kept=saved.kept_names if saved else None)
        self._prefill = Prefiller(self._ledger, self.settings.kv.idle_compact_seconds)
        output = SessionOutput(self._lock, self._append_line, self._emit, status.bump)
        self._speech = SpeechLines(output, self._words, last_speaker=saved.last_speaker if saved else None,
                                   names=self._speakers.names, stream_seconds=lambda: self.stream_seconds,
                                   time_offset=lambda: self._input.time_offset)
        self._vision = SlideWatcher(session_id, output, self._slides, runtime.vision_pipeline)
        self._questions = MeetingQuestions(self._lock, self._slides, self.timeline, self._prefill.ready,
                                           lambda: self._prompts,
                                           lambda: self.pii_detector if self.settings.pii.zero_kv else None)
        held = Held(self._lock, self._words, self._slides, self.timeline, self._ledger, self._speech,
                    self._speech_done, self._speakers, self._usage, self._input.clock)
        self._saver = MeetingSaver(session_id, self.source, self.settings, held, runtime.session_store,
                                   restored is not None, library or autosave, started)
        self._view = SessionView(session_id, held, self._questions, self._input.audio, self._input.frames,
                                 lambda: self._context, lambda: (status.state, status.error, status.version))

        self._threads = [
            threading.Thread(target=status.guard(self._speech_worker), name=f"speech-{session_id}", daemon=True),
            threading.Thread(target=status.guard(self._vision_worker), name=f"vision-{session_id}", daemon=True),
            threading.Thread(target=status.guard(self._llm_worker), name=f"llm-{session_id}", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------------ input
    def feed_audio(self, samples: np.ndarray, sample_rate: int, wait: bool = False) -> None:
        """Queue audio ((n,) or (n, channels), float in [-1, 1] or int16) at any rate.

        Live input never blocks on a model: when the recogniser falls behind by more than the ring
        holds, the oldest audio is dropped and counted. ``wait=True`` (replaying a file faster than
        real time) waits for room instead.
        """
        self._input.hear(samples, sample_rate, wait)

    def decode_in_fixed_steps(self) -> None:
        """Input fed as fast as it goes: decode fixed steps (``asr.stream_catch_up_seconds``), same words anywhere."""
        self._speech.fixed_step_seconds = self.settings.asr.stream_catch_up_seconds

    def feed_video(self, frame: np.ndarray, t: float | None = None, wait: bool = False) -> None:
        """One RGB frame (HxWx3 uint8) at ``t`` s after this input started (default: the audio so far). A frame that
        starts a new picture is queued for the vision worker; beyond its ring (8 keyframes) the oldest are dropped
        and counted, unless ``wait``."""
        self._input.see(frame, t, self._vision.keyframe, wait)

    def finish(self, timeout: float | None = None) -> None:
        """End of input: everything received is transcribed, committed and prefilled before this returns."""
        self._input.end()
        if not self._finished.wait(timeout):
            raise TimeoutError(f"session {self.session_id} did not finish within {timeout} s")

    def wait_until_committed(self, seconds: float, input_ended: Callable[[], bool], poll: float = 0.1) -> None:
        """Return once words are committed up to ``seconds`` of meeting time (asking "at T" asks what a listener has
        heard by T). Once ``input_ended()`` and the recogniser has nothing more to read, the words it still holds
        (the last, uncommitted ones, or less than one fixed step of audio) come only with the end of input: the
        input is finished then, so this always returns and never asks before T's words are in."""
        if self._speech.wait_until_committed(seconds, input_ended, poll, lambda: self.state == "error",
                                             self._speech_done):
            self.finish()

    def add_transcript(self, transcript: Transcript, words_per_second: float = 2.5, slides: Sequence[Slide] = (),
                       until: float | None = None, slide_embeddings: dict[float, np.ndarray] | None = None) -> None:
        """Add an earlier part of the meeting as committed text (a transcript, e.g. QMSum) with its ``slides`` by
        time (and their image embeddings by time), ending at ``until`` if after its last word. Turns keep their
        words' times; untimed turns are timed at ``words_per_second`` after what the session holds."""
        self._input.ensure_open()
        self._speakers.keep_named(transcript.speakers)
        with self._lock:
            clock = max(self.stream_seconds, self._words[-1].end if self._words else 0.0)
        clock = self._speech.add_turns(transcript.turns, clock, words_per_second, slides,
                                       lambda slide: self._vision.add(slide, slide_embeddings))
        self._input.catch_up(max(clock, until or 0.0))
        self._status.bump()

    def wait_until_prefilled(self, timeout: float | None = None) -> bool:
        """Block until every closed line is in the KV cache (benchmarks and tests measure after this)."""
        return self._prefill.wait_until_prefilled(timeout, lambda: self._status.error)

    @property
    def backlog_seconds(self) -> float:
        """Audio received but not yet handed to the recogniser."""
        return self._input.backlog_seconds

    @property
    def committed_seconds(self) -> float:
        """Meeting time up to which words are committed (behind ``stream_seconds`` by the commit lag)."""
        return self._speech.committed_seconds

    @property
    def saved_seconds(self) -> float | None:
        """Stream seconds the last save covers (None before one): a takeover after a crash brings the audio from
        here on again (app/rooms/room_host.py)."""
        return self._saver.saved_seconds

    @property
    def stream_seconds(self) -> float:
        return self._input.stream_seconds

    # ------------------------------------------------------------------ workers
    def _speech_worker(self) -> None:
        audio = self._input.audio
        if not self._speech.wait_for_audio(audio, self._closed):  # no model is loaded for a text-only meeting
            self._speech_done.set()
            return
        asr = stream_recogniser(self.runtime.transcriber, self.settings.asr)
        diarizer = self.runtime.online_diarizer()
        if self.diarizer_for is not None:
            diarizer = self.diarizer_for(diarizer)
        self._speech.run(audio, self._closed, asr, diarizer, self.settings.asr.stream_catch_up_seconds)
        self._speech_done.set()

    def _append_line(self, line: ContextLine, words: int = 0) -> None:
        """Queue a line for the KV; ``words``: committed words it closes (0 for a slide)."""
        with self._lock:
            if not self._ledger.add(line, words, len(self._slides), self._speech.last_speaker):
                return
        self._prefill.wake()

    def _vision_worker(self) -> None:
        self._vision.run(self._input.frames, self._closed)
        self._vision_done.set()

    def _llm_worker(self) -> None:
        engine = self.runtime.engine
        prompts = engine.live_prompts()
        self._prompts = prompts
        erase_pii = self.pii_detector if self.settings.pii.zero_kv else None
        context = meeting_context(engine, self.settings.kv, prompts.header, erase_pii, self._restored,
                                  lambda: self.runtime.cold_tier(self.session_id, self.source))
        self._restored = None
        context.on_placed(self._place_on_timeline)
        self._usage.start()  # the models are loaded: the meeting's use of the machine is metered from here
        inputs_done = (self._speech_done, self._vision_done)
        self._prefill.run(context, lambda: all(e.is_set() for e in inputs_done) or self._closed.is_set(),
                          self._checkpoint)
        measure(self._usage, self, context, force=True)
        if self.autosave and not self._closed.is_set() and self._said_anything():
            self.save()  # an empty meeting is never saved (nor saved over a meeting --replace would replace)
        if self.in_library and not self._closed.is_set() and self._said_anything():
            self.record_in_library()  # before finish() returns: a forget that follows records over it, not under
        self._finished.set()
        self._status.set("finished" if not self._closed.is_set() else self._status.state)

    def add_usage(self, earlier: dict) -> None:
        """Count what an earlier run of this meeting used (a rebuilt meeting continues the old one's cost)."""
        self._usage.add(Usage.from_dict(earlier))

    def keep_pictures(self, shown: Sequence[Slide]) -> None:
        """Slides this meeting took over from an earlier session of it (a forget's rebuild, which saves text and
        times only) get back the pictures that session showed, so the page's strip keeps them."""
        self._vision.keep_pictures(shown)

    @property
    def pii_detector(self):
        """The detector of this meeting's ``pii`` settings: the runtime's when they are the runtime's, else its
        own (a meeting saved under ``zero-in-kv`` keeps to it when resumed under another config)."""
        if self.settings.pii == self.runtime.settings.pii:
            return self.runtime.pii_detector
        if getattr(self, "_own_pii", None) is None:
            from app.text.pii import detector_for

            self._own_pii = detector_for(self.settings.pii)
        return self._own_pii

    def usage(self) -> Usage:
        """What the meeting has used so far (measured every few seconds while it runs)."""
        return self._usage.snapshot()

    def _checkpoint(self, context: MeetingContext) -> None:
        """Autosave when a checkpoint is due (and the meeting has anything to save); measure the meeting's use."""
        measure(self._usage, self, context)
        if self.autosave and self._saver.due(context) and self._said_anything():
            context.flush()  # every closed line into the KV: the checkpoint holds all but the open line
            self.save()

    @property
    def _context(self) -> MeetingContext | None:
        return self._prefill.context

    def _said_anything(self) -> bool:
        with self._lock:
            return bool(self._words or self._slides)

    def _place_on_timeline(self, placed: PlacedLine) -> None:
        line = placed.line
        embedding = self._vision.embeddings.pop(line.start, None) if line.modality == "video" else None
        self.timeline.add(
            line.modality, line.start, line.end, placed.token_start, placed.token_end, speaker=line.speaker,
            text=line.text, embedding=embedding,
        )

    # ------------------------------------------------------------------ questions
    def ask(self, question: str) -> Answer:
        """Answer from the meeting so far (app/answering/answers.py); a free-form answer is generated from the
        meeting's KV cache. Cites times and speakers. Safe while ingestion continues."""
        answer = self._questions.ask(checked_question(question), self.transcript())
        self._emit(Answered(answer))
        return answer

    def summary(self) -> MeetingSummary:
        return self._questions.summary(self.transcript(), self.forgotten_names)

    def action_items(self) -> list[ActionItem]:
        return extract_action_items(self.transcript())

    # ------------------------------------------------------------------ durability (app/live/session_saving.py)
    def save(self, rewrite: bool = False):
        """Save the meeting (KV blocks, scores, timeline, transcript) to the encrypted session store, incrementally
        (with ``rewrite``: every block again, under this session's source); ``minutia resume`` continues from it."""
        context = self._prefill.ready()
        if self._finished.is_set():
            self._prefill.drain_late(self._stopped)  # a note written after the end goes into the KV before the save
        report = self._saver.save(context, rewrite, self.on_transfer)
        if self._finished.is_set() and self.in_library:
            self.recorded = self.record_in_library()  # saved after the end: by hand, a rename, a forget's rebuild
        return report

    @property
    def in_library(self) -> bool:
        """Whether the meeting goes into the meeting library (saved, or opened for it)."""
        return self._saver.in_library

    def record_in_library(self, strict: bool = False) -> bool:
        """The meeting goes into the meeting library (again after a rename or a forget's rebuild); True once it
        has. A library that cannot be written warns and returns False, or with ``strict`` (a forget) raises."""
        return self._saver.record(self.title or self.session_id, strict)

    def saved_state(self) -> SavedState:
        """What :meth:`save` would store with the KV now (all of the meeting once it has finished)."""
        return self._saver.saved_state(self._prefill.ready())

    # ------------------------------------------------------------------ names (app/live/session_names.py)
    @property
    def forgotten_names(self) -> tuple[str, ...]:
        """Speakers forgotten from this meeting (app/live/forget.py): their names go to no one."""
        return self._speakers.forgotten

    @forgotten_names.setter
    def forgotten_names(self, names: tuple[str, ...]) -> None:
        self._speakers.forgotten = names

    @property
    def kept_names(self) -> dict[str, str]:
        """Label -> name known before (a room's participants, a rename, a forget's rebuild): given first."""
        return self._speakers.kept

    @kept_names.setter
    def kept_names(self, names: dict[str, str]) -> None:
        self._speakers.kept = names

    def speakers(self) -> dict[str, str | None]:
        """Each diarizer label that has spoken, with the name the meeting gives it (None until named)."""
        return self._speakers.speakers()

    def speaker_label(self, speaker: str, speakers: dict[str, str | None] | None = None) -> str:
        """The label ``speaker`` (a label, or the name it goes by now) means; InputError listing the speakers."""
        return self._speakers.label(speaker, speakers)

    def keep_names(self, names: dict[str, str]) -> None:
        """Labels that already are people's names (a bot room's named participants): theirs before any vote."""
        self._speakers.keep(names)

    def rename_speaker(self, speaker: str, name: str) -> str:
        """Call ``speaker`` (a label, or the name it goes by now) ``name`` from now on, in the transcript, answers
        and the saved meeting, whatever the meeting says; returns the label. Lines already in the KV keep the
        speaker as they were written, so a note line goes into the KV after them: "[mm:ss] Note: The speaker written
        above as Carol or SPEAKER_04 is Dana." (the model reads the rename where it reads the meeting)."""
        label, note, at = self._speakers.rename(speaker, name)
        if note is not None:
            self._note(ContextLine("text", at, at, "Note", note))
        return label

    def _note(self, line: ContextLine) -> None:
        """Put a line of the app's own (not said in the meeting) into the KV after what it holds, without blocking
        the caller (a bot's event loop). While input goes on the LLM worker prefills it as any line; once input
        has ended that worker may be past its last drain, so a thread waits for it to finish and prefills the
        line then (never two prefills at once; notes one at a time)."""
        if self._closed.is_set():
            return
        self._append_line(line)
        if self._speech_done.is_set() and self._vision_done.is_set():  # a rename after the end is saved too
            self._prefill.after_run(self._finished, self._stopped, self.save_changes, self.session_id)

    def save_changes(self) -> None:
        """A meeting that saves itself (autosave) and has ended: save what changed since its last save (a rename and
        its note) before anything reads the save (a resume, a forget's rebuild). Nothing for other meetings."""
        if self.autosave and self._finished.is_set() and not self._closed.is_set() and self._said_anything():
            self.save()

    def _stopped(self) -> bool:
        """Failed or closed: the meeting's KV takes no more lines."""
        return self._status.error is not None or self._closed.is_set()

    def transcript(self) -> Transcript:
        """Committed turns with the names people call each other (SPEAKER_xx until someone is named)."""
        return self._speakers.transcript()

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait for the last answer's comparisons (drift, shadow), which run after it in the background, so the
        figures a snapshot reads next include them; True when none is left running."""
        context = self._context
        return context is None or context.shadow.wait(timeout)

    def snapshot(self) -> SessionSnapshot:
        """The meeting as the page, the bot and the metrics show it now (app/live/session_view.py)."""
        return self._view.snapshot()

    def kv_stats(self) -> dict:
        """The KV figures of the meeting's cache (waits for the LLM to be loaded)."""
        return self._prefill.ready().stats()

    def commit_lags(self) -> list[float]:
        with self._lock:
            return list(self._speech.commit_lags)

    # ------------------------------------------------------------------ events and state
    def subscribe(self, callback: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Hear the session's events (app/live/events.py); returns the function that stops it."""
        return self._listeners.subscribe(callback)

    @property
    def state(self) -> str:
        return self._status.state

    @property
    def running(self) -> bool:
        """Its workers still run (it shares the machine with the other meetings that do)."""
        return not self._finished.is_set()

    @property
    def error(self) -> str | None:
        """Why the session failed (state "error"), else None."""
        return self._status.error

    def close(self) -> None:
        self._closed.set()
        self._input.end()
        self._prefill.wake()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        if self._context is not None:
            self._context.close()


def _make_timeline():
    from kvstore.timeline import TimelineIndex

    return TimelineIndex()
