"""Does the meeting speak to a question? The gate between finding lines and answering from them.

A line supports a question when it says most of the question's focus, each word weighted by how rare it is in the
meeting, or is close to it in meaning. When no one line does, the meeting may still say it across lines; a question
about something the meeting never mentions says none of it, and is answered "not said".
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Protocol

from app.answering.figures import WANTED
from app.answering.questions import Question, QuestionType, content_words, topic_words
from app.answering.retrieval import Hit, stems
from app.answering.spoken import heard_alike
from app.text.entities import find_entities
from app.text.sentences import Sentence
from app.text.textnorm import normalize


class SupportOptions(Protocol):
    min_focus_coverage: float
    min_dense: float
    heard_alike: float
    min_meeting_coverage: float


class Support:
    """One meeting's word statistics (computed on first use), and the tests that use them."""

    def __init__(self, sentences: list[Sentence], options: SupportOptions):
        self.sentences = sentences
        self.options = options
        self._df: Counter[str] | None = None
        self._said: set[str] | None = None
        self._figures: set[str] | None = None

    def idf(self, stem: str) -> float:
        """How rare a stem is among the meeting's sentences (a stem it never says weighs most)."""
        if self._df is None:
            self._df = Counter(st for s in self.sentences for st in set(stems(s.text)))
        return math.log((len(self.sentences) + 1) / (self._df.get(stem, 0) + 1)) + 1.0

    def supports(self, q: Question, hit: Hit) -> bool:
        """Does this sentence (with the one before it) talk about what the question is about? Its focus stems,
        each weighted by how rare it is in the meeting, must be mostly there, or the sentence must be close in
        meaning."""
        if hit.score <= 0:
            return False
        if q.type is QuestionType.HOW_MANY and counts(q, self.sentences[hit.index]):
            return True
        # A question about nothing in particular ("What is the total budget?") needs its frame words.
        focus = set(stems(" ".join(q.focus))) or set(stems(" ".join(topic_words(q.text)))) or set(stems(q.text))
        sentence = self.sentences[hit.index]
        if focus:
            said = stems(f"{sentence.context} {sentence.text} {sentence.speaker}")
            present = set(said)
            weight = {f: self.idf(f) for f in focus}
            covered = sum(w * (1.0 if f in present else 0.5 * heard_alike(f, said, self.options.heard_alike))
                          for f, w in weight.items())
            if covered / sum(weight.values()) >= self.options.min_focus_coverage:
                return True
        return hit.dense >= self.options.min_dense

    def said_in_meeting(self, q: Question, hits: list[Hit]) -> list[Hit]:
        """The best lines when the meeting says what the question is about somewhere, though no one line says
        most of it ("Why is Ana nervous?" - "I'm a bit stressed, the officer watches the demo"); none when the
        meeting never mentions it."""
        focus = set(stems(" ".join(q.focus))) or set(stems(" ".join(topic_words(q.text))))
        # A figure or a date must come from a line about its topic; a summary about a topic needs the topic said.
        # A yes or no on part of the question would invent one ("Is the demo cancelled?" - "Yes." where only the
        # demo is said).
        if not focus or not hits or q.type in WANTED or q.type in (QuestionType.SUMMARY, QuestionType.YES_NO):
            return []
        if self._figures is None:
            self._figures = {normalize(e.text) for s in self.sentences for e in find_entities(s.text)}
        if any(normalize(e.text) not in self._figures for e in find_entities(q.text)):
            return []  # the question states a figure the meeting never says ("who said it costs 15,000?")
        if self._said is None:
            self._said = {st for s in self.sentences for st in stems(f"{s.text} {s.speaker}")}
        weight = {f: self.idf(f) for f in focus}
        said = sum(w for f, w in weight.items() if f in self._said) / sum(weight.values())
        if said < self.options.min_meeting_coverage:
            return []
        return [h for h in hits if h.score > 0]


    def after_its_topic(self, q: Question, hits: list[Hit], window: int = 4) -> list[Hit]:
        """Lines said just after a line that names the question's topic, which share a word of it: a figure is
        often given a few lines after its topic is named, in words that no longer name it ("the students firm
        fair ... there is four hundred high school students"). Only a figure or a date is taken from them."""
        topical = [h.index for h in hits if self.supports(q, h)]
        focus = set(stems(" ".join(q.focus)))
        return [h for h in hits if h.score > 0 and any(0 < h.index - t <= window for t in topical)
                and focus & set(stems(_without_figures(self.sentences[h.index].text)))]


def coverage(q: Question, sentence: Sentence, context_weight: float = 0.5, frame_weight: float = 0.5) -> float:
    """How much of the question the sentence says: its focus stems fully, the words that frame the question
    ("start", "cost") at ``frame_weight``; a stem only in the sentence's context counts ``context_weight``."""
    focus = set(stems(" ".join(q.focus)))
    frame = set(stems(" ".join(content_words(q.text)))) - focus
    weights = {**{f: frame_weight for f in frame if frame_weight}, **{f: 1.0 for f in focus}}
    if not weights:
        return 0.0
    own, context = set(stems(f"{sentence.text} {sentence.speaker}")), set(stems(sentence.context))
    said = sum(w * (1.0 if f in own else context_weight if f in context else 0.0) for f, w in weights.items())
    return said / sum(weights.values())


def _without_figures(text: str) -> str:
    """``text`` less its figures with their units: "dollars" in "two thousand dollars" names no topic."""
    for e in reversed(find_entities(text)):
        text = text[:e.start] + " " + text[e.end:]
    return text


def counts(q: Question, sentence: Sentence) -> bool:
    """The sentence gives a number of what the question counts ("how many boxes" - "465 boxes ready")."""
    noun = re.search(r"\bhow many\s+(?:\w+\s+)?(\w+)", q.text.lower())
    if noun is None:
        return False
    counted = set(stems(noun.group(1))) | set(stems(noun.group(0).split()[2]))
    return any(e.kind == "count" and counted & set(stems(e.text)) for e in find_entities(sentence.text))
