"""Questions, summaries and action items over a transcript.

A transcript that fits the model's context goes in whole. A longer one is split into parts that
fit (map) and the parts' results are combined (reduce); nothing is cut silently. Answers cite the
turns they rest on, with their times.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

from app.actions import (
    ActionItem,
    Decision,
    KeyFact,
    extract_action_items,
    extract_decisions,
    extract_key_facts,
)
from app.llm import LLMEngine, join_example
from app.transcript import Transcript, Turn, format_time, turn_label
from encoders.errors import InputError

_STOPWORDS = set(
    "a an the and or but if of to in on at by for with from as is are was were be been it this that these those "
    "what which who whom when where why how do does did will would can could should i we you he she they them our "
    "your his her its their me us my there here not no yes so about into than then too very just also".split()
)


@dataclass(frozen=True)
class Citation:
    turn_index: int
    speaker: str
    start: float | None
    text: str

    @property
    def label(self) -> str:
        return f"[{format_time(self.start)}]" if self.start is not None else f"[turn {self.turn_index + 1}]"


@dataclass
class Answer:
    question: str
    text: str
    citations: list[Citation]
    parts: int  # how many transcript parts were read (1 = the whole transcript in one pass)
    confidence: float

    def to_dict(self) -> dict:
        return {**asdict(self), "citations": [{**asdict(c), "label": c.label} for c in self.citations]}


@dataclass
class MeetingSummary:
    summary: str
    decisions: list[Decision] = field(default_factory=list)
    action_items: list[ActionItem] = field(default_factory=list)
    key_facts: list[KeyFact] = field(default_factory=list)
    parts: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


def render_turns(turns: list[Turn], offset: int = 0) -> str:
    return "\n".join(f"{turn_label(offset + i, t)} {t.speaker}: {t.text}" for i, t in enumerate(turns))


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS and len(w) > 1}


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
        question = " ".join(question.split())
        if not question:
            raise InputError("the question is empty")
        q_tokens = self.engine.count_tokens(question)
        if q_tokens > self.engine.context_tokens // 4:
            raise InputError(
                f"the question is {q_tokens} tokens long; keep it under {self.engine.context_tokens // 4} tokens"
            )
        template = join_example(self.prompts.example, self.prompts.answer.replace("{question}", question))
        focus = self.engine.settings.answer_context_turns
        if focus:
            # Query-aware selection: every turn is scored against the question; the model reads the best
            # few in time order. A small model answers far better from a short, relevant context.
            chosen = self.relevant_turns(transcript, question, focus)
            bodies = [template.replace("{transcript}", "\n".join(render_turns([t], i) for i, t in chosen))]
            groups = [[turn for _, turn in chosen]]
            offsets = [[index for index, _ in chosen]]
        else:
            chunks = self._parts(transcript, template, reserve=48)
            bodies = [template.replace("{transcript}", render_turns(turns, offset)) for offset, turns in chunks]
            groups = [turns for _, turns in chunks]
            offsets = [list(range(offset, offset + len(turns))) for offset, turns in chunks]
        candidates = []
        for body, turns, indices in zip(bodies, groups, offsets):
            completion = self.engine.complete(self.engine.render(body), max_new_tokens=48, stop=("\n",))
            text = completion.text.strip()
            if text and self.prompts.not_found.lower() not in text.lower():
                candidates.append((completion.mean_logprob, text, turns, indices))
        if not candidates:
            return Answer(question, self.prompts.not_found, [], len(bodies), 0.0)
        logprob, text, turns, indices = max(candidates, key=lambda c: c[0])
        citations = self.cite(question, text, turns, indices)
        return Answer(question, text, citations, len(bodies), round(math.exp(logprob), 3))

    def relevant_turns(self, transcript: Transcript, question: str, k: int) -> list[tuple[int, Turn]]:
        """BM25-style ranking of turns by the question's content words; the top k, in time order."""
        docs = [_content_words(turn.text) for turn in transcript.turns]
        n = len(docs)
        q = _content_words(question)
        df = {w: sum(w in d for d in docs) for w in q}
        idf = {w: math.log((n - df[w] + 0.5) / (df[w] + 0.5) + 1.0) for w in q}
        scores = [sum(idf[w] for w in q & d) for d in docs]
        best = sorted(range(n), key=lambda i: (-scores[i], i))[:k]
        return [(i, transcript.turns[i]) for i in sorted(best)]

    def cite(self, question: str, answer: str, turns: list[Turn], indices: list[int], top: int = 2) -> list[Citation]:
        """The turns that share the most content words with the answer (then the question)."""
        answer_words, question_words = _content_words(answer), _content_words(question)
        scored = []
        for i, turn in enumerate(turns):
            words = _content_words(turn.text)
            score = 2.0 * len(words & answer_words) + len(words & question_words)
            if score > 0:
                scored.append((score, i, turn))
        scored.sort(key=lambda s: (-s[0], s[1]))
        best = [s for s in scored[:top] if s[0] >= scored[0][0] / 2] if scored else []
        return [Citation(indices[i], t.speaker, t.start, t.text) for _, i, t in sorted(best, key=lambda s: s[1])]

    # ------------------------------------------------------------------ summaries
    def summarize(self, transcript: Transcript) -> MeetingSummary:
        template = join_example(self.prompts.summary_example, self.prompts.summary)
        parts = self._parts(transcript, template, reserve=self.engine.settings.max_new_tokens)
        notes = [
            self._complete_summary(template.replace("{transcript}", render_turns(turns, offset)))
            for offset, turns in parts
        ]
        summary = notes[0] if len(notes) == 1 else self._reduce(notes)
        return MeetingSummary(
            summary,
            decisions=extract_decisions(transcript),
            action_items=extract_action_items(transcript),
            key_facts=extract_key_facts(transcript),
            parts=len(parts),
        )

    def _complete_summary(self, body: str) -> str:
        # A base model is asked to finish one sentence; a chat model writes the whole summary.
        stop = ("\n",) if self.prompts.style == "completion" else ()
        text = self.engine.complete(self.engine.render(body), stop=stop).text
        prefix = self.prompts.summary_prefix
        return f"{prefix} {text}".strip() if prefix else text

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
