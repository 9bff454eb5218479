"""Streaming ASR: words committed while the meeting is still going (whisper_streaming's method).

Whisper decodes whole windows, not streams. ``StreamingTranscriber`` keeps a growing audio buffer,
re-decodes it every ``min_chunk_seconds`` of new audio, and commits only the words that two
consecutive hypotheses agree on (LocalAgreement-2, Macháček et al. 2023): a word that survives a
second look with more right context rarely changes again. Committed text is fed back as the prompt,
and the buffer is cut at committed sentence ends (with a hard cap), so each decode stays short.

Everything here is synchronous and thread-free: the session calls ``insert_audio`` and ``process``
from its worker thread, tests call them step by step.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from encoders.asr import Transcriber, TranscribeOptions, Word, ends_sentence
from encoders.audio import SAMPLE_RATE
from encoders.errors import InputError


def _key(word: Word) -> str:
    """What two hypotheses must agree on: the word without case and punctuation."""
    return re.sub(r"[^\w']", "", word.text.lower())


class LocalAgreement:
    """LocalAgreement-2 over word hypotheses whose times are absolute (stream seconds).

    ``insert`` takes the newest hypothesis of the whole buffer and returns the words it newly
    commits: the longest prefix it shares with the previous hypothesis, beyond what is committed
    already. Committed words carry the newer hypothesis's text, times and probability.
    """

    def __init__(self, max_ngram: int = 5, time_tolerance: float = 0.1):
        self.max_ngram = max_ngram
        self.time_tolerance = time_tolerance
        self.committed_end = 0.0
        self._recent: list[Word] = []  # tail of what is committed, to drop words re-recognised
        self._previous: list[Word] = []  # the last hypothesis, minus what it committed

    @property
    def tentative(self) -> list[Word]:
        """The newest hypothesis's words that are not committed (yet)."""
        return list(self._previous)

    def insert(self, hypothesis: Sequence[Word]) -> list[Word]:
        new = [w for w in hypothesis if w.start > self.committed_end - self.time_tolerance]
        # Whisper re-recognises the last committed words with slightly different times; drop an
        # n-gram at the head of the hypothesis that repeats the tail of the committed text.
        if new and self._recent and abs(new[0].start - self.committed_end) < 1.0:
            for n in range(min(self.max_ngram, len(self._recent), len(new)), 0, -1):
                if [_key(w) for w in self._recent[-n:]] == [_key(w) for w in new[:n]]:
                    new = new[n:]
                    break
        agreed = 0
        while agreed < min(len(new), len(self._previous)) and _key(new[agreed]) == _key(self._previous[agreed]):
            agreed += 1
        committed, self._previous = new[:agreed], new[agreed:]
        self._commit(committed)
        return committed

    def flush(self, until: float | None = None) -> list[Word]:
        """Commit the tentative words (ending by ``until``, or all): end of stream, or a forced cut."""
        cut = len(self._previous) if until is None else sum(1 for w in self._previous if w.end <= until)
        committed, self._previous = self._previous[:cut], self._previous[cut:]
        self._commit(committed)
        return committed

    def _commit(self, words: list[Word]) -> None:
        if words:
            self.committed_end = max(self.committed_end, words[-1].end)
            self._recent = (self._recent + words)[-self.max_ngram :]


@dataclass(frozen=True)
class StreamingOptions:
    """How often to decode and how long the decoded window may grow.

    The latency of a word is roughly one ``min_chunk_seconds`` (it must be seen twice) plus two
    decode times; decode time grows with the buffer, hence the trimming.
    """

    min_chunk_seconds: float = 1.0  # new audio needed before the next decode
    buffer_trim_seconds: float = 10.0  # past this, cut the buffer at the last committed sentence end
    max_buffer_seconds: float = 18.0  # hard cap: cut at the last committed word, or force a commit
    beam_size: int = 1  # greedy: ~3x faster than beam 5 and agreement already filters unstable words
    language: str | None = "en"
    vad_filter: bool = True  # silence never reaches the decoder, so it cannot hallucinate words
    vad_min_silence_ms: int = 500
    temperature: tuple[float, ...] = (0.0,)  # no fallback re-decodes: the next decode is the fallback
    prompt_chars: int = 200  # committed text before the buffer, fed as the decoder prompt
    no_speech_threshold: float = 0.6
    hotwords: tuple[str, ...] = ()
    window_margin_seconds: float | None = None  # encode the buffer plus this much padding, not a 30 s window
    # A decoded segment none of whose words reaches this probability is not taken as heard. Over noise after the
    # last words Whisper writes "Bye." (0.005-0.07) or "and the" (0.004, 0.05); speech it hears, even misheard,
    # has some word above it (0.15 is Whisper's own bar for an unlikely word, its hallucination check's).
    min_segment_probability: float = 0.15

    def __post_init__(self):
        if self.min_chunk_seconds <= 0:
            raise InputError(f"min_chunk_seconds must be positive, got {self.min_chunk_seconds}")
        if not 0 < self.buffer_trim_seconds <= self.max_buffer_seconds:
            raise InputError("need 0 < buffer_trim_seconds <= max_buffer_seconds")
        if not 0 <= self.min_segment_probability < 1:
            raise InputError(f"min_segment_probability must be in [0, 1), got {self.min_segment_probability}")

    def transcribe_options(self, prompt: str | None) -> TranscribeOptions:
        return TranscribeOptions(
            language=self.language,
            beam_size=self.beam_size,
            vad_filter=self.vad_filter,
            condition_on_previous_text=False,
            no_speech_threshold=self.no_speech_threshold,
            temperature=self.temperature,
            hallucination_silence_threshold=None,
            initial_prompt=prompt or None,
            hotwords=self.hotwords,
            vad_parameters={"min_silence_duration_ms": self.vad_min_silence_ms},
            window_margin_seconds=self.window_margin_seconds,
        )


