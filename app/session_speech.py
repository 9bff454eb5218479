"""The speech side of a meeting session: the parts it is made of, and what the session needs from each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Protocol, Sequence

if TYPE_CHECKING:
    import numpy as np

    from encoders.asr import Segment, TranscribeOptions, Word
    from encoders.online_diarize import LabelChange


class SpeechRecogniser(Protocol):
    """What the streaming recogniser calls on its model (encoders.asr.Transcriber; a stand-in in tests)."""

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions | None = None) -> Iterator[Segment]: ...


class Diarizer(Protocol):
    """What a session calls on its online diarizer (encoders.online_diarize.OnlineDiarizer; a stand-in in tests)."""

    def insert_audio(self, samples: np.ndarray) -> None: ...

    def label_words(self, words: Sequence[Word]) -> list[str]: ...

    def take_changes(self) -> list[LabelChange]: ...
