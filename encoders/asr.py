"""Speech to words with times, behind one class (faster-whisper / CTranslate2).

``Transcriber.transcribe`` yields segments as they are decoded (a generator, like faster-whisper's),
so callers can show progress or stream; every word carries its start/end and probability.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

import numpy as np

from encoders.audio import SAMPLE_RATE, check_audio
from encoders.errors import InputError
from encoders.fair_lock import FairLock


@dataclass(frozen=True)
class Word:
    text: str
    start: float
    end: float
    probability: float = 1.0


SENTENCE_END = (".", "?", "!", "…")  # what a recognised word ends with when it ends a sentence


def ends_sentence(word: str) -> bool:
    """Whether a recognised word closes a sentence: where the buffer is cut, a live line closes and a turn's
    dangling start moves on (one rule for all three)."""
    return word.rstrip().endswith(SENTENCE_END)


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    text: str
    words: tuple[Word, ...]
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0
    compression_ratio: float = 0.0  # of the text under gzip: above ~2.4 it repeats itself


@dataclass(frozen=True)
class TranscribeOptions:
    """Decoding options; the defaults are the usual guards against hallucinating on silence."""

    language: str | None = "en"
    beam_size: int = 5
    vad_filter: bool = True
    condition_on_previous_text: bool = False
    no_speech_threshold: float = 0.6
    log_prob_threshold: float = -1.0
    compression_ratio_threshold: float = 2.4
    hallucination_silence_threshold: float | None = 2.0
    temperature: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    initial_prompt: str | None = None
    hotwords: tuple[str, ...] = ()  # names and terms to prime the decoder with (faster-whisper's ``hotwords``)
    vad_parameters: dict = field(default_factory=lambda: {"min_silence_duration_ms": 500})
    # None: Whisper's encoder sees its usual 30 s window, the audio padded out. A number: only the audio plus this
    # many seconds of padding (a live buffer of 3-18 s then costs a fraction of a window; see fit_window).
    window_margin_seconds: float | None = None

    def __post_init__(self):
        if self.window_margin_seconds is not None and self.window_margin_seconds < 0:
            raise InputError(f"window_margin_seconds must be >= 0, got {self.window_margin_seconds}")


FRAMES_PER_SECOND = 100  # Whisper's log-mel frames (10 ms hop)
_MIN_WINDOW_FRAMES = 100


def fit_window(features: np.ndarray, margin_frames: int) -> np.ndarray:
    """Cut the padding faster-whisper adds to a 30 s window (all-zero frames at the end) down to ``margin_frames``.

    The encoder's cost grows with its input length, and its attention with the square of it, while a live
    buffer holds a few seconds: a 10 s buffer is encoded about 3x faster this way. Some padding is kept because
    Whisper was trained on padded windows and, cut at the last word, ends its text early or repeats it
    (docs/benchmarks.md, "Live rooms per process"). The length is kept even (the encoder's stride is 2)."""
    heard = np.flatnonzero(np.any(features != 0, axis=tuple(range(features.ndim - 1))))
    keep = (int(heard[-1]) + 1 if len(heard) else 0) + margin_frames
    keep = min(features.shape[-1], max(_MIN_WINDOW_FRAMES, keep + keep % 2))
    return features[..., :keep]


def _window_fitting_model(folder: Path, device: str, compute_type: str, cpu_threads: int):
    from faster_whisper import WhisperModel

    class WindowFittingWhisper(WhisperModel):
        """faster-whisper's model whose encoder may be given only the frames that hold audio (see fit_window);
        ``margin_frames`` is set per call, under the Transcriber's lock."""

        margin_frames: int | None = None

        def encode(self, features: np.ndarray):
            if self.margin_frames is not None:
                features = fit_window(features, self.margin_frames)
            return super().encode(features)

    return WindowFittingWhisper(str(folder), device=device, compute_type=compute_type, cpu_threads=cpu_threads)


class Transcriber:
    """A faster-whisper model loaded from a local folder (model.bin + config + tokenizer)."""

    def __init__(self, folder: str | Path, device: str = "cpu", compute_type: str = "int8", cpu_threads: int = 0):
        folder = Path(folder)
        if not (folder / "model.bin").is_file():
            raise InputError(f"{folder} is not a faster-whisper model folder (no model.bin)")
        self.folder = folder
        self._model = _window_fitting_model(folder, device, compute_type, cpu_threads)
        self._lock = FairLock()  # one decode at a time, callers served in turn; CTranslate2 uses all threads anyway
        self.full_window_retries = 0  # fitted-window decodes done again on the whole window (see transcribe)

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions | None = None) -> Iterator[Segment]:
        """Yield segments with word timestamps for 16 kHz mono float32 ``audio``.

        With ``window_margin_seconds`` the audio is decoded on a fitted window, and again on the whole window
        without the prompt when that output looks like a decoding loop (:func:`looks_looped`), which a short
        window sometimes starts ("ok ok ok ...", a sentence said five times over); segments that still loop are
        dropped; ``full_window_retries`` counts the retries."""
        options = options or TranscribeOptions()
        audio = check_audio(audio, SAMPLE_RATE)
        margin = options.window_margin_seconds
        with self._lock:
            if margin is None:
                yield from self._segments(audio, options, None)
                return
            segments = list(self._segments(audio, options, int(round(margin * FRAMES_PER_SECOND))))
            if any(looks_looped(seg, options.compression_ratio_threshold) for seg in segments):
                # Again on the whole window and without the prompt: a loop once committed is in the prompt of every
                # later decode, and primes the same loop on any window. What still loops is not given out.
                self.full_window_retries += 1
                unprompted = replace(options, initial_prompt=None)
                segments = [seg for seg in self._segments(audio, unprompted, None)
                            if not looks_looped(seg, options.compression_ratio_threshold)]
        yield from segments

    def _segments(self, audio: np.ndarray, options: TranscribeOptions, margin_frames: int | None) -> Iterator[Segment]:
        self._model.margin_frames = margin_frames
        segments, _info = self._model.transcribe(
            audio,
            language=options.language,
            beam_size=options.beam_size,
            word_timestamps=True,
            vad_filter=options.vad_filter,
            vad_parameters=options.vad_parameters if options.vad_filter else None,
            condition_on_previous_text=options.condition_on_previous_text,
            no_speech_threshold=options.no_speech_threshold,
            log_prob_threshold=options.log_prob_threshold,
            compression_ratio_threshold=options.compression_ratio_threshold,
            hallucination_silence_threshold=options.hallucination_silence_threshold,
            temperature=list(options.temperature),
            initial_prompt=options.initial_prompt,
            hotwords=", ".join(options.hotwords) or None,
        )
        for seg in segments:
            heard = tuple(
                Word(w.word.strip(), float(w.start), float(w.end), float(w.probability))
                for w in (seg.words or [])
                if w.word.strip()
            )
            words = without_prompt_echo(heard, options.hotwords)
            if not words:
                continue
            yield Segment(
                start=float(seg.start),
                end=float(seg.end),
                text=seg.text.strip() if words == heard else " ".join(w.text for w in words),
                words=words,
                avg_logprob=float(seg.avg_logprob),
                no_speech_prob=float(seg.no_speech_prob),
                compression_ratio=float(seg.compression_ratio),
            )


