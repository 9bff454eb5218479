"""What a live meeting shows now: its snapshot for the page, the bot, the metrics and the reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from app.live.events import Slide
    from app.live.session_answers import MeetingQuestions
    from app.live.session_saving import Held
    from app.llm.context import MeetingContext
    from app.text.transcript import Transcript
    from encoders.ring import ItemRing, RingBuffer


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


class SessionView:
    """Reads a meeting's parts into one consistent snapshot: the named transcript, the KV's figures, what its
    rings dropped, the commit lags and answer latencies, and what the meeting has used.

    ``status`` is the session's (state, error, version), read under the session's lock with the rest."""

    def __init__(self, session_id: str, held: Held, questions: MeetingQuestions, audio: RingBuffer,
                 frames: ItemRing, context: Callable[[], MeetingContext | None],
                 status: Callable[[], tuple[str, str | None, int]]) -> None:
        self._session_id = session_id
        self._held = held
        self._questions = questions
        self._audio = audio
        self._frames = frames
        self._context = context
        self._status = status

    def snapshot(self) -> SessionSnapshot:
        held, speech = self._held, self._held.speech
        transcript = held.names.transcript()
        # The KV figures first, outside the session's lock: a checkpoint holds the context's lock and then takes
        # the session's (the saver's state), so taking them the other way round deadlocked a snapshot against an
        # autosave.
        context = self._context()
        kv = context.stats() if context is not None else {}
        with held.lock:
            lags, ttfts = speech.commit_lags, self._questions.ttfts
            lag = lags[-1] if lags else None
            kv["question_ttft"] = ttfts[-1] if ttfts else None
            counters = {
                "audio_dropped_samples": self._audio.stats.dropped,
                "video_dropped_frames": self._frames.stats.dropped,
                "committed_words": len(held.words),
                "slides": len(held.slides),
                "commit_lag_buckets": speech.commit_lag_histogram.cumulative(),
                "commit_lag_sum": speech.commit_lag_histogram.total,
                "commit_lag_count": speech.commit_lag_histogram.count,
                "usage": held.usage.snapshot().to_dict(),
            }
            state, error, version = self._status()
            time_offset, heard = held.clock()
            return SessionSnapshot(
                session_id=self._session_id,
                state=state,
                stream_seconds=round(heard, 3),
                transcript=transcript,
                tentative=speech.tentative,
                slides=list(held.slides),
                kv=kv,
                commit_lag=lag,
                error=error,
                version=version,
                counters=counters,
                decoded_seconds=round(max(speech.decoded_seconds, time_offset), 3),
            )