@dataclass(frozen=True)
class StreamUpdate:
    """What one step produced: newly committed words (final) and the current tentative tail."""

    committed: list[Word]
    tentative: list[Word]
    stream_seconds: float  # audio received when this update was made


class StreamingTranscriber:
    """Whisper + LocalAgreement-2 over a bounded, trimmed audio buffer (16 kHz mono float32)."""

    def __init__(self, transcriber: Transcriber, options: StreamingOptions | None = None):
        self.transcriber = transcriber
        self.options = options or StreamingOptions()
        self._agreement = LocalAgreement()
        self._buffer = np.zeros(0, dtype=np.float32)
        self._offset = 0.0  # stream time of the buffer's first sample
        self._received = 0  # samples received in total
        self._decoded = 0  # samples received at the last decode
        self._in_buffer: list[Word] = []  # committed words inside the buffer (cut points)
        self._prompt: list[str] = []  # committed words that left the buffer, newest last
        self._finished = False

    @property
    def stream_seconds(self) -> float:
        return self._received / SAMPLE_RATE

    @property
    def buffer_seconds(self) -> float:
        return len(self._buffer) / SAMPLE_RATE

    def insert_audio(self, samples: np.ndarray) -> None:
        """Append 16 kHz mono float32 samples (resample before; ``encoders.audio.resample``)."""
        if self._finished:
            raise InputError("audio inserted after finish()")
        samples = np.asarray(samples)
        if samples.ndim != 1 or not np.issubdtype(samples.dtype, np.floating):
            raise InputError(f"streaming audio must be 1-D float samples at 16 kHz, got {samples.dtype} {samples.shape}")
        self._buffer = np.concatenate([self._buffer, samples.astype(np.float32, copy=False)])
        self._received += len(samples)

    def process(self) -> StreamUpdate:
        """Decode the buffer if ``min_chunk_seconds`` of new audio arrived; else return at once."""
        if (self._received - self._decoded) / SAMPLE_RATE < self.options.min_chunk_seconds:
            return StreamUpdate([], self._agreement.tentative, self.stream_seconds)
        committed = self._agreement.insert(self._decode())
        self._in_buffer += committed
        committed += self._trim()
        return StreamUpdate(committed, self._agreement.tentative, self.stream_seconds)

    def finish(self) -> StreamUpdate:
        """End of stream: decode what was not decoded yet, then commit every remaining word."""
        committed: list[Word] = []
        if self._received > self._decoded and len(self._buffer):
            committed = self._agreement.insert(self._decode())
        committed += self._agreement.flush()
        self._finished = True
        self._buffer = np.zeros(0, dtype=np.float32)
        return StreamUpdate(committed, [], self.stream_seconds)

    def _decode(self) -> list[Word]:
        self._decoded = self._received
        if len(self._buffer) < SAMPLE_RATE // 10:  # faster-whisper needs some audio to work on
            return []
        prompt = " ".join(self._prompt)[-self.options.prompt_chars :].lstrip()
        options = self.options.transcribe_options(prompt)
        floor = self.options.min_segment_probability
        return [
            Word(w.text, w.start + self._offset, w.end + self._offset, w.probability)
            for segment in self.transcriber.transcribe(self._buffer, options)
            if any(w.probability >= floor for w in segment.words)
            for w in segment.words
        ]

    def _trim(self) -> list[Word]:
        """Cut the buffer so decodes stay short; returns words a hard-cap cut had to force-commit."""
        end = self._offset + self.buffer_seconds
        committed_end = self._agreement.committed_end
        forced: list[Word] = []
        if self.buffer_seconds > self.options.buffer_trim_seconds:
            sentence_ends = [w.end for w in self._in_buffer if ends_sentence(w.text)]
            if sentence_ends:
                self._cut(sentence_ends[-1])
        if self.buffer_seconds > self.options.max_buffer_seconds:
            if committed_end > self._offset:
                self._cut(committed_end)
            if self.buffer_seconds > self.options.max_buffer_seconds:
                # Nothing agreed for a whole buffer (noise, or a word the decoder keeps changing):
                # keep the first half of it as decoded last time, and go on.
                cut = end - self.options.max_buffer_seconds / 2
                forced = self._agreement.flush(until=cut)
                self._cut(max(cut, self._agreement.committed_end))
        return forced

    def _cut(self, t: float) -> None:
        """Drop buffer audio before stream time ``t``; committed words before it become prompt."""
        n = int(round((t - self._offset) * SAMPLE_RATE))
        if n <= 0:
            return
        self._buffer = self._buffer[n:].copy()
        self._offset += n / SAMPLE_RATE
        leaving = [w for w in self._in_buffer if w.end <= self._offset + 1e-6]
        self._prompt = (self._prompt + [w.text for w in leaving])[-100:]
        self._in_buffer = [w for w in self._in_buffer if w.end > self._offset + 1e-6]