# Raised whenever a change here changes the words a recording gives: transcripts cached under an older one are
# transcribed again (app/batch/pipeline.py's cache key), not served stale. 2: hotwords echoed from the prompt dropped.
RECOGNISER_REVISION = 2
ECHO_PROBABILITY = 0.05  # a hotword heard in speech, primed by the prompt, comes far above this


def without_prompt_echo(words: tuple[Word, ...], hotwords: tuple[str, ...]) -> tuple[Word, ...]:
    """``words`` less the hotwords Whisper wrote back from its prompt: over noise or silence it sometimes writes the
    hotwords themselves ("Thanks everyone. Zorblax, Quintaro, Vemmeline"), each at a probability near zero. A word
    goes when it is one of the hotwords' words and its probability is under ECHO_PROBABILITY."""
    if not hotwords:
        return words
    primed = {_bare(part) for term in hotwords for part in term.split()}
    primed.discard("")
    return tuple(w for w in words if not (w.probability < ECHO_PROBABILITY and _bare(w.text) in primed))


def _bare(text: str) -> str:
    return text.strip(" ,.;:!?\"'()[]").casefold()


MAX_WORDS_PER_SECOND = 8.0  # fast speech is 4-6; a loop packs dozens of words into a fraction of a second


def looks_looped(segment: Segment,
                 compression_ratio_threshold: float = TranscribeOptions.compression_ratio_threshold) -> bool:
    """Text that repeats itself (gzip compresses it well, Whisper's own test for a failed decode) or more words
    than anyone says in the time they are given (4 words of slack for a segment cut at the window's end)."""
    seconds = max(0.0, segment.end - segment.start)
    return (segment.compression_ratio > compression_ratio_threshold
            or len(segment.words) > 4 + MAX_WORDS_PER_SECOND * seconds)
