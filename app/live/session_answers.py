"""Questions and summaries about a live meeting, answered from the meeting's KV cache."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Callable, Sequence

from app.answering.answers import Answer, Reading
from app.llm.assistant import Assistant, MeetingSummary
from app.llm.context import ContextLine, MeetingContext, confidence
from app.answering.finder import meeting_finder
from app.answering.summary import build_summary
from app.text.transcript import SLIDE_SPEAKER, Transcript, Turn
from encoders.errors import InputError

if TYPE_CHECKING:
    from threading import RLock

    from app.live.events import Slide
    from app.llm.engine import LivePrompts
    from app.text.pii import PIIDetector
    from app.text.sentences import Sentence
    from kvstore.timeline import TimelineIndex


class MeetingQuestions:
    """Answers and summaries over the transcript and slides so far: a question only pays for its own tokens,
    because the meeting is already in the KV (``context``, once the LLM is loaded; ``prompts`` with it)."""

    def __init__(self, lock: RLock, slides: list[Slide], timeline: TimelineIndex,
                 context: Callable[[], MeetingContext], prompts: Callable[[], LivePrompts],
                 erased_pii: Callable[[], PIIDetector | None] = lambda: None) -> None:
        """``erased_pii``: the detector whose finds the KV never holds (``pii.policy: zero-in-kv``); answers and
        summaries then read a transcript masked by it, so what the KV cannot recall is not answered either."""
        self._lock = lock
        self._erased_pii = erased_pii
        self._masked: dict[tuple, Turn] = {}  # turn -> its masked copy, so a question masks only new turns
        self._slides = slides
        self._timeline = timeline
        self._context = context
        self._prompts = prompts
        self.ttfts: list[float] = []  # time to the first token of each answer, newest last

    def ask(self, question: str, transcript: Transcript) -> Answer:
        """Answer from the meeting so far (app/answering/answers.py); a free-form answer is generated from the KV."""
        lines = self._without_erased_pii(self._lines_for_retrieval(transcript))  # the same turns: masked once
        transcript = self._without_erased_pii(transcript)
        if not lines.turns:
            return Answer(question, "Nothing has been said yet.", [], 0, 0.0)
        return meeting_finder(lines, partial(self._model_answer, transcript)).answer(question)

    def summary(self, transcript: Transcript, forgotten: Sequence[str] = ()) -> MeetingSummary:
        """The meeting's summary; ``forgotten``: names of speakers forgotten from it (app/answering/summary.py)."""
        if not transcript.turns:
            return MeetingSummary("Nothing has been said yet.")
        transcript = self._without_erased_pii(transcript)
        context = self._context()
        engine = context.engine
        stop = ("\n",) if engine.prompts.style == "completion" else ()
        generation = context.generate(self._prompts().summary_tail, engine.settings.max_new_tokens, stop=stop)
        return build_summary(transcript, engine.prompts.summary_from(generation.text), forgotten=forgotten)

    def _without_erased_pii(self, transcript: Transcript) -> Transcript:
        detector = self._erased_pii()
        if detector is None:
            return transcript
        from app.text.pii import mask_transcript

        def key(turn: Turn) -> tuple:
            return turn.speaker, turn.start, turn.end, turn.text

        new = [turn for turn in transcript.turns if key(turn) not in self._masked]
        for turn, masked in zip(new, mask_transcript(Transcript(new), detector).turns):
            self._masked[key(turn)] = masked
        return Transcript([self._masked[key(t)] for t in transcript.turns], transcript.source, transcript.duration)

    def _model_answer(self, transcript: Transcript, question: str,
                      evidence: Sequence[Sentence]) -> Reading | None:
        """The model's answer from the meeting's KV cache, the evidence lines repeated after it."""
        context = self._context()
        engine = context.engine
        excerpt = "\n".join(ContextLine("audio", s.start or 0.0, s.end or s.start or 0.0, s.speaker, s.text).render().rstrip()
                            for s in evidence)
        tail = self._prompts().answer_tail.replace("{question}", question)
        suffix = f"\nMost relevant lines:\n{excerpt}\n{tail}" if excerpt else tail
        try:
            generation = context.generate(suffix, 48, stop=("\n",), focus=self._focus(evidence))
        except InputError:  # the meeting outgrew the model's positions: read the transcript instead
            return Assistant(engine).model_answer(transcript, question, evidence)
        with self._lock:
            self.ttfts.append(generation.time_to_first_token)
            self.ttfts = self.ttfts[-200:]
        text = engine.prompts.answer_from(generation.text)
        return None if text is None else Reading(text, confidence(generation))

    def _lines_for_retrieval(self, transcript: Transcript) -> Transcript:
        """Spoken turns and slides, in time order, as one list of turns to rank against a question."""
        with self._lock:
            slides = list(self._slides)
        turns = list(transcript.turns) + [Turn(SLIDE_SPEAKER, s.text, s.time, s.time) for s in slides]
        turns.sort(key=lambda t: t.start or 0.0)
        return Transcript(turns=turns, source=transcript.source)

    def _focus(self, evidence: Sequence[Sentence]) -> list[tuple[int, int]]:
        """Token ranges of the evidence lines' time windows (query-aware promotion, via the timeline)."""
        ranges: list[tuple[int, int]] = []
        for sentence in evidence:
            if sentence.start is not None:
                ranges.extend(self._timeline.tokens_in(sentence.start, sentence.end if sentence.end is not None else sentence.start))
        return ranges
