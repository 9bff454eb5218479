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
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Protocol, Sequence

import numpy as np

from app.actions import ActionItem, extract_action_items
from app.answers import Answer, AnswerFinder
from app.assistant import Assistant, MeetingSummary
from app.summary import build_summary
from app.context import ContextLine, MeetingContext, PlacedLine, confidence
from app.events import (Answered, Failed, LineClosed, SessionEvent, Slide, SlideShown, StateChanged,
                        TentativeChanged, WordsCommitted)
from app.retrieval import default_embedder
from app.sentences import Sentence
from app.speakers import rename_speakers, speaker_names
from app.transcript import Transcript, TranscriptWord, Turn, join_words, realign_to_sentences, turns_from_words
from encoders.audio import SAMPLE_RATE
from encoders.errors import InputError
from encoders.ring import ItemRing, RingBuffer

if TYPE_CHECKING:
    from app.config import Settings
    from app.llm import LLMEngine
    from app.session_speech import Diarizer, SpeechRecogniser
    from encoders.vision import VisionPipeline
    from kvstore.cold import ColdTier

log = logging.getLogger("minutia.session")

_SENTENCE_END = re.compile(r"[.?!…]$")
MAX_LINE_WORDS = 40  # a line the LLM reads is closed at a sentence end, a speaker change, or this
AUDIO_RING_SECONDS = 120  # audio waiting for the recogniser; older audio is dropped (counted) beyond this
VIDEO_RING_FRAMES = 8  # frames waiting for the vision worker; the oldest are dropped beyond this


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


class _Mark(NamedTuple):
    words: int
    slides: int
    last_speaker: str | None


@dataclass
class SavedMeeting:
    """A meeting loaded from the session store: its KV cache and the app state saved with it."""

    cache: Any
    metadata: dict


class SharedModels(Protocol):
    """What a session takes from the process it runs in (app.runtime.Runtime, which creates sessions: the
    runtime imports this module, never the other way round)."""

    settings: Settings

    @property
    def transcriber(self) -> SpeechRecogniser: ...

    @property
    def engine(self) -> LLMEngine: ...

    def online_diarizer(self) -> Diarizer: ...

    def vision_pipeline(self) -> VisionPipeline: ...

    def cold_tier(self, session_id: str) -> ColdTier | None: ...

    def session_store(self, create_key: bool = True) -> Any: ...


