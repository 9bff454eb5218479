"""Voice activity detection with silero-vad's packaged model (no download).

Diarization and ASR only look inside speech; everything else is silence, music or noise.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from encoders.audio import check_audio, resample
from encoders.errors import InputError

VAD_RATE = 16000


@dataclass(frozen=True)
class SpeechRegion:
    """A stretch of speech, in seconds from the start of the recording."""

    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


_model = None
_load_lock = threading.Lock()
# The silero model is stateful (a recurrent state reset per call), so one shared instance must
# not run two recordings at once.
_run_lock = threading.Lock()


def _vad_model():
    """Load the packaged silero model once per process."""
    global _model
    if _model is None:
        with _load_lock:
            if _model is None:
                # Importing silero_vad calls torch.set_num_threads(1) process-wide, which would
                # slow every other torch model in the process; put the setting back.
                import torch

                threads = torch.get_num_threads()
                import silero_vad

                torch.set_num_threads(threads)
                # The ONNX build runs single-threaded in onnxruntime: as fast as the TorchScript
                # one at 1 torch thread (~0.004 RTF) and, unlike it, not 50x slower when torch
                # uses several threads for the other models.
                _model = silero_vad.load_silero_vad(onnx=True)
    return _model


def detect_speech(
    audio: np.ndarray,
    sample_rate: int = 16000,
    threshold: float = 0.5,
    min_silence_s: float = 0.1,
    min_speech_s: float = 0.25,
    pad_s: float = 0.03,
) -> list[SpeechRegion]:
    """Speech regions of ``audio``, sorted and non-overlapping.

    ``min_silence_s`` is the pause that ends a region; ``min_speech_s`` drops blips shorter than it.
    """
    audio = check_audio(audio, sample_rate)
    if not 0.0 < threshold < 1.0:
        raise InputError(f"VAD threshold must be in (0, 1), got {threshold}")
    audio = resample(audio, sample_rate, VAD_RATE)
    model = _vad_model()
    from silero_vad import get_speech_timestamps

    with _run_lock:
        stamps = get_speech_timestamps(
            np.ascontiguousarray(audio),
            model,
            threshold=threshold,
            sampling_rate=VAD_RATE,
            min_speech_duration_ms=int(min_speech_s * 1000),
            min_silence_duration_ms=int(min_silence_s * 1000),
            speech_pad_ms=int(pad_s * 1000),
        )
    return [SpeechRegion(s["start"] / VAD_RATE, s["end"] / VAD_RATE) for s in stamps]
