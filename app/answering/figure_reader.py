"""Read an amount, a count, a metric or a date out of the lines that answer a question (for the answer finder,
app/answering/answers.py; which kinds a question wants and which figure of a line: app/answering/figures.py).

A date answers only the event it is said of: "write the test plan by Wednesday" is no answer to "When does the
pilot start?", and when every date found belongs to another event the reader says so (``OTHER_EVENTS``), so the
finder answers "not said" rather than fall back to the lines.
"""

from __future__ import annotations

from typing import Sequence

from app.answering.figures import ASKS_COST, ASKS_LATEST, PAST, pick, price_check, wanted_kinds
from app.answering.question_parse import asked_events, date_event
from app.answering.questions import Question, QuestionType, content_words
from app.answering.retrieval import Hit, SentenceIndex, stems
from app.answering.spoken import capitalise, tidy
from app.answering.support import coverage
from app.text.entities import find_entities, merge_date_time
from app.text.sentences import Sentence

# A verb this close to an asked one (MiniLM cosine) names the same event: start~begin 0.84, start~launch 0.63,
# finish~complete 0.57, send~email 0.58; but start~write 0.29, start~cost 0.25, start~decide 0.39.
SAME_EVENT = 0.55
# read()'s answer when every date it found is the time of another event than the one asked.
OTHER_EVENTS = object()


class FigureReader:
    """One meeting's lines, read for the figure or date a question wants."""

    def __init__(self, sentences: Sequence[Sentence], index: SentenceIndex):
        self.sentences = sentences
        self.index = index  # its embedder tells an asked verb from another event's

    def read(self, q: Question, hits: list[Hit]) -> "tuple[str, list[Sentence]] | object | None":
        """The wanted kind of entity from the sentences that best cover the question (a better-covering sentence
        beats a preferred kind: "the time to hire is 44 days" answers a metric question though not a percentage).

        Among equally good sentences, a past value ("it used to be...", "originally...") loses to a current
        one unless the question asks for the past, and a later statement wins when the question asks what it is
        now (a date moved, a new figure); otherwise the better retrieval score. None when no line gives one.
        """
        asks_past = bool(PAST.search(q.text))
        wanted = wanted_kinds(q)
        is_price = price_check(q)
        # a date answers the event it is said of: not the test plan's date for "When does the pilot start?"
        events = asked_events(q.text) if q.type is QuestionType.WHEN else []
        asked = events + content_words(q.text) if events else []  # the tagger may take the asked verb for a noun
        found, other_events = [], 0
        for hit in hits:
            sentence = self.sentences[hit.index]
            if sentence.text.endswith("?"):
                continue
            entities = [e for e in merge_date_time(sentence.text, find_entities(sentence.text))
                        if e.kind in wanted and is_price(e)]
            if asked and entities:
                kept = [e for e in entities if self._same_event(asked, date_event(sentence.text, e.start, e.end))]
                other_events += len(entities) > len(kept)
                entities = kept
            if entities:
                rank = min(wanted.index(e.kind) for e in entities)
                entities = [e for e in entities if wanted.index(e.kind) == rank]
                found.append((round(coverage(q, sentence), 2), -rank, hit, sentence, entities))
        if other_events:  # a date was another event's: what is left must say something of what is asked
            found = [f for f in found if coverage(q, f[3], context_weight=0.0) > 0]
        if not found:
            return OTHER_EVENTS if other_events else None
        if q.type is QuestionType.HOW_MUCH and ASKS_COST.search(q.text):
            # A bare number answers a price only where no line gives an amount of money (the recogniser may drop
            # "dollars"); a slide's "5" read from "5% discount" loses to "12,000 dollars" however well it covers.
            found = [f for f in found if any(e.kind == "money" for e in f[4])] or found
        best = max(f[:2] for f in found)
        found = [f for f in found if f[:2] >= best]
        current = [f for f in found if bool(PAST.search(f[3].text)) == asks_past] or found
        if ASKS_LATEST.search(q.text):
            _, _, _, sentence, entities = max(current, key=lambda f: f[3].start or 0.0)
        else:
            # the better-ranked line: by the reranker's relevance where one reordered the hits
            _, _, _, sentence, entities = max(current, key=lambda f: (rank_score(f[2]), f[3].start or 0.0))
        entity = pick(sentence.text, entities, q.focus, content_words(q.text), asks_past)
        return capitalise(tidy(entity.text) or entity.text), [sentence]  # "the 1st of uh, June"

    def _same_event(self, asked: list[str], held: tuple[str, tuple[str, ...]] | None) -> bool:
        """Whether a date held by an event (question_parse.date_event) answers a question whose events and words are
        ``asked``: only another event acting on something else refuses it ("write the test plan by Wednesday" for
        "When does the pilot start?"). No event of its own, one acting on nothing ("finished by Friday"), one of the
        asked in any form ("starts"), or one close in meaning ("begin" for "start") keeps it."""
        if held is None or not asked:
            return True
        said, acts_on = held
        asked_stems = set(stems(" ".join(asked)))
        if not acts_on or set(stems(said)) & asked_stems or set(stems(" ".join(acts_on))) & asked_stems:
            return True
        embedder = self.index.embedder
        if embedder is None:
            return True  # no way to tell meanings apart: not reason enough to refuse the date
        vectors = embedder.embed([said, *asked])
        return float((vectors[1:] @ vectors[0]).max()) >= SAME_EVENT


def rank_score(hit: Hit) -> float:
    """A hit's place in the order: the reranker's relevance where one reordered the hits, else its score."""
    return hit.score if hit.relevance is None else hit.relevance
