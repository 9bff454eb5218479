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

``MeetingSession`` holds the shared state and wires the parts, each with one job: the words and the
lines they close (app/live/session_speech.py), slides (app/live/session_vision.py), prefilling the KV
(app/live/session_prefill.py), questions and summaries (app/live/session_answers.py), checkpoints (app/live/session_store.py).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import numpy as np

from app.answering.actions import ActionItem, extract_action_items
from app.answering.answers import Answer
from app.llm.assistant import MeetingSummary
from app.llm.context import ContextLine, MeetingContext, PlacedLine
from app.platform.cost import REMOTE_TIERS, Usage, UsageMeter, machine
from app.live.events import Answered, Failed, Listeners, SessionEvent, SessionOutput, Slide, StateChanged
from app.answering.questions import checked_question
from app.live.session_answers import MeetingQuestions
from app.live.session_prefill import Prefiller
from app.live.session_speech import SpeechLines
from app.live.session_store import Checkpoints, LineLedger, LineMark, SavedState
from app.live.session_vision import SlideWatcher
from app.text.speakers import is_anonymous, rename_speakers, speaker_names
from app.text.transcript import Transcript, TranscriptWord, realign_to_sentences, turns_from_words
from encoders.audio import SAMPLE_RATE, to_mono_16k
from encoders.errors import InputError
from encoders.ring import ItemRing, RingBuffer

if TYPE_CHECKING:
    from app.platform.config import Settings
    from app.llm.engine import LLMEngine
    from app.live.session_speech import SpeechRecogniser, StreamingDiarizer
    from app.live.session_vision import SlidePipeline
    from encoders.vision import Keyframe
    from kvstore.cold import ColdTier

log = logging.getLogger("minutia.session")

AUDIO_RING_SECONDS = 120  # audio waiting for the recogniser; older audio is dropped (counted) beyond this
VIDEO_RING_FRAMES = 8  # keyframes waiting for the vision worker's OCR; the oldest are dropped beyond this


@dataclass
class SessionSnapshot:
    session_id: str
    state: str  # "idle" | "live" | "finished" | "error"
    stream_seconds: float
    transcript: Transcript
    tentative: str
    slides: list[Slide]
    kv: dict
    commit_lag: float | None
    error: str | None
    version: int
    counters: dict = field(default_factory=dict)
    decoded_seconds: float = 0.0  # meeting time the recogniser has decoded up to (stream_seconds: heard)


@dataclass
class SavedMeeting:
    """A meeting loaded from the session store: its KV cache and the app state saved with it."""

    cache: Any
    metadata: dict


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


