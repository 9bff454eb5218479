"""Speech to words with times, behind one class (faster-whisper / CTranslate2).

``Transcriber.transcribe`` yields segments as they are decoded (a generator, like faster-whisper's),
so callers can show progress or stream; every word carries its start/end and probability.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    text: str
    words: tuple[Word, ...]
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0


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


class Transcriber:
    """A faster-whisper model loaded from a local folder (model.bin + config + tokenizer)."""

    def __init__(self, folder: str | Path, device: str = "cpu", compute_type: str = "int8", cpu_threads: int = 0):
        folder = Path(folder)
        if not (folder / "model.bin").is_file():
            raise InputError(f"{folder} is not a faster-whisper model folder (no model.bin)")
        from faster_whisper import WhisperModel

        self.folder = folder
        self._model = WhisperModel(str(folder), device=device, compute_type=compute_type, cpu_threads=cpu_threads)
        self._lock = FairLock()  # one decode at a time, callers served in turn; CTranslate2 uses all threads anyway

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions | None = None) -> Iterator[Segment]:
        """Yield segments with word timestamps for 16 kHz mono float32 ``audio``."""
        options = options or TranscribeOptions()
        audio = check_audio(audio, SAMPLE_RATE)
        with self._lock:
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
                words = tuple(
                    Word(w.word.strip(), float(w.start), float(w.end), float(w.probability))
                    for w in (seg.words or [])
                    if w.word.strip()
                )
                if not words:
                    continue
                yield Segment(
                    start=float(seg.start),
                    end=float(seg.end),
                    text=seg.text.strip(),
                    words=words,
                    avg_logprob=float(seg.avg_logprob),
                    no_speech_prob=float(seg.no_speech_prob),
                )
