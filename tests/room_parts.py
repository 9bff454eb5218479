"""What the room-fleet tests send to Ray actors: a Runtime factory over a scripted meeting's stand-ins and the tiny
Gemma 3 (pickled by value, so the actors need no tests/ folder on their path)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from scripted_parts import ScriptedTranscriber, VoiceDiarizer


class ScriptedRoomRuntime:
    """``make_runtime`` for a RoomHost: a Runtime over the stand-ins for one scripted meeting."""

    def __init__(self, vocabulary: Sequence[str], speakers: Sequence[str], llm_dir: Path) -> None:
        self.vocabulary, self.speakers, self.llm_dir = list(vocabulary), list(speakers), str(llm_dir)

    def __call__(self, settings):
        from app.llm.engine import LLMEngine
        from app.live.runtime import Runtime

        speakers = self.speakers
        return Runtime(settings, transcriber=ScriptedTranscriber(self.vocabulary),
                       engine=LLMEngine.from_settings(settings.llm, settings.home, settings.kv),
                       diarizer=lambda: VoiceDiarizer(speakers))
