"""The batch path: recording -> speaker-attributed transcript (ASR words + diarization per word)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from app.platform.config import Settings
from app.platform.models import EMBEDDED_ASR, resolve_model
from app.text.speakers import name_speakers
from app.text.transcript import (
    Transcript,
    TranscriptWord,
    load_transcript,
    realign_to_sentences,
    turns_from_words,
)
from encoders.asr import RECOGNISER_REVISION, Transcriber, TranscribeOptions
from encoders.audio import SAMPLE_RATE, cut_off, load_audio
from encoders.diarize import assign_speakers, make_diarizer
from encoders.errors import InputError
from encoders.vad import detect_speech

MEDIA_SUFFIXES = {".wav", ".mp3", ".m4a", ".mp4", ".webm", ".ogg", ".opus", ".flac", ".mkv", ".mov", ".aac"}


@dataclass(frozen=True)
class MeetingInput:
    """What the user pointed at: a recording, a transcript, or a folder holding one of them."""

    recording: Path | None
    transcript: Path | None


def resolve_input(path: str | Path) -> MeetingInput:
    path = Path(path)
    if not path.exists():
        raise InputError(f"not found: {path}")
    if path.is_dir():
        media = sorted(p for p in path.iterdir() if p.suffix.lower() in MEDIA_SUFFIXES)
        if len(media) == 1:
            return MeetingInput(media[0], None)
        if len(media) > 1:
            raise InputError(f"{path} holds several recordings ({', '.join(p.name for p in media)}); name one")
        texts = sorted(p for p in path.iterdir() if p.suffix.lower() in {".json", ".txt"} and p.stem == "transcript")
        if texts:
            return MeetingInput(None, texts[0])
        raise InputError(f"{path} holds no recording ({', '.join(sorted(MEDIA_SUFFIXES))}) and no transcript.json")
    if path.suffix.lower() in MEDIA_SUFFIXES:
        return MeetingInput(path, None)
    if path.suffix.lower() in {".json", ".txt", ".md"}:
        return MeetingInput(None, path)
    raise InputError(f"unsupported file type '{path.suffix}': give a recording ({', '.join(sorted(MEDIA_SUFFIXES))}) or a transcript (.json, .txt)")


def transcribe_recording(path: Path, settings: Settings, console: Console | None = None) -> Transcript:
    """Words, speakers and the speakers' names from a recording."""
    return Recogniser(settings, console).transcribe(path)


def recognise_recording(path: Path, settings: Settings, console: Console | None = None) -> Transcript:
    """Words and anonymous speaker labels (SPEAKER_k) from a recording, before any naming."""
    return Recogniser(settings, console).recognise(path)


class Recogniser:
    """The recogniser and diarizer of one settings, loaded at first use and kept: `minutia batch`'s workers
    transcribe many recordings with one."""

    def __init__(self, settings: Settings, console: Console | None = None):
        self.settings = settings
        self.console = console or Console(stderr=True)
        self._transcriber: Transcriber | None = None
        self.loads = 0  # how many times the speech recogniser was loaded (once, unless it failed)

    @property
    def transcriber(self) -> Transcriber:
        if self._transcriber is None:
            asr = self.settings.asr
            folder = resolve_model(asr.model, self.settings.home, "ASR", EMBEDDED_ASR, "model.bin")
            with self.console.status("loading the speech recogniser"):
                self._transcriber = Transcriber(folder, asr.device, asr.compute_type, asr.cpu_threads)
            self.loads += 1
        return self._transcriber

    def transcribe(self, path: Path) -> Transcript:
        """Words, speakers and the speakers' names from a recording."""
        return name_speakers(self.recognise(path), self.settings.asr.hotwords)

    def recognise(self, path: Path) -> Transcript:
        """Words and anonymous speaker labels (SPEAKER_k) from a recording, before any naming."""
        settings, console = self.settings, self.console
        if path.stat().st_size == 0:
            raise InputError(f"{path} is empty")
        audio = load_audio(path, SAMPLE_RATE)
        duration = len(audio) / SAMPLE_RATE
        if (why := cut_off(path, duration)) is not None:  # decoders stop quietly where a cut-off file ends
            console.print(f"[yellow]warning:[/] {escape(why)}; transcribing the {duration:.0f} s there are",
                          soft_wrap=True)
        regions = detect_speech(audio, SAMPLE_RATE)
        if not regions:
            raise InputError(f"no speech found in {path} ({duration:.1f} s of audio)")

        transcriber = self.transcriber
        options = TranscribeOptions(
            language=settings.asr.language, beam_size=settings.asr.beam_size, vad_filter=settings.asr.vad_filter,
            hotwords=tuple(settings.asr.hotwords),
        )
        words = []
        with Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
            TimeElapsedColumn(), console=console, transient=True,
        ) as progress:
            task = progress.add_task("transcribing", total=duration)
            for segment in transcriber.transcribe(audio, options):
                words.extend(segment.words)
                progress.update(task, completed=min(segment.end, duration))
            progress.update(task, completed=duration)
        if not words:
            raise InputError(f"no words recognised in {path}")

        diarization = settings.diarization
        diarizer = make_diarizer(diarization.backend, diarization.model, diarization.embedding)
        with console.status("finding who spoke when"):
            turns = diarizer.diarize(
                audio, SAMPLE_RATE, num_speakers=diarization.num_speakers,
                min_speakers=diarization.min_speakers, max_speakers=diarization.max_speakers,
            )
        speakers = assign_speakers(words, turns) if turns else ["SPEAKER_00"] * len(words)
        attributed = [
            TranscriptWord(w.text, round(w.start, 3), round(w.end, 3), speaker, round(w.probability, 4))
            for w, speaker in zip(words, speakers)
        ]
        return Transcript(
            turns=turns_from_words(realign_to_sentences(attributed)), source=path.name, duration=round(duration, 3)
        )


def _cache_key(path: Path, settings: Settings) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    digest.update(f"recogniser {RECOGNISER_REVISION}".encode())
    digest.update(settings.asr.model_dump_json().encode())
    digest.update(settings.diarization.model_dump_json().encode())
    return digest.hexdigest()[:24]


def load_meeting(path: str | Path, settings: Settings, console: Console | None = None,
                 recogniser: Recogniser | None = None) -> Transcript:
    """A transcript for any input; recordings are transcribed once and cached under MINUTIA_HOME
    (``recogniser``: one already loaded, else one is made for this call)."""
    meeting = resolve_input(path)
    if meeting.transcript is not None:
        return load_transcript(meeting.transcript)
    assert meeting.recording is not None
    from app.text.transcript_cache import transcript_cache

    cache, name = transcript_cache(settings, create_key=False), _cache_key(meeting.recording, settings)
    cached = cache.get(name) if cache is not None else None
    if cached is not None:
        return cached
    transcript = (recogniser or Recogniser(settings, console)).transcribe(meeting.recording)
    cache = cache or transcript_cache(settings)  # a key is made only for a transcript worth keeping
    if cache is not None:
        cache.put(name, transcript)
    return transcript