class MeetingSession:
    def __init__(self, runtime: SharedModels, session_id: str, source: str = "live", autosave: bool = False,
                 restored: SavedMeeting | None = None) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.session_id = session_id
        self.source = source
        self._lock = threading.RLock()
        self._listeners: list[Callable[[SessionEvent], None]] = []
        self._state = "idle"
        self._error: str | None = None
        self._version = 0
        self._closed = threading.Event()
        self._finished = threading.Event()

        self._audio = RingBuffer(AUDIO_RING_SECONDS * SAMPLE_RATE, np.float32, policy="drop_oldest")
        self._frames: ItemRing[tuple[float, np.ndarray]] = ItemRing(VIDEO_RING_FRAMES, policy="drop_oldest")
        self._received_samples = 0

        self._words: list[TranscriptWord] = []  # committed, with diarizer labels
        self._diarized: list[int] = []  # the diarizer's word number -> index in _words
        self._line: list[TranscriptWord] = []  # committed words of the line not yet closed
        self._last_line_speaker: str | None = None
        self._tentative = ""
        self._slides: list[Slide] = []
        self._commit_lags: list[float] = []
        self._ttfts: list[float] = []
        self._snapshot_cache: tuple[int, Transcript, dict[str, str]] | None = None

        self._pending_lines: deque[ContextLine] = deque()  # closed lines waiting for the LLM worker
        # What the KV holds once the n-th line handed to the LLM worker is prefilled: a checkpoint saves the
        # words, slides and position of the lines the KV has, so that transcript, KV and position agree.
        self._lined_words = 0  # committed words in closed lines (the rest are in the open line)
        self._line_marks: list[_Mark] = []
        self._base_mark = _Mark(0, 0, None)  # what the KV held when this process took the meeting over
        self._base_lines = 0
        self._slide_embeddings: dict[float, np.ndarray] = {}  # slide time -> CLIP embedding, until on the timeline
        self._speech_done = threading.Event()
        self._vision_done = threading.Event()
        self._context: MeetingContext | None = None
        self._context_ready = threading.Event()
        self._prefill_wakeup = threading.Event()
        self._flush_all = threading.Event()  # prefill even a short backlog now (someone is waiting for it)
        self.timeline = _make_timeline()
        self.autosave = autosave
        self._writer = None  # kvstore.persist.SessionWriter, made on the first save
        self.on_transfer: Callable[[str, str, int, float], None] | None = None  # (source, target, bytes, s) per save
        self._saved_at = time.monotonic()  # wall clock of the last checkpoint
        self._saved_lines = -1
        self._time_offset = 0.0  # stream time at which this process's input starts (a resumed meeting goes on)
        self._restored = restored
        if restored is not None:
            self._restore_state(restored.metadata)

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
        audio = _to_mono_16k(samples, sample_rate)
        if audio.size == 0:
            return
        self._ensure_open()
        self._set_state("live")
        if wait:
            self._wait_for_room(self._audio, len(audio))
        self._audio.write(audio)
        with self._lock:
            self._received_samples += len(audio)

    def feed_video(self, frame: np.ndarray, t: float | None = None, wait: bool = False) -> None:
        """Queue one RGB frame (HxWx3 uint8) at ``t`` seconds after this input started (default: the audio so far).

        The vision worker keeps up with a few frames a second; beyond its ring the oldest frames are
        dropped and counted, unless ``wait=True``.
        """
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] not in (3, 4) or frame.dtype != np.uint8:
            raise InputError(f"a video frame must be HxWx3 uint8 RGB, got shape {frame.shape} and dtype {frame.dtype}")
        self._ensure_open()
        self._set_state("live")
        if wait:
            self._wait_for_room(self._frames, 1)
        self._frames.put((self.stream_seconds if t is None else self._time_offset + float(t), frame[:, :, :3]))

    def _wait_for_room(self, ring, items: int) -> None:
        while ring.available + items > ring.capacity and not self._closed.is_set() and self._error is None:
            time.sleep(0.02)

    def finish(self, timeout: float | None = None) -> None:
        """End of input: everything received is transcribed, committed and prefilled before this returns."""
        self._audio.close()
        self._frames.close()
        if not self._finished.wait(timeout):
            raise TimeoutError(f"session {self.session_id} did not finish within {timeout} s")

    def add_transcript(self, transcript: Transcript, words_per_second: float = 2.5) -> None:
        """Add an earlier part of the meeting as already-committed text (a transcript, e.g. QMSum).

        Turns without times get times at ``words_per_second`` after what the session holds; the audio
        clock moves on accordingly, so live audio fed afterwards continues the same timeline.
        """
        self._ensure_open()
        with self._lock:
            clock = max(self.stream_seconds, self._words[-1].end if self._words else 0.0)
        for turn in transcript.turns:
            tokens = turn.text.split()
            if not tokens:
                continue
            start = turn.start if turn.start is not None else clock
            end = turn.end if turn.end is not None else start + len(tokens) / words_per_second
            step = (end - start) / len(tokens)
            words = [
                TranscriptWord(tok, round(start + i * step, 3), round(start + (i + 1) * step, 3), turn.speaker)
                for i, tok in enumerate(tokens)
            ]
            with self._lock:
                self._words.extend(words)
            change = turn.speaker != self._last_line_speaker
            self._last_line_speaker = turn.speaker
            self._append_line(ContextLine("audio", start, end, turn.speaker, " ".join(tokens), speaker_change=change),
                              words=len(words))
            clock = end
        with self._lock:
            if self._received_samples == int(round(self._time_offset * SAMPLE_RATE)):
                self._time_offset = max(self._time_offset, clock)  # no audio yet: the ASR's times start here
            self._received_samples = max(self._received_samples, int(clock * SAMPLE_RATE))
        self._bump()

    def wait_until_prefilled(self, timeout: float | None = None) -> bool:
        """Block until every closed line is in the KV cache (benchmarks and tests measure after this)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        context = self._wait_for_context(timeout or 300.0)
        while self._pending_lines or context.pending_lines:
            if self._error:
                raise InputError(f"the session failed: {self._error}")
            if deadline is not None and time.monotonic() > deadline:
                return False
            self._flush_all.set()
            self._prefill_wakeup.set()
            time.sleep(0.05)
        with context._lock:  # a flush in progress holds it
            return True

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
                self._fail(f"{type(exc).__name__}: {exc}")

        return run

    def _speech_worker(self) -> None:
        from encoders.streaming import StreamingOptions, StreamingTranscriber

        asr_settings = self.settings.asr
        asr = StreamingTranscriber(
            self.runtime.transcriber,
            StreamingOptions(language=asr_settings.language, beam_size=asr_settings.stream_beam_size,
                             min_chunk_seconds=asr_settings.stream_min_chunk_seconds,
                             hotwords=tuple(asr_settings.hotwords)),
        )
        diarizer = self.runtime.online_diarizer()
        step = asr.options.min_chunk_seconds
        piece = int(step * SAMPLE_RATE)
        # A backlog is never skipped over; it is caught up in longer steps, because every decode costs one
        # whole Whisper window however little new audio it brings.
        catch_up = max(piece, int(asr_settings.stream_catch_up_seconds * SAMPLE_RATE))
        pending = 0.0
        while not self._closed.is_set():
            behind = self._audio.available >= 2 * piece
            chunk = self._audio.read(max_items=catch_up if behind else piece, timeout=0.2)
            if len(chunk.data):
                asr.insert_audio(chunk.data)
                diarizer.insert_audio(chunk.data)
                pending += len(chunk.data) / SAMPLE_RATE
            if pending >= step:
                pending = 0.0
                self._commit(asr.process(), diarizer)
            if self._audio.exhausted:
                self._commit(asr.finish(), diarizer, final=True)
                break
        self._close_line()
        self._speech_done.set()

    def _commit(self, update, diarizer, final: bool = False) -> None:
        now_stream = self.stream_seconds
        words = list(update.committed)
        if words:
            labels = diarizer.label_words(words)
            changes = diarizer.take_changes()  # re-clustering may move earlier words to another speaker
            offset = self._time_offset
            committed = [
                TranscriptWord(w.text, round(offset + w.start, 3), round(offset + w.end, 3), label, round(w.probability, 4))
                for w, label in zip(words, labels)
            ]
            with self._lock:
                for change in changes:
                    if change.index < len(self._diarized):
                        pos = self._diarized[change.index]
                        old = self._words[pos]
                        self._words[pos] = TranscriptWord(old.text, old.start, old.end, change.new, old.probability)
                self._diarized.extend(range(len(self._words), len(self._words) + len(committed)))
                self._words.extend(committed)
                self._version += 1  # the lines closed below read the names of this transcript
                self._commit_lags.extend(max(0.0, now_stream - w.end) for w in committed)
                self._commit_lags = self._commit_lags[-2000:]
            for word in committed:
                self._add_to_line(word)
            self._emit(WordsCommitted(tuple(committed)))
        tentative = " ".join(w.text for w in update.tentative)
        with self._lock:
            changed = tentative != self._tentative
            self._tentative = "" if final else tentative
        if changed or words:
            self._bump()
            self._emit(TentativeChanged(self._tentative))

    def _add_to_line(self, word: TranscriptWord) -> None:
        """Lines are sentences. An online diarizer flips labels for a word or two inside a sentence, so
        a line is split at a speaker change only once the new label has held for three words."""
        self._line.append(word)
        if _SENTENCE_END.search(word.text) or len(self._line) >= MAX_LINE_WORDS:
            self._close_line()
            return
        tail = self._line[-3:]
        if len(self._line) > 3 and len({w.speaker for w in tail}) == 1 and tail[0].speaker != _majority(self._line[:-3]):
            self._line = self._line[:-3]
            self._close_line()
            self._line = tail

    def _close_line(self) -> None:
        if not self._line:
            return
        words, self._line = self._line, []
        label = _majority(words)
        with self._lock:
            names = self._names()
        line = ContextLine(
            modality="audio",
            start=words[0].start,
            end=words[-1].end,
            speaker=names.get(label, label),
            text=join_words(w.text for w in words),
            speaker_change=label != self._last_line_speaker,
        )
        self._last_line_speaker = label
        self._append_line(line, words=len(words))
        self._emit(LineClosed(line))

    def _append_line(self, line: ContextLine, words: int = 0) -> None:
        """Queue a line for the KV; ``words``: committed words it closes (0 for a slide)."""
        with self._lock:
            self._lined_words += words
            if not line.text.strip():  # the context skips a blank line; its words go with the next mark
                return
            self._line_marks.append(_Mark(self._lined_words, len(self._slides), self._last_line_speaker))
            self._pending_lines.append(line)
        self._prefill_wakeup.set()

    def _vision_worker(self) -> None:
        pipeline = None
        while not self._closed.is_set():
            items = self._frames.get(max_items=1, timeout=0.2)
            if not items:
                if self._frames.exhausted:
                    break
                continue
            if pipeline is None:
                pipeline = self.runtime.vision_pipeline()
            for _, (t, frame) in items:
                try:
                    event = pipeline.feed(frame, t)
                except InputError as exc:  # one bad frame (e.g. time going backwards) is skipped, not fatal
                    log.warning("session %s: frame at %.2f s skipped: %s", self.session_id, t, exc)
                    continue
                if event is None or not event.text.strip():
                    continue
                text = "; ".join(part.strip() for part in event.text.splitlines() if part.strip())
                slide = Slide(event.time, text, event.thumbnail)
                with self._lock:
                    self._slides.append(slide)
                if event.embedding is not None:
                    self._slide_embeddings[event.time] = event.embedding
                self._append_line(ContextLine("video", event.time, event.time, None, slide.text, slide_change=True))
                self._bump()
                self._emit(SlideShown(slide))
        self._vision_done.set()

    def _llm_worker(self) -> None:
        engine = self.runtime.engine
        prompts = engine.live_prompts()
        self._prompts = prompts
        if self._restored is not None:
            context = MeetingContext(engine, self.settings.kv, header=prompts.header, restored=self._restored.cache,
                                     restored_lines=int(self._restored.metadata.get("lines", 0)))
            self._restored = None
        else:
            context = MeetingContext(engine, self.settings.kv, header=prompts.header,
                                     cold_tier=self.runtime.cold_tier(self.session_id))
        context.on_placed(self._place_on_timeline)
        self._context = context
        self._context_ready.set()
        busy_at, compacted = time.monotonic(), True
        while True:
            self._prefill_wakeup.wait(timeout=0.5)
            self._prefill_wakeup.clear()
            if self._pending_lines or context.pending_lines:
                busy_at, compacted = time.monotonic(), False
            elif not compacted and time.monotonic() - busy_at >= self.settings.kv.idle_compact_seconds:
                context.compact()  # input is idle: give the pools' free slots back (a page-table remap)
                compacted = True
            self._drain_lines(context)
            done = self._speech_done.is_set() and self._vision_done.is_set()
            if done or self._closed.is_set():
                self._drain_lines(context)
                context.flush()
                break
            flush_all = self._flush_all.is_set()
            self._flush_all.clear()
            context.flush(min_tokens=0 if flush_all else context.prefill_chunk_tokens)
            if (self.autosave and time.monotonic() - self._saved_at >= self.settings.store.autosave_seconds
                    and context.lines + context.pending_lines != self._saved_lines and self._said_anything()):
                context.flush()  # every closed line into the KV: the checkpoint holds all but the open line
                self.save()
        if self.autosave and not self._closed.is_set() and self._said_anything():
            self.save()  # an empty meeting is never saved (nor saved over a meeting --replace would replace)
        self._finished.set()
        self._set_state("finished" if not self._closed.is_set() else self._state)

    def _said_anything(self) -> bool:
        with self._lock:
            return bool(self._words or self._slides)

    def _drain_lines(self, context: MeetingContext) -> None:
        while self._pending_lines:
            context.append(self._pending_lines.popleft())

    def _place_on_timeline(self, placed: PlacedLine) -> None:
        line = placed.line
        embedding = self._slide_embeddings.pop(line.start, None) if line.modality == "video" else None
        self.timeline.add(
            line.modality, line.start, line.end, placed.token_start, placed.token_end, speaker=line.speaker,
            text=line.text, embedding=embedding,
        )

    # ------------------------------------------------------------------ questions
    def ask(self, question: str) -> Answer:
        """Answer from the meeting so far (app/answers.py); a free-form answer is generated from the
        meeting's KV cache. Cites times and speakers. Safe while ingestion continues."""
        question = " ".join(str(question or "").split())
        if not question:
            raise InputError("the question is empty")
        if len(question) > 2000:
            raise InputError(f"the question is {len(question)} characters long; keep it under 2000")
        transcript = self.transcript()
        lines = self._lines_for_retrieval(transcript)
        if not lines.turns:
            answer = Answer(question, "Nothing has been said yet.", [], 0, 0.0)
            self._emit(Answered(answer))
            return answer
        answer = AnswerFinder(lines, default_embedder(), partial(self._model_answer, transcript)).answer(question)
        self._emit(Answered(answer))
        return answer

    def _model_answer(self, transcript: Transcript, question: str, evidence: Sequence[Sentence]) -> tuple[str, float] | None:
        """The model's answer from the meeting's KV cache, the evidence lines repeated after it."""
        engine = self.runtime.engine
        context = self._wait_for_context()
        excerpt = "\n".join(ContextLine("audio", s.start or 0.0, s.end or s.start or 0.0, s.speaker, s.text).render().rstrip()
                            for s in evidence)
        tail = self._prompts.answer_tail.replace("{question}", question)
        suffix = f"\nMost relevant lines:\n{excerpt}\n{tail}" if excerpt else tail
        try:
            generation = context.generate(suffix, 48, stop=("\n",), focus=self._focus(evidence))
        except InputError:  # the meeting outgrew the model's positions: read the transcript instead
            found = Assistant(engine).model_answer(transcript, question, evidence)
            return None if found is None else found[:2]
        with self._lock:
            self._ttfts.append(generation.time_to_first_token)
            self._ttfts = self._ttfts[-200:]
        text = generation.text.strip()
        if not text or engine.prompts.not_found.lower() in text.lower():
            return None
        return text, confidence(generation)

    def _lines_for_retrieval(self, transcript: Transcript) -> Transcript:
        """Spoken turns and slides, in time order, as one list of turns to rank against a question."""
        with self._lock:
            slides = list(self._slides)
        turns = list(transcript.turns) + [Turn("Slide", s.text, s.time, s.time) for s in slides]
        turns.sort(key=lambda t: t.start or 0.0)
        return Transcript(turns=turns, source=transcript.source)

    def _focus(self, evidence: Sequence[Sentence]) -> list[tuple[int, int]]:
        """Token ranges of the evidence lines' time windows (query-aware promotion, via the timeline)."""
        ranges: list[tuple[int, int]] = []
        for sentence in evidence:
            if sentence.start is not None:
                ranges.extend(self.timeline.tokens_in(sentence.start, sentence.end if sentence.end is not None else sentence.start))
        return ranges

    def summary(self) -> MeetingSummary:
        transcript = self.transcript()
        if not transcript.turns:
            return MeetingSummary("Nothing has been said yet.")
        context = self._wait_for_context()
        engine = self.runtime.engine
        stop = ("\n",) if engine.prompts.style == "completion" else ()
        generation = context.generate(self._prompts.summary_tail, engine.settings.max_new_tokens, stop=stop)
        prefix = engine.prompts.summary_prefix
        text = f"{prefix} {generation.text}".strip() if prefix else generation.text
        return build_summary(transcript, text)

    def action_items(self) -> list[ActionItem]:
        return extract_action_items(self.transcript())

    def _wait_for_context(self, timeout: float = 300.0) -> MeetingContext:
        if not self._context_ready.wait(timeout):
            raise InputError("the language model is still loading; try again in a moment")
        assert self._context is not None
        return self._context

    # ------------------------------------------------------------------ durability
    def save(self):
        """Save the meeting (KV blocks, scores, timeline, transcript) to the encrypted session store.

        Incremental: blocks unchanged since the last save are not written again. ``minutia resume``
        (or Runtime.resume_session) continues from here without prefilling anything again.
        """
        from kvstore.persist import SessionWriter
        from kvstore.stores import StoreError

        context = self._wait_for_context()
        if not hasattr(context.cache, "tiered_layers"):
            raise InputError("saving a meeting needs minutia's TieredCache (kv.enabled: true)")
        with context._lock:
            if self._writer is None:
                self._writer = SessionWriter(self.runtime.session_store(), self.session_id, source=self.source)
            metadata = self._state_dict(context)
            try:
                with _inference_mode():
                    report = self._writer.save(context.cache, metadata)
            except StoreError as exc:
                raise InputError(f"session {self.session_id} could not be saved: {exc}") from exc
            self._saved_at, self._saved_lines = time.monotonic(), metadata["lines"]
        if self.on_transfer is not None:
            self.on_transfer("device", self.settings.store.backend, report.bytes_written, report.seconds)
        return report

    def _state_dict(self, context: MeetingContext) -> dict:
        """The app state that goes with the KV as it is now (call with ``context._lock`` held): the words and
        slides of the lines the KV holds, and the position up to which they cover the meeting. Words of
        lines not yet prefilled, and of the open line, are left out; audio from the position on is what a
        continuation has to bring again."""
        lines = context.lines
        with self._lock:
            drained = not self._pending_lines and not context.pending_lines and not self._line
            complete = self._speech_done.is_set() and drained
            if complete or context.full:
                # All of it: at the end nothing is left out; with the model's positions used up no further line
                # enters the KV, and answers read the transcript instead, so the transcript must go on.
                mark = _Mark(len(self._words), len(self._slides), self._last_line_speaker)
            else:
                mark = self._line_marks[lines - self._base_lines - 1] if lines > self._base_lines else self._base_mark
            words = self._words[:mark.words]
            if complete:
                position = self.stream_seconds
            else:
                position = max(self._time_offset, words[-1].end if words else 0.0)
            return {
                "format": "minutia.session/1",
                "source": self.source,
                "stream_seconds": round(position, 3),
                "received_seconds": round(self.stream_seconds, 3),
                "lines": lines,
                "last_line_speaker": mark.last_speaker,
                "words": [[w.text, w.start, w.end, w.speaker, w.probability] for w in words],
                "slides": [[s.time, s.text] for s in self._slides[:mark.slides]],
                "timeline": self.timeline.to_dict(),
            }

    def _restore_state(self, meta: dict) -> None:
        if meta.get("format") != "minutia.session/1":
            raise InputError(f"session {self.session_id} was not saved by a meeting session")
        from kvstore.timeline import TimelineIndex

        self.source = meta.get("source", self.source)
        self._words = [TranscriptWord(t, s, e, spk, p) for t, s, e, spk, p in meta["words"]]
        self._slides = [Slide(t, text) for t, text in meta["slides"]]
        self.timeline = TimelineIndex.from_dict(meta["timeline"])
        self._last_line_speaker = meta.get("last_line_speaker")
        self._time_offset = float(meta["stream_seconds"])
        self._received_samples = int(round(self._time_offset * SAMPLE_RATE))
        self._lined_words = len(self._words)
        self._base_mark = _Mark(len(self._words), len(self._slides), self._last_line_speaker)
        self._base_lines = int(meta.get("lines", 0))
        self._saved_lines = self._base_lines

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
                names = speaker_names(raw, self.settings.asr.hotwords)
                self._snapshot_cache = (self._version, rename_speakers(raw, names), names)
            return self._snapshot_cache[1], self._snapshot_cache[2]

    def transcript(self) -> Transcript:
        """Committed turns with the names people call each other (SPEAKER_xx until someone is named)."""
        return self._named()[0]

    def snapshot(self) -> SessionSnapshot:
        transcript = self.transcript()
        with self._lock:
            lag = self._commit_lags[-1] if self._commit_lags else None
            kv = self._context.stats() if self._context is not None else {}
            kv["question_ttft"] = self._ttfts[-1] if self._ttfts else None
            counters = {
                "audio_dropped_samples": self._audio.stats.dropped,
                "video_dropped_frames": self._frames.stats.dropped,
                "committed_words": len(self._words),
                "slides": len(self._slides),
            }
            return SessionSnapshot(
                session_id=self.session_id,
                state=self._state,
                stream_seconds=round(self.stream_seconds, 3),
                transcript=transcript,
                tentative=self._tentative,
                slides=list(self._slides),
                kv=kv,
                commit_lag=lag,
                error=self._error,
                version=self._version,
                counters=counters,
            )

    def kv_stats(self) -> dict:
        """The KV figures of the meeting's cache (waits for the LLM to be loaded)."""
        return self._wait_for_context().stats()

    def commit_lags(self) -> list[float]:
        with self._lock:
            return list(self._commit_lags)

    # ------------------------------------------------------------------ events and state
    def subscribe(self, callback: Callable[[SessionEvent], None]) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return unsubscribe

    def _emit(self, event: SessionEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for callback in listeners:
            try:
                callback(event)
            except Exception:  # a broken listener must not stop the meeting
                log.exception("session %s: listener failed on %s", self.session_id, event.kind)

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

    def close(self) -> None:
        self._closed.set()
        self._audio.close()
        self._frames.close()
        self._prefill_wakeup.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        if self._context is not None:
            self._context.close()


def _majority(words: list[TranscriptWord]) -> str:
    """The speaker who spoke most of ``words`` (by duration)."""
    spoken: dict[str, float] = {}
    for w in words:
        spoken[w.speaker] = spoken.get(w.speaker, 0.0) + max(w.end - w.start, 0.01)
    return max(spoken, key=spoken.__getitem__)


def _inference_mode():
    import torch

    return torch.inference_mode()


def _make_timeline():
    from kvstore.timeline import TimelineIndex

    return TimelineIndex()


def _to_mono_16k(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """Any PCM layout a browser or WebRTC track gives -> float32 mono at 16 kHz."""
    audio = np.asarray(samples)
    if sample_rate <= 0:
        raise InputError(f"sample rate must be positive, got {sample_rate}")
    if audio.dtype.kind in "iu":  # integer PCM: scale to [-1, 1] by the type's range
        audio = audio.astype(np.float32) / float(np.iinfo(audio.dtype).max + 1)
    elif audio.dtype.kind != "f":
        raise InputError(f"audio samples must be float or integer PCM, got dtype {audio.dtype}")
    if audio.ndim == 2:
        # (n, channels) as browsers send; a (channels, n) block with few rows (WebRTC frames) is transposed
        if audio.shape[0] <= 8 and audio.shape[1] > audio.shape[0]:
            audio = audio.T
        audio = audio.mean(axis=1)
    elif audio.ndim != 1:
        raise InputError(f"audio must be (n,) or (n, channels), got shape {audio.shape}")
    audio = audio.astype(np.float32, copy=False)
    if not np.isfinite(audio).all():
        raise InputError("audio contains NaN or infinite samples")
    if sample_rate != SAMPLE_RATE:
        from encoders.audio import resample

        audio = resample(audio, sample_rate, SAMPLE_RATE)
    return audio


def replay(
    session: MeetingSession,
    path: str | Path,
    speed: float = 1.0,
    stop: threading.Event | None = None,
    chunk_seconds: float = 0.5,
    finish: bool = True,
    until: float | None = None,
) -> None:
    """Feed a recording into ``session`` as if it were live (``speed`` x real time; 0 = as fast as possible),
    up to ``until`` seconds of it when given."""
    from encoders.media import iter_media

    if speed < 0:
        raise InputError("speed must be >= 0")
    if until is not None and until <= 0:
        raise InputError("until must be > 0 seconds")
    started = time.perf_counter()
    for item in iter_media(Path(path), chunk_seconds=chunk_seconds):
        if stop is not None and stop.is_set():
            break
        if until is not None and item.time >= until:
            break
        if speed > 0:
            delay = started + item.time / speed - time.perf_counter()
            if delay > 0:
                if stop is not None:
                    if stop.wait(delay):
                        break
                else:
                    time.sleep(delay)
        if item.audio is not None:
            session.feed_audio(item.audio, SAMPLE_RATE, wait=speed == 0)
        if item.frame is not None:
            session.feed_video(item.frame, item.time, wait=speed == 0)
    if finish:
        session.finish()
