"""Questions, summaries and action items over a transcript.

A transcript that fits the model's context goes in whole. A longer one is split into parts that
fit (map) and the parts' results are combined (reduce); nothing is cut silently. Questions are
answered by app/answering/answers.py, which cites the sentences each answer rests on, with their times.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Sequence

from app.answering.answers import Answer, Citation, Reading  # noqa: F401  (Answer, Citation: the app's answer types)
from app.llm.engine import LLMEngine, join_example
from app.answering.questions import checked_question
from app.answering.finder import meeting_finder
from app.text.sentences import Sentence
from app.answering.summary import MeetingSummary, build_summary  # noqa: F401  (MeetingSummary: the app's summary type)
from app.text.transcript import Transcript, Turn, turn_label
from encoders.errors import InputError


def render_turns(turns: list[Turn], offset: int = 0) -> str:
    return "\n".join(f"{turn_label(offset + i, t)} {t.speaker}: {t.text}" for i, t in enumerate(turns))


class Assistant:
    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self.prompts = engine.prompts

    # ------------------------------------------------------------------ splitting
    def _parts(self, transcript: Transcript, template: str, reserve: int) -> list[tuple[int, list[Turn]]]:
        """Consecutive runs of turns whose rendered prompt fits the context (start index, turns)."""
        overhead = self.engine.count_tokens(self.engine.render(template.replace("{transcript}", ""))) + reserve
        budget = self.engine.context_tokens - overhead
        if budget < 64:
            raise InputError(f"the model's context ({self.engine.context_tokens} tokens) leaves no room for the transcript")
        parts: list[tuple[int, list[Turn]]] = []
        current: list[Turn] = []
        start, used = 0, 0
        for index, turn in enumerate(transcript.turns):
            cost = self.engine.count_tokens(render_turns([turn], index)) + 1
            if cost > budget:  # one enormous turn: split its text, keep its label
                raise InputError(f"turn {index + 1} alone ({cost} tokens) is longer than the model's context budget")
            if current and used + cost > budget:
                parts.append((start, current))
                current, start, used = [], index, 0
            current.append(turn)
            used += cost
        if current:
            parts.append((start, current))
        return parts

    # ------------------------------------------------------------------ questions
    def ask(self, transcript: Transcript, question: str) -> Answer:
        """Answer from the meeting (app/answering/answers.py); the model writes only free-form answers."""
        question = self._fits(checked_question(question))
        read = partial(self.model_answer, transcript)
        return meeting_finder(transcript, read).answer(question)

    def _fits(self, question: str) -> str:
        """The question, when it leaves the model room for the meeting's lines (a model with a short context)."""
        q_tokens = self.engine.count_tokens(question)
        if q_tokens > self.engine.context_tokens // 4:
            raise InputError(
                f"the question is {q_tokens} tokens long; keep it under {self.engine.context_tokens // 4} tokens"
            )
        return question

    def model_answer(self, transcript: Transcript, question: str, evidence: Sequence[Sentence]) -> Reading | None:
        """The model's answer (text, confidence, parts read): from the evidence's turns for a small model
        (``answer_context_turns``), from the whole transcript (map-reduce past the context) otherwise."""
        template = join_example(self.prompts.example, self.prompts.answer.replace("{question}", question))
        if self.engine.settings.answer_context_turns:
            indices = sorted({s.turn_index for s in evidence})[: self.engine.settings.answer_context_turns]
            bodies = [template.replace("{transcript}", "\n".join(render_turns([transcript.turns[i]], i) for i in indices))]
        else:
            chunks = self._parts(transcript, template, reserve=48)
            bodies = [template.replace("{transcript}", render_turns(turns, offset)) for offset, turns in chunks]
        candidates = []
        for body in bodies:
            completion = self.engine.complete(self.engine.render(body), max_new_tokens=48, stop=("\n",))
            text = self.prompts.answer_from(completion.text)
            if text is not None:
                candidates.append((completion.mean_logprob, text))
        if not candidates:
            return None
        logprob, text = max(candidates)
        return Reading(text, round(math.exp(logprob), 3), len(bodies))

    # ------------------------------------------------------------------ summaries
    def summarize(self, transcript: Transcript) -> MeetingSummary:
        template = join_example(self.prompts.summary_example, self.prompts.summary)
        parts = self._parts(transcript, template, reserve=self.engine.settings.max_new_tokens)
        notes = [
            self._complete_summary(template.replace("{transcript}", render_turns(turns, offset)))
            for offset, turns in parts
        ]
        overview = notes[0] if len(notes) == 1 else self._reduce(notes)
        return build_summary(transcript, overview, parts=len(parts))

    def _complete_summary(self, body: str) -> str:
        # A base model is asked to finish one sentence; a chat model writes the whole summary.
        stop = ("\n",) if self.prompts.style == "completion" else ()
        return self.prompts.summary_from(self.engine.complete(self.engine.render(body), stop=stop).text)

    def _reduce(self, notes: list[str]) -> str:
        """Merge part summaries, in rounds if even the notes do not fit.

        Every round must merge at least two notes or the rounds never end, so a note longer than half
        of what one merge pass holds is shortened (notes are the model's own words, not the transcript).
        """
        template = self.prompts.summary_reduce
        reserve = self.engine.settings.max_new_tokens
        overhead = self.engine.count_tokens(self.engine.render(template.replace("{transcript}", ""))) + reserve
        limit = (self.engine.context_tokens - overhead) // 2 - 16  # 16: the "[turn n] Part n:" label and margin
        while len(notes) > 1:
            notes = [self._shorten(n, limit) for n in notes]
            as_turns = Transcript(turns=[Turn(speaker=f"Part {i + 1}", text=n) for i, n in enumerate(notes)])
            groups = self._parts(as_turns, template, reserve=reserve)
            notes = [
                self._complete_summary(template.replace("{transcript}", "\n".join(f"- {t.text}" for t in turns)))
                for _, turns in groups
            ]
        return notes[0]

    def _shorten(self, text: str, limit: int) -> str:
        """``text`` cut at a word boundary to at most ``limit`` tokens."""
        while text and self.engine.count_tokens(text) > limit:
            cut = text[: len(text) * 3 // 4]
            text = cut.rsplit(" ", 1)[0] if " " in cut.strip() else cut
        return text
