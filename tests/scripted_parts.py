"""Stand-ins for a session's models (issue 17), for tests/conftest.py's fixtures and tests that script a meeting.

As diart's tests do with dummy segmentation and embedding models: the session runs for real around them.
A script of (speaker, sentence) turns becomes audio in which every word is a tone (its number in the
vocabulary picks the pitch) over a low hum (the speaker's voice). Tones survive what a WebRTC room does to
audio (Opus, resampling, mixing), so the same meeting can be said into a session or through the bot.
The stand-in recogniser reads the words back from the tones, the stand-in diarizer the speakers from the hums.
A meeting's slides are flat grey pictures (the slide's number picks the grey): the real keyframe detector and
de-duplication run on them, the stand-in OCR reads the slide's text back from the grey, the stand-in CLIP
gives each slide its own direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from encoders.vision import BaseImageEmbedder, BaseSlideReader, SlideText, VisionPipeline

SCRIPT_RATE = 16000
SCRIPT_FRAME = 320  # 20 ms: words are read a frame at a time
WORD_HZ, WORD_STEP_HZ, WORD_AMPLITUDE = 1000.0, 50.0, 0.3  # word number n: WORD_HZ + n * WORD_STEP_HZ
VOICE_HZ, VOICE_STEP_HZ, VOICE_AMPLITUDE = 150.0, 100.0, 0.15  # speaker number k: VOICE_HZ + k * VOICE_STEP_HZ
_VOICE_BAND, _WORD_BAND = (100.0, WORD_HZ - 2 * WORD_STEP_HZ), (WORD_HZ - WORD_STEP_HZ, 7000.0)
_HEARD = 0.03  # a tone quieter than this (amplitude) is silence (codec noise, a frame's ragged edge)
SLIDE_GREY, SLIDE_GREY_STEP = 30, 45  # slide number i: every pixel at grey SLIDE_GREY + i * SLIDE_GREY_STEP


@dataclass(frozen=True)
class ScriptedMeeting:
    audio: np.ndarray  # 16 kHz mono float32
    vocabulary: list[str]  # word number -> text
    turns: list[tuple[float, float, str]]  # (start, end, speaker) in stream seconds
    speakers: list[str]  # voice number -> speaker label
    slides: tuple[str, ...] = ()  # slide number -> its text

    def slide_frame(self, number: int, size: tuple[int, int] = (360, 640)) -> np.ndarray:
        """Slide ``number`` as a video frame (HxWx3 uint8 RGB)."""
        return np.full((*size, 3), SLIDE_GREY + number * SLIDE_GREY_STEP, np.uint8)

    def vision(self) -> VisionPipeline:
        """A vision pipeline for one stream of this meeting's slides (a Runtime's ``vision`` factory)."""
        return VisionPipeline(reader=ScriptedSlideReader(self.slides), embedder=ScriptedEmbedder(self.slides))

    def write_wav(self, path: Path) -> Path:
        """The meeting as a 16-bit WAV file (what a test peer plays into a room)."""
        import wave

        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(SCRIPT_RATE)
            out.writeframes((np.clip(self.audio, -1, 1) * 32767).astype("<i2").tobytes())
        return path


def scripted_meeting(script: Sequence[tuple[str, str]], word_s: float = 0.3, gap_s: float = 0.1,
                     pause_s: float = 0.5, slides: Sequence[str] = ()) -> ScriptedMeeting:
    """Audio for ``script``'s turns, each word ``word_s`` long, ``gap_s`` apart, turns ``pause_s`` apart; ``slides``:
    the texts of the slides shown (their frames are ``slide_frame(number)``)."""
    pieces: list[np.ndarray] = []
    vocabulary: list[str] = []
    speakers: list[str] = []
    turns: list[tuple[float, float, str]] = []
    clock = 0.0
    t = np.arange(int(word_s * SCRIPT_RATE)) / SCRIPT_RATE
    for speaker, sentence in script:
        if speaker not in speakers:
            speakers.append(speaker)
        voice = VOICE_AMPLITUDE * np.sin(2 * np.pi * (VOICE_HZ + speakers.index(speaker) * VOICE_STEP_HZ) * t)
        start = clock
        for word in sentence.split():
            if word not in vocabulary:
                vocabulary.append(word)
            pitch = WORD_HZ + vocabulary.index(word) * WORD_STEP_HZ
            pieces += [(voice + WORD_AMPLITUDE * np.sin(2 * np.pi * pitch * t)).astype(np.float32),
                       np.zeros(int(gap_s * SCRIPT_RATE), np.float32)]
            clock += word_s + gap_s
        turns.append((start, clock, speaker))
        pieces.append(np.zeros(int(pause_s * SCRIPT_RATE), np.float32))
        clock += pause_s
    top_word, top_voice = WORD_HZ + len(vocabulary) * WORD_STEP_HZ, VOICE_HZ + len(speakers) * VOICE_STEP_HZ
    if top_word > _WORD_BAND[1] or top_voice > _VOICE_BAND[1]:
        raise ValueError(f"{len(vocabulary)} words and {len(speakers)} speakers do not fit the tones")
    if SLIDE_GREY + (len(slides) - 1) * SLIDE_GREY_STEP > 255:
        raise ValueError(f"{len(slides)} slides do not fit the greys")
    return ScriptedMeeting(np.concatenate(pieces), vocabulary, turns, speakers, tuple(slides))


def _tones(audio: np.ndarray, band: tuple[float, float], base: float, step: float) -> np.ndarray:
    """The loudest tone in ``band`` of each 20 ms frame as a number ((hz - base) / step, rounded); -1: silence."""
    frames = len(audio) // SCRIPT_FRAME
    if not frames:
        return np.zeros(0, np.int64)
    blocks = np.asarray(audio[:frames * SCRIPT_FRAME], np.float32).reshape(frames, SCRIPT_FRAME)
    window = np.hanning(SCRIPT_FRAME)
    size = 4096  # zero-padded: a lone tone's peak is placed to ~4 Hz
    spectrum = np.abs(np.fft.rfft(blocks * window, size))
    hz = np.fft.rfftfreq(size, 1 / SCRIPT_RATE)
    inside = (hz >= band[0]) & (hz <= band[1])
    peak = spectrum[:, inside].argmax(axis=1)
    amplitude = spectrum[:, inside].max(axis=1) * 2 / window.sum()
    numbers = np.rint((hz[inside][peak] - base) / step).astype(np.int64)
    return np.where(amplitude >= _HEARD, numbers, -1)


class ScriptedTranscriber:
    """Reads a scripted meeting's words back from their tones (encoders.asr.Transcriber's ``transcribe``)."""

    def __init__(self, vocabulary: Sequence[str]) -> None:
        self.vocabulary = list(vocabulary)

    def transcribe(self, audio: np.ndarray, options=None) -> Iterator:
        from encoders.asr import Segment, Word

        codes = _tones(audio, _WORD_BAND, WORD_HZ, WORD_STEP_HZ)
        edges = np.flatnonzero(np.diff(codes)) + 1
        seconds = SCRIPT_FRAME / SCRIPT_RATE
        words = [Word(self.vocabulary[codes[start]], start * seconds, end * seconds, 0.9)
                 for start, end in zip(np.r_[0, edges], np.r_[edges, len(codes)])
                 if 0 <= codes[start] < len(self.vocabulary)]
        if words:
            yield Segment(words[0].start, words[-1].end, " ".join(w.text for w in words), tuple(words))


class VoiceDiarizer:
    """Labels a word with the speaker whose hum sounds under it (encoders.online_diarize's calls): it keeps
    the audio it is given, and words' times count from its first sample, as the session's recogniser's do."""

    def __init__(self, speakers: Sequence[str]) -> None:
        self.speakers = list(speakers)
        self._audio: list[np.ndarray] = []
        self.samples = 0

    def insert_audio(self, samples: np.ndarray) -> None:
        self._audio.append(np.asarray(samples, np.float32))
        self.samples += len(samples)

    def label_words(self, words) -> list[str]:
        audio = np.concatenate(self._audio) if self._audio else np.zeros(0, np.float32)
        self._audio = [audio]
        return [self._speaker(audio[int(w.start * SCRIPT_RATE):int(w.end * SCRIPT_RATE)]) for w in words]

    def take_changes(self) -> list:
        return []

    def _speaker(self, audio: np.ndarray) -> str:
        voices = _tones(audio, _VOICE_BAND, VOICE_HZ, VOICE_STEP_HZ)
        voices = voices[(voices >= 0) & (voices < len(self.speakers))]
        return self.speakers[np.bincount(voices).argmax()] if len(voices) else self.speakers[0]


def _slide_number(frame: np.ndarray, slides: Sequence[str]) -> int | None:
    """The slide a frame shows (by its grey), None for a picture that is no slide (or after the last)."""
    number = int(np.rint((float(np.mean(frame)) - SLIDE_GREY) / SLIDE_GREY_STEP))
    return number if 0 <= number < len(slides) else None


class ScriptedSlideReader(BaseSlideReader):
    """Reads a scripted slide's text back from its grey (encoders.vision.SlideReader's ``read``)."""

    def __init__(self, slides: Sequence[str]) -> None:
        self.slides = list(slides)

    def read(self, frame: np.ndarray) -> SlideText:
        number = _slide_number(frame, self.slides)
        return SlideText(self.slides[number], 90.0) if number is not None else SlideText("", 0.0)


class ScriptedEmbedder(BaseImageEmbedder):
    """Slide number i -> unit vector i, and a text -> the vector of the slide that says it
    (encoders.vision.ClipEmbedder's calls); anything else -> the mean direction."""

    def __init__(self, slides: Sequence[str]) -> None:
        self.slides = list(slides)
        self.dim = max(1, len(self.slides))

    def _vector(self, number: int | None) -> np.ndarray:
        vector = np.zeros(self.dim, np.float32)
        if number is None:
            vector[:] = 1.0
        else:
            vector[number] = 1.0
        return vector / np.linalg.norm(vector)

    def embed_images(self, frames: Sequence[np.ndarray]) -> np.ndarray:
        return np.stack([self._vector(_slide_number(f, self.slides)) for f in frames])

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vector(self.slides.index(t) if t in self.slides else None) for t in texts])