# --------------------------------------------------------------------------------------------
# Replay a recording as if live, with the latency each word would have had


class WordLabeller(Protocol):
    """What ``simulate`` needs from an online diarizer (encoders.online_diarize.OnlineDiarizer)."""

    def insert_audio(self, samples: np.ndarray) -> None: ...

    def label_words(self, words: Sequence[Word]) -> list[str]: ...


@dataclass(frozen=True)
class CommittedWord:
    word: Word
    committed_at: float  # stream-time clock when it was committed
    speaker: str | None = None

    @property
    def latency(self) -> float:
        """Seconds from the end of the spoken word to its commit."""
        return self.committed_at - self.word.end


@dataclass
class SimulationResult:
    words: list[CommittedWord]
    audio_seconds: float
    compute_seconds: float  # time spent in decode (+ diarization) steps
    decodes: int
    relabels: dict[int, str] = field(default_factory=dict)  # word index -> final speaker, if changed later

    @property
    def rtf(self) -> float:
        return self.compute_seconds / max(self.audio_seconds, 1e-9)

    def latency_percentile(self, q: float) -> float:
        lat = [w.latency for w in self.words]
        return float(np.percentile(lat, q)) if lat else float("nan")


def simulate(
    streamer: StreamingTranscriber,
    audio: np.ndarray,
    chunk_seconds: float = 0.5,
    realtime: bool = False,
    diarizer: WordLabeller | None = None,
    on_update: Callable[[StreamUpdate], None] | None = None,
    step_seconds: float | None = None,
) -> SimulationResult:
    """Replay 16 kHz ``audio`` through ``streamer`` as a live stream arriving in ``chunk_seconds`` pieces.

    The clock is stream time. With ``realtime`` the replay really waits for each chunk (wall clock);
    without it the clock jumps to the next chunk's arrival whenever the worker is idle and advances
    by the measured compute time of every step, i.e. the latencies are those of a real-time replay
    on this machine, obtained without the idle waiting. Each step feeds every chunk that has
    "arrived" by the clock, then runs ``process`` (and the diarizer on what it committed).
    With ``step_seconds`` every step costs that much stream time instead of its measured time, so
    the decode windows, and therefore the words, do not depend on how fast or busy the machine is.
    """
    if chunk_seconds <= 0:
        raise InputError(f"chunk_seconds must be positive, got {chunk_seconds}")
    if step_seconds is not None and (realtime or step_seconds < 0):
        raise InputError("step_seconds must be >= 0 and cannot be combined with realtime")
    chunk = max(1, int(round(chunk_seconds * SAMPLE_RATE)))
    total = len(audio)
    fed = 0
    clock = 0.0
    start_wall = time.perf_counter()
    compute = 0.0
    decodes = 0
    records: list[CommittedWord] = []

    def step(update_fn: Callable[[], StreamUpdate]) -> None:
        nonlocal clock, compute, decodes
        t0 = time.perf_counter()
        decoded_before = streamer._decoded
        update = update_fn()
        speakers = diarizer.label_words(update.committed) if diarizer and update.committed else [None] * len(update.committed)
        spent = time.perf_counter() - t0
        if streamer._decoded != decoded_before or update.committed:
            decodes += 1
        compute += spent
        if realtime:
            clock = time.perf_counter() - start_wall
        else:
            clock += spent if step_seconds is None else step_seconds
        records.extend(CommittedWord(w, clock, s) for w, s in zip(update.committed, speakers))
        if on_update:
            on_update(update)

    while fed < total:
        now = int(clock * SAMPLE_RATE)
        arrived = total if now >= total else now // chunk * chunk  # a chunk arrives when its last sample has
        if arrived <= fed:  # idle: wait for the next chunk
            next_arrival = min(total, (fed // chunk + 1) * chunk) / SAMPLE_RATE
            if realtime:
                time.sleep(max(0.0, next_arrival - (time.perf_counter() - start_wall)))
                clock = time.perf_counter() - start_wall
            else:
                clock = next_arrival
            continue
        new = audio[fed:arrived]
        streamer.insert_audio(new)
        if diarizer:
            diarizer.insert_audio(new)
        fed = arrived
        step(streamer.process)
    clock = max(clock, total / SAMPLE_RATE)
    step(streamer.finish)
    return SimulationResult(records, total / SAMPLE_RATE, compute, decodes)