def _machine(settings: Any) -> dict[str, int]:
    """The cores and GPUs a meeting runs on, recorded with its use (the config's, else this machine's)."""
    cores, gpus = machine(settings.cost) if getattr(settings, "cost", None) is not None else (0, 0)
    return {"cores": cores, "gpus": gpus}


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
        self._state = "idle"
        self._error: str | None = None
        self._version = 0
        self._closed = threading.Event()
        self._finished = threading.Event()
        self._wall_start = time.time()  # when the meeting began here (the library dates it so)
        self._library = library or autosave
        self.title: str | None = None  # what the library calls the meeting (default: its session id)
        self.recorded = False  # whether the last save after the end reached the library

        self._audio = RingBuffer(AUDIO_RING_SECONDS * SAMPLE_RATE, np.float32, policy="drop_oldest")
        self._frames: ItemRing[Keyframe] = ItemRing(VIDEO_RING_FRAMES, policy="drop_oldest")
        self._received_samples = 0

        self._words: list[TranscriptWord] = []  # committed, with diarizer labels
        last_speaker: str | None = None  # label of the last line closed
        self._slides: list[Slide] = []
        self._snapshot_cache: tuple[int, Transcript, dict[str, str]] | None = None

        self._ledger = LineLedger()  # closed lines on their way into the KV
        self._notes_lock = threading.Lock()  # notes prefilled after the LLM worker ended: one at a time
        self._usage = UsageMeter(**_machine(self.settings))  # what the meeting uses, for its cost (app/platform/cost.py)
        self._speech_done = threading.Event()
        self._vision_done = threading.Event()
        self.timeline = _make_timeline()
        self.autosave = autosave
        self.on_transfer: Callable[[str, str, int, float], None] | None = None  # (source, target, bytes, s) per save
        self._time_offset = 0.0  # stream time at which this process's input starts (a resumed meeting goes on)
        self._restored = restored
        self.forgotten_names: tuple[str, ...] = ()  # speakers forgotten from this meeting: their names go to no one
        self.kept_names: dict[str, str] = {}  # label -> name known before a forget (app/live/forget.py): given first
        # How the runtime's diarizer is wrapped (a bot room's named participants, app/rooms/participants.py); set
        # before the first audio, when the recogniser's thread picks its diarizer.
        self.diarizer_for: Callable[[StreamingDiarizer], StreamingDiarizer] | None = None
        if restored is not None:
            last_speaker = self._restore_state(restored.metadata)
        self._checkpoints = Checkpoints(runtime.session_store, session_id, self._ledger.base_lines if restored else -1,
                                        self._time_offset if restored else None)
        self._prefill = Prefiller(self._ledger, self.settings.kv.idle_compact_seconds)
        output = SessionOutput(self._lock, self._append_line, self._emit, self._bump)
        self._speech = SpeechLines(output, self._words, last_speaker=last_speaker, names=self._names,
                                   stream_seconds=lambda: self.stream_seconds, time_offset=lambda: self._time_offset)
        self._vision = SlideWatcher(session_id, output, self._slides, runtime.vision_pipeline)
        self._questions = MeetingQuestions(self._lock, self._slides, self.timeline, self._prefill.ready,
                                           lambda: self._prompts, lambda: self.pii_detector if self.settings.pii.zero_kv else None)

        self._threads = [
            threading.Thread(target=self._guard(self._speech_worker), name=f"speech-{session_id}", daemon=True),
            threading.Thread(target=self._guard(self._vision_worker), name=f"vision-{session_id}", daemon=True),
            threading.Thread(target=self._guard(self._llm_worker), name=f"llm-{session_id}", daemon=True),
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
        audio = to_mono_16k(samples, sample_rate)
        if audio.size == 0:
            return
        self._ensure_open()
        self._set_state("live")
        if wait:
            self._wait_for_room(self._audio, len(audio))
        self._audio.write(audio)
        with self._lock:
            self._received_samples += len(audio)

    def decode_in_fixed_steps(self) -> None:
        """Input fed as fast as it goes: decode fixed steps (``asr.stream_catch_up_seconds``), same words anywhere."""
        self._speech.fixed_step_seconds = self.settings.asr.stream_catch_up_seconds

    def feed_video(self, frame: np.ndarray, t: float | None = None, wait: bool = False) -> None:
        """One RGB frame (HxWx3 uint8) at ``t`` s after this input started (default: the audio so far). A frame that
        starts a new picture is queued for the vision worker; beyond its ring (8 keyframes) the oldest are dropped
        and counted, unless ``wait``."""
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] not in (3, 4) or frame.dtype != np.uint8:
            raise InputError(f"a video frame must be HxWx3 uint8 RGB, got shape {frame.shape} and dtype {frame.dtype}")
        self._ensure_open()
        self._set_state("live")
        keyframe = self._vision.keyframe(frame[:, :, :3], self.stream_seconds if t is None else self._time_offset + float(t))
        if keyframe is None:
            return
        if wait:
            self._wait_for_room(self._frames, 1)
        self._frames.put(keyframe)

    def _wait_for_room(self, ring, items: int) -> None:
        while ring.available + items > ring.capacity and not self._closed.is_set() and self._error is None:
            time.sleep(0.02)

    def finish(self, timeout: float | None = None) -> None:
        """End of input: everything received is transcribed, committed and prefilled before this returns."""
        self._audio.close()
        self._frames.close()
        if not self._finished.wait(timeout):
            raise TimeoutError(f"session {self.session_id} did not finish within {timeout} s")

    def wait_until_committed(self, seconds: float, input_ended: Callable[[], bool], poll: float = 0.1) -> None:
        """Return once words are committed up to ``seconds`` of meeting time (asking "at T" asks what a listener has
        heard by T). Once ``input_ended()`` and the recogniser has nothing more to read, the words it still holds
        (the last, uncommitted ones, or less than one fixed step of audio) come only with the end of input: the
        input is finished then, so this always returns and never asks before T's words are in."""
        seen: int | None = None  # empty reads counted when the input was first seen ended
        while self.committed_seconds < seconds and self.state != "error" and not self._speech_done.is_set():
            if seen is None and input_ended():
                seen = self._speech.empty_reads
            elif seen is not None and self._speech.empty_reads > seen:  # a read after the end found nothing
                break
            time.sleep(poll)
        if self.committed_seconds < seconds and self.state != "error":
            self.finish()

    def add_transcript(self, transcript: Transcript, words_per_second: float = 2.5, slides: Sequence[Slide] = (),
                       until: float | None = None, slide_embeddings: dict[float, np.ndarray] | None = None) -> None:
        """Add an earlier part of the meeting as committed text (a transcript, e.g. QMSum) with its ``slides`` by
        time (and their image embeddings by time), ending at ``until`` if after its last word. Turns keep their
        words' times; untimed turns are timed at ``words_per_second`` after what the session holds."""
        self._ensure_open()
        given = {label: label for label in transcript.speakers
                 if label.strip() and not is_anonymous(label) and label not in self.kept_names}  # a rename stays
        if given:  # a transcript's speakers that are names already stay so ("Hi guys" does not rename them)
            self.keep_names(given)
        with self._lock:
            clock = max(self.stream_seconds, self._words[-1].end if self._words else 0.0)
        waiting = sorted(slides, key=lambda slide: slide.time)
        for turn in transcript.turns:
            tokens = turn.text.split()
            if not tokens:
                continue
            start = turn.start if turn.start is not None else clock
            end = turn.end if turn.end is not None else start + len(tokens) / words_per_second
            while waiting and waiting[0].time <= start:
                self._vision.add(waiting.pop(0), slide_embeddings)
            self._speech.add_turn(_turn_words(turn, tokens, start, end), turn.speaker, start, end)
            clock = end
        for slide in waiting:
            self._vision.add(slide, slide_embeddings)
        clock = max([clock, until or 0.0] + [slide.time for slide in waiting])
        with self._lock:
            if self._received_samples == int(round(self._time_offset * SAMPLE_RATE)):
                self._time_offset = max(self._time_offset, clock)  # no audio yet: the ASR's times start here
            self._received_samples = max(self._received_samples, int(clock * SAMPLE_RATE))
        self._bump()

    def wait_until_prefilled(self, timeout: float | None = None) -> bool:
        """Block until every closed line is in the KV cache (benchmarks and tests measure after this)."""
        return self._prefill.wait_until_prefilled(timeout, lambda: self._error)

    @property
    def backlog_seconds(self) -> float:
        """Audio received but not yet handed to the recogniser."""
        return self._audio.available / SAMPLE_RATE

    @property
    def committed_seconds(self) -> float:
        """Meeting time up to which words are committed (behind ``stream_seconds`` by the commit lag)."""
        with self._lock:
            return self._words[-1].end if self._words else 0.0

    @property
    def saved_seconds(self) -> float | None:
        """Stream seconds the last save covers (None before one): a takeover after a crash brings the audio from
        here on again (app/rooms/room_host.py)."""
        return self._checkpoints.saved_seconds

    @property
    def stream_seconds(self) -> float:
        with self._lock:
            return self._received_samples / SAMPLE_RATE

    def _ensure_open(self) -> None:
        if self._closed.is_set():
            raise InputError(f"session {self.session_id} is closed")
        if self._audio.closed:
            raise InputError(f"session {self.session_id} has finished; start a new one")

    # ------------------------------------------------------------------ workers
    def _guard(self, worker: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                worker()
            except Exception as exc:  # a worker's failure ends this session only
                log.exception("session %s: %s failed", self.session_id, worker.__name__)
                if isinstance(exc, InputError):
                    self._fail(str(exc))
                else:  # its text can hold paths and errnos: the page and the bot say something plain
                    part = worker.__name__.strip("_").removesuffix("_worker")
                    self._fail(f"the meeting's {part} stopped on an unexpected error (the details are in the server log)")

        return run

    def _speech_worker(self) -> None:
        from encoders.streaming import StreamingOptions, StreamingTranscriber

        if not self._speech.wait_for_audio(self._audio, self._closed):  # no model is loaded for a text-only meeting
            self._speech_done.set()
            return
        asr_settings = self.settings.asr
        asr = StreamingTranscriber(
            self.runtime.transcriber,
            StreamingOptions(language=asr_settings.language, beam_size=asr_settings.stream_beam_size,
                             min_chunk_seconds=asr_settings.stream_min_chunk_seconds,
                             hotwords=tuple(asr_settings.hotwords),
                             window_margin_seconds=asr_settings.stream_window_margin_seconds),
        )
        diarizer = self.runtime.online_diarizer()
        if self.diarizer_for is not None:
            diarizer = self.diarizer_for(diarizer)
        self._speech.run(self._audio, self._closed, asr, diarizer, asr_settings.stream_catch_up_seconds)
        self._speech_done.set()

    def _append_line(self, line: ContextLine, words: int = 0) -> None:
        """Queue a line for the KV; ``words``: committed words it closes (0 for a slide)."""
        with self._lock:
            if not self._ledger.add(line, words, len(self._slides), self._speech.last_speaker):
                return
        self._prefill.wake()

    def _vision_worker(self) -> None:
        self._vision.run(self._frames, self._closed)
        self._vision_done.set()

    def _llm_worker(self) -> None:
        engine = self.runtime.engine
        prompts = engine.live_prompts()
        self._prompts = prompts
        erase_pii = self.pii_detector if self.settings.pii.zero_kv else None
        if self._restored is not None:
            context = MeetingContext(engine, self.settings.kv, header=prompts.header, restored=self._restored.cache,
                                     restored_lines=int(self._restored.metadata.get("lines", 0)), erase_pii=erase_pii)
            self._restored = None
        else:
            context = MeetingContext(engine, self.settings.kv, header=prompts.header,
                                     cold_tier=self.runtime.cold_tier(self.session_id, self.source),
                                     erase_pii=erase_pii)
        context.on_placed(self._place_on_timeline)
        self._usage.start()  # the models are loaded: the meeting's use of the machine is metered from here
        inputs_done = (self._speech_done, self._vision_done)
        self._prefill.run(context, lambda: all(e.is_set() for e in inputs_done) or self._closed.is_set(),
                          self._checkpoint)
        self._meter(context, force=True)
        if self.autosave and not self._closed.is_set() and self._said_anything():
            self.save()  # an empty meeting is never saved (nor saved over a meeting --replace would replace)
        if self.in_library and not self._closed.is_set() and self._said_anything():
            self.record_in_library()  # before finish() returns: a forget that follows records over it, not under
        self._finished.set()
        self._set_state("finished" if not self._closed.is_set() else self._state)

    def _meter(self, context: MeetingContext, force: bool = False) -> None:
        """Add the time since the last measure to the meeting's use (every few seconds, from the LLM worker)."""
        if not (force or self._usage.due()):
            return
        from app.platform.metrics import placement_transfers

        try:  # a figure that cannot be read is left out; it never stops the meeting
            remote = sum(n for (a, b), (n, _) in placement_transfers(self).items() if a in REMOTE_TIERS or b in REMOTE_TIERS)
            running = sum(1 for s in self.runtime.sessions() if s.running) or 1  # finished meetings share no more
            self._usage.tick(context.stats(), running, self.stream_seconds, remote)
        except Exception:
            log.exception("session %s: its use could not be measured", self.session_id)

    def add_usage(self, earlier: dict) -> None:
        """Count what an earlier run of this meeting used (a rebuilt meeting continues the old one's cost)."""
        self._usage.add(Usage.from_dict(earlier))

    def keep_pictures(self, shown: Sequence[Slide]) -> None:
        """Slides this meeting took over from an earlier session of it (a forget's rebuild, which saves text and
        times only) get back the pictures that session showed, so the page's strip keeps them."""
        pictures = {(s.time, s.text): s.thumbnail for s in shown if s.thumbnail is not None}
        with self._lock:
            for i, slide in enumerate(self._slides):
                if slide.thumbnail is None and (slide.time, slide.text) in pictures:
                    self._slides[i] = Slide(slide.time, slide.text, pictures[(slide.time, slide.text)])
            self._version += 1

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
        self._meter(context)
        if (self.autosave and self._checkpoints.due(self.settings.store.autosave_seconds,
                                                    context.lines + context.pending_lines)
                and self._said_anything()):
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

    # ------------------------------------------------------------------ durability
    def save(self, rewrite: bool = False):
        """Save the meeting (KV blocks, scores, timeline, transcript) to the encrypted session store, incrementally
        (with ``rewrite``: every block again, under this session's source); ``minutia resume`` continues from it."""
        context = self._prefill.ready()
        if self._finished.is_set():
            self._drain_notes()  # a note written after the end goes into the KV before it is saved
        report = self._checkpoints.save(context, self.source, lambda: self._state_dict(context), rewrite)
        held = self._checkpoints.store.session_nbytes(self.session_id)  # None: a store that does not count them
        sent = report.bytes_written if self.settings.store.backend in REMOTE_TIERS else 0  # Redis: over the network
        self._usage.saved(held if held is not None else max(self._usage.snapshot().stored_bytes, report.bytes_written),
                          sent)
        if self.on_transfer is not None:
            self.on_transfer("device", self.settings.store.backend, report.bytes_written, report.seconds)
        self._library = True  # a saved meeting is one of the library's
        if self._finished.is_set() and self.in_library:
            self.recorded = self.record_in_library()  # saved after the end: by hand, a rename, a forget's rebuild
        return report

    @property
    def in_library(self) -> bool:
        """Whether the meeting goes into the meeting library (saved, or opened for it)."""
        return self._library and self.settings.store.library

    def record_in_library(self, strict: bool = False) -> bool:
        """The meeting goes into the meeting library under its session id (again after a rename or a forget's
        rebuild, replacing what was there); True once it has. A library that cannot be written costs a save nothing
        (a warning in the log, False); ``strict`` (a forget, which must reach the library) raises instead."""
        from app.library.record import library_detector, open_library, record_meeting

        try:
            with open_library(self.settings) as library:
                started = library.started(self.session_id) or self._wall_start  # a resumed meeting keeps its date
                record_meeting(library, self.transcript(), title=self.title or self.session_id, started=started,
                               meeting=self.session_id, detector=library_detector(self.settings),
                               forgotten=self.forgotten_names)
        except Exception as exc:
            if strict:
                raise InputError(f"the meeting library could not be updated: {exc}") from None
            log.warning("session %s: not recorded in the meeting library", self.session_id, exc_info=True)
            return False
        return True

    def saved_state(self) -> SavedState:
        """What :meth:`save` would store with the KV now (all of the meeting once it has finished)."""
        context = self._prefill.ready()
        with context._lock:
            return SavedState.from_dict(self._state_dict(context), self.session_id, self.source)

    def _state_dict(self, context: MeetingContext) -> dict:
        """The app state that goes with the KV as it is now (call with ``context._lock`` held): the words and
        slides of the lines the KV holds, and the position up to which they cover the meeting. Words of
        lines not yet prefilled, and of the open line, are left out; audio from the position on is what a
        continuation has to bring again."""
        lines = context.lines
        with self._lock:
            drained = not self._ledger.pending and not context.pending_lines and not self._speech.line
            complete = self._speech_done.is_set() and drained
            if complete or context.full:
                # All of it: at the end nothing is left out; with the model's positions used up no further line
                # enters the KV, and answers read the transcript instead, so the transcript must go on.
                mark = LineMark(len(self._words), len(self._slides), self._speech.last_speaker)
            else:
                mark = self._ledger.mark(lines)
            words = self._words[:mark.words]
            if complete:
                position = self.stream_seconds
            else:
                position = max(self._time_offset, words[-1].end if words else 0.0)
            return SavedState(self.source, position, self.stream_seconds, lines, mark.last_speaker, words,
                              self._slides[:mark.slides], self.timeline, self.forgotten_names,
                              self.kept_names, self._usage.snapshot().to_dict(),
                              self.settings.pii.model_dump(mode="json")).to_dict()

    def _restore_state(self, meta: dict) -> str | None:
        """Take the saved words, slides and position over; returns the label of the last line saved."""
        saved = SavedState.from_dict(meta, self.session_id, self.source)
        self.source, self._words, self._slides, self.timeline = saved.source, saved.words, saved.slides, saved.timeline
        self.forgotten_names, self.kept_names = saved.forgotten_names, saved.kept_names
        # a resumed meeting adds to what it used before
        self._usage = UsageMeter(Usage.from_dict(saved.usage), **_machine(self.settings))
        self._time_offset = saved.position
        self._received_samples = int(round(self._time_offset * SAMPLE_RATE))
        self._ledger = LineLedger(LineMark(len(self._words), len(self._slides), saved.last_speaker), saved.lines)
        return saved.last_speaker

    # ------------------------------------------------------------------ views
    def _names(self) -> dict[str, str]:
        return self._named()[1]

    def _raw_transcript(self) -> Transcript:
        words = list(self._words)
        turns = turns_from_words(realign_to_sentences(words)) if words else []
        return Transcript(turns=turns, source=self.source, duration=round(self.stream_seconds, 3))

    def _named(self) -> tuple[Transcript, dict[str, str]]:
        """The committed transcript with speaker names, and the label -> name map; built once per version."""
        with self._lock:
            if self._snapshot_cache is None or self._snapshot_cache[0] != self._version:
                raw = self._raw_transcript()
                names = speaker_names(raw, self.settings.asr.hotwords, self.forgotten_names, self.kept_names)
                self._snapshot_cache = (self._version, rename_speakers(raw, names), names)
            return self._snapshot_cache[1], self._snapshot_cache[2]

    def speakers(self) -> dict[str, str | None]:
        """Each diarizer label that has spoken, with the name the meeting gives it (None until named)."""
        names = self._names()
        with self._lock:
            return {label: names.get(label) for label in dict.fromkeys(w.speaker for w in self._words)}

    def speaker_label(self, speaker: str, speakers: dict[str, str | None] | None = None) -> str:
        """The label ``speaker`` (a label, or the name it goes by now) means; InputError listing the speakers."""
        from app.text.speakers import speaker_label

        speakers = self.speakers() if speakers is None else speakers
        return speaker_label(speaker.strip(), list(speakers), {k: v for k, v in speakers.items() if v})

    def keep_names(self, names: dict[str, str]) -> None:
        """Labels that already are people's names (a bot room's named participants): theirs before any vote."""
        with self._lock:
            self.kept_names = {**self.kept_names, **names}
            self._version += 1

    def rename_speaker(self, speaker: str, name: str) -> str:
        """Call ``speaker`` (a label, or the name it goes by now) ``name`` from now on, in the transcript, answers
        and the saved meeting, whatever the meeting says; returns the label. Lines already in the KV keep the
        speaker as they were written, so a note line goes into the KV after them: "[mm:ss] Note: The speaker written
        above as Carol or SPEAKER_04 is Dana." (the model reads the rename where it reads the meeting)."""
        from app.text.speakers import checked_name

        name = checked_name(name)
        speakers = self.speakers()
        label = self.speaker_label(speaker, speakers)
        if name in speakers or any(v == name for k, v in speakers.items() if k != label):
            raise InputError(f"{name!r} already names another speaker of this meeting")
        with self._lock:
            kept = {k: v for k, v in self.kept_names.items() if v != name and k != label}
            self.kept_names = {**kept, label: name}
            self.forgotten_names = tuple(n for n in self.forgotten_names if n != name)
            self._version += 1
            at = self._words[-1].end if self._words else 0.0
        if speakers.get(label) == name:
            return label  # nothing changed: no note
        written = [n for n in dict.fromkeys((speakers.get(label), label)) if n and n != name]
        self._note(ContextLine("text", at, at, "Note", f"The speaker written above as {' or '.join(written)} is {name}."))
        return label

    def _note(self, line: ContextLine) -> None:
        """Put a line of the app's own (not said in the meeting) into the KV after what it holds, without blocking
        the caller (a bot's event loop). While input goes on the LLM worker prefills it as any line; once input
        has ended that worker may be past its last drain, so a thread waits for it to finish and prefills the
        line then (never two prefills at once; notes one at a time)."""
        if self._closed.is_set():
            return
        self._append_line(line)
        if self._speech_done.is_set() and self._vision_done.is_set():
            threading.Thread(target=self._prefill_notes, name=f"note-{self.session_id}", daemon=True).start()

    def _prefill_notes(self) -> None:
        self._finished.wait()
        try:
            self._drain_notes()
            self.save_changes()  # a rename after the end is in the saved meeting too
        except Exception:  # closed meanwhile: the note is lost with the meeting's memory, nothing else
            log.exception("session %s: a note could not be prefilled", self.session_id)

    def save_changes(self) -> None:
        """A meeting that saves itself (autosave) and has ended: save what changed since its last save (a rename and
        its note) before anything reads the save (a resume, a forget's rebuild). Nothing for other meetings."""
        if self.autosave and self._finished.is_set() and not self._closed.is_set() and self._said_anything():
            self.save()

    def _drain_notes(self) -> None:
        """Prefill the notes left after the LLM worker ended (call once it has: ``_finished``)."""
        with self._notes_lock:
            if self._error is not None or self._closed.is_set() or self._prefill.context is None:
                return  # a failed or closed meeting's KV takes no more lines
            context = self._prefill.context
            self._ledger.drain(context)
            context.flush()

    def transcript(self) -> Transcript:
        """Committed turns with the names people call each other (SPEAKER_xx until someone is named)."""
        return self._named()[0]

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait for the last answer's comparisons (drift, shadow), which run after it in the background, so the
        figures a snapshot reads next include them; True when none is left running."""
        context = self._context
        return context is None or context.shadow.wait(timeout)

    def snapshot(self) -> SessionSnapshot:
        transcript = self.transcript()
        # The KV figures first, outside the session's lock: a checkpoint holds the context's lock and then takes
        # the session's (_state_dict), so taking them the other way round deadlocked a snapshot against an autosave.
        context = self._context
        kv = context.stats() if context is not None else {}
        with self._lock:
            lags, ttfts = self._speech.commit_lags, self._questions.ttfts
            lag = lags[-1] if lags else None
            kv["question_ttft"] = ttfts[-1] if ttfts else None
            counters = {
                "audio_dropped_samples": self._audio.stats.dropped,
                "video_dropped_frames": self._frames.stats.dropped,
                "committed_words": len(self._words),
                "slides": len(self._slides),
                "commit_lag_buckets": self._speech.commit_lag_histogram.cumulative(),
                "commit_lag_sum": self._speech.commit_lag_histogram.total,
                "commit_lag_count": self._speech.commit_lag_histogram.count,
                "usage": self._usage.snapshot().to_dict(),
            }
            return SessionSnapshot(
                session_id=self.session_id,
                state=self._state,
                stream_seconds=round(self.stream_seconds, 3),
                transcript=transcript,
                tentative=self._speech.tentative,
                slides=list(self._slides),
                kv=kv,
                commit_lag=lag,
                error=self._error,
                version=self._version,
                counters=counters,
                decoded_seconds=round(max(self._speech.decoded_seconds, self._time_offset), 3),
            )

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

    def _bump(self) -> None:
        with self._lock:
            self._version += 1

    def _set_state(self, state: str) -> None:
        with self._lock:
            if self._state == state or self._state == "error":
                return
            self._state = state
            self._version += 1
        self._emit(StateChanged(state))

    def _fail(self, message: str) -> None:
        with self._lock:
            self._state, self._error = "error", message
            self._version += 1
        self._finished.set()
        self._emit(Failed(message))

    @property
    def state(self) -> str:
        return self._state

    @property
    def running(self) -> bool:
        """Its workers still run (it shares the machine with the other meetings that do)."""
        return not self._finished.is_set()

    @property
    def error(self) -> str | None:
        """Why the session failed (state "error"), else None."""
        return self._error

    def close(self) -> None:
        self._closed.set()
        self._audio.close()
        self._frames.close()
        self._prefill.wake()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        if self._context is not None:
            self._context.close()


def _turn_words(turn, tokens: list[str], start: float, end: float) -> list[TranscriptWord]:
    """A transcript turn's words: their own times where it has them, else spread evenly over the turn."""
    if turn.words and turn.start is not None:
        return [TranscriptWord(w.text, w.start, w.end, turn.speaker, w.probability) for w in turn.words]
    step = (end - start) / len(tokens)
    return [TranscriptWord(tok, round(start + i * step, 3), round(start + (i + 1) * step, 3), turn.speaker)
            for i, tok in enumerate(tokens)]


def _make_timeline():
    from kvstore.timeline import TimelineIndex

    return TimelineIndex()
