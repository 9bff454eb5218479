"""Query-focused summaries: "Summarize the discussion about the remote's buttons", "What did Marketing think of
the design?".

Such a question is answered by a passage of the meeting, not by one line: QMSum's references summarise a
contiguous span (a median of 25 turns, 5% of the meeting). So the meeting is first searched as windows of
turns (BM25 over each window's words: a window that holds all of the query's words beats one that repeats one
of them), then sentences are ranked by their window's score mixed with their own BM25 match (and, when the
query names a speaker, that speaker's sentences first), taken up to a word budget, and written as minutes
(app/answering/reported.py) in the order they were said. Settings were chosen on QMSum validation's tuning part
(bench/qmsum_summary.py).
"""

from __future__ import annotations

import itertools
import logging
import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Sequence

import bm25s
import numpy as np

from app.answering.actions import extract_action_items, extract_decisions, extract_key_facts
from app.answering.reported import minutes_line, speaker_name
from app.text.sentences import Sentence, split_sentences
from app.answering.summary import SummarySettings, build_topics, content_words, is_summary_material
from app.text.transcript import Transcript

logging.getLogger("bm25s").setLevel(logging.WARNING)

# Words of summary requests ("Summarize the discussion about ...", "What did X think of ...?"): they say what
# kind of answer is wanted, not where in the meeting it is.
QUERY_STOPWORDS = frozenset(
    "summarize summarise summary discussion discuss discussed talk talked whole meeting group team think thought "
    "opinion opinions say said mention mentioned what why how did does towards toward about regard regarding "
    "recap sum give feel felt".split()
)


@dataclass(frozen=True)
class FocusSettings:
    """Chosen on QMSum validation's tuning part (bench/qmsum_summary.py --tune)."""

    words: int = 84  # word budget of an answer (QMSum's specific references average 67 words); at most an
    # eighth of a short meeting's words (but 30)
    window_turns: int = 5  # turns per searched window (windows overlap by half)
    window_weight: float = 0.9  # sentence score = w * its best window's score + (1 - w) * its own BM25 ...
    speaker_weight: float = 0.5  # ... + this for a speaker the query names ("What did Marketing think of ...")
    max_overlap: float = 0.5  # a sentence sharing more than this share of its content words with one taken: skipped
    whole_words: int = 138  # word budget of a whole-meeting summary (QMSum's general references average 110)
    feedback_windows: int = 3  # pseudo-relevance feedback: the query's best windows ...
    feedback_terms: int = 3  # ... lend this many of their most telling words to the query ...
    feedback_weight: float = 0.25  # ... each weighing this much of a query word


@dataclass
class FocusedSummary:
    text: str  # one minutes line per sentence, in the order said (after a topic line, for a query's summary)
    sentences: list[Sentence]  # the sentences it reports, in the order said


_POLITE = re.compile(r"^(?:(?:please|could you|can you|would you|hey|hi|ok|okay|so|now)\b[,\s]*)+", re.IGNORECASE)
_SUMMARY_OF = re.compile(
    r"^(?:summari[sz]e|describe|recap|sum up|tell me about|give me (?:an? )?(?:summary|recap|overview) of)\s+"
    r"(?:(?:what (?:was|were) (?:discussed|said|talked about|decided))\s*|(?:the |their |our |the group's )?"
    r"(?:discussions?|talks?|conversations?|debates?)\s*)?(?:about|on|of|regarding|around|concerning)?\s*",
    re.IGNORECASE)
_WHAT_DID = re.compile(
    r"^what (?:did|does|do|would) (?P<who>.+?) (?:think|say|feel|talk|mention|suggest|propose|recommend|discuss|"
    r"report|present)\s*(?:about|of|on|regarding|towards?|concerning)?\s+(?P<what>.+)$", re.IGNORECASE)
_WHAT_WAS = re.compile(r"^what (?:was|were|is|are) (?:the )?(?:discussions?|debates?|talks?|general discussion|"
                       r"conclusions?|decisions?) (?:about|on|of|regarding|concerning)\s+(?P<what>.+)$", re.IGNORECASE)


def topic_line(query: str) -> str:
    """The first line of a query's summary: what it covers ("Summarize the discussion about the buttons" ->
    "On the buttons:", "What did Marketing think of the design?" -> "Marketing on the design:"); a question
    of another shape is restated. Minutes open a point with its subject, and a reader sees what was found."""
    text = _POLITE.sub("", re.sub(r"^\w+:\s*", "", " ".join(query.split()))).rstrip(" ?.!")
    if not text:
        return ""
    did = _WHAT_DID.match(text)
    if did and not did.group("who").lower().startswith(("the group", "the meeting", "the team", "they", "you")):
        who = did.group("who")
        return f"{who[0].upper()}{who[1:]} on {did.group('what')}:"
    about = _WHAT_WAS.match(text) or did  # "What did the group discuss about X": X
    if about:
        return f"On {about.group('what')}:"
    summary = _SUMMARY_OF.match(text)
    if summary and re.fullmatch(r"(?:the |this |today's |our )?(?:whole |entire )?(?:meeting|call|session|everything|it)"
                                r"(?: so far| today)?", text[summary.end():], re.IGNORECASE):
        return ""  # the whole meeting
    if summary and summary.end() < len(text):
        return f"On {text[summary.end():]}:"
    if re.fullmatch(r"(?:summari[sz]e|summary|recap|sum up|highlights|overview)\b.*", text, re.IGNORECASE):
        return ""  # the whole meeting
    if re.match(r"(?:who|what|when|where|why|how|which|is|are|was|were|do|does|did|can|could|will|would|should)\b",
                text, re.IGNORECASE):
        return f"{text[0].upper()}{text[1:]}?"
    return f"On {text}:"


FEEDBACK_SHARE = 4  # feedback only where the meeting has at least this many times as many windows as it reads
MIN_SAID = 3  # a feedback word said at least this often in those windows (one mention is as often chatter)


class FocusedSummarizer:
    """One meeting indexed once (sentences and windows of turns); summarises it about any number of queries."""

    def __init__(self, transcript: Transcript, sentences: Sequence[Sentence] | None = None,
                 settings: FocusSettings = FocusSettings()):
        self.settings = settings
        self.sentences = list(sentences) if sentences is not None else split_sentences(transcript)
        self.turns = len(transcript.turns)
        self.words = sum(len(turn.text.split()) for turn in transcript.turns)  # a short meeting gets a shorter answer
        material = SummarySettings()
        self.material = [i for i, s in enumerate(self.sentences) if is_summary_material(s, material)]
        bags = [content_words(s.text) for s in self.sentences]
        self._sentence_index = _index([bags[i] for i in self.material])
        per_turn: list[list[str]] = [[] for _ in range(self.turns)]
        for sentence, bag in zip(self.sentences, bags):
            per_turn[sentence.turn_index] += bag
        width = max(1, settings.window_turns)
        starts = list(range(0, max(self.turns - width, 0) + 1, max(1, width // 2)))
        if starts and starts[-1] + width < self.turns:
            starts.append(self.turns - width)
        self._window_starts = starts
        self._window_bags = [sum(per_turn[a:a + width], []) for a in starts]
        self._window_index = _index(self._window_bags)
        self._window_df = Counter(word for bag in self._window_bags for word in set(bag))

    def about(self, query: str, words: int | None = None) -> FocusedSummary | None:
        """The passage the query is about, as minutes of about ``words`` words; None when no sentence shares
        a word with it."""
        named = self.named_speakers(query)
        terms = [w for w in content_words(query) if w not in QUERY_STOPWORDS] or content_words(query)
        if not terms or not self.material:
            return None
        own = self._sentence_index.get_scores(terms)
        if not own.any():
            return None
        windows = self._window_index.get_scores(terms)
        extra = self.feedback_terms(terms, windows)
        if extra:
            weight = self.settings.feedback_weight
            own = own + weight * self._sentence_index.get_scores(extra)
            windows = windows + weight * self._window_index.get_scores(extra)
        own = own / own.max()
        windows = windows / (windows.max() or 1.0)
        width = max(1, self.settings.window_turns)
        region = np.zeros(max(self.turns, 1))
        for start, score in zip(self._window_starts, windows):
            region[start:start + width] = np.maximum(region[start:start + width], score)
        w = self.settings.window_weight
        mixed = np.array([w * region[self.sentences[i].turn_index] + (1 - w) * own[j]
                          + self.settings.speaker_weight * (self.sentences[i].speaker in named)
                          for j, i in enumerate(self.material)])
        ranked = [self.material[j] for j in np.argsort(-mixed, kind="stable")]
        head = topic_line(query)
        budget = words or min(self.settings.words, max(30, self.words // 8))
        found = self.take(ranked, max(budget - len(head.split()), min(budget, 30)))  # the topic line counts
        return FocusedSummary(f"{head}\n{found.text}" if head else found.text, found.sentences)

    def feedback_terms(self, terms: list[str], window_scores: np.ndarray) -> list[str]:
        """Words the best-matching windows use that the query does not (pseudo-relevance feedback): a query says
        "the remote's buttons", the passage about them says "scroll wheel" and "menu"; a window's word counts by its
        share of the window, its rarity across windows (idf) and the window's score."""
        count = self.settings.feedback_windows
        if not self.settings.feedback_terms or count < 1 or len(self._window_bags) < FEEDBACK_SHARE * count:
            return []  # in a short meeting the best windows are much of it: their words say nothing of the passage
        weights: Counter[str] = Counter()
        said: Counter[str] = Counter()
        total = len(self._window_bags)
        for j in np.argsort(-window_scores, kind="stable")[:count]:
            bag = self._window_bags[j]
            if window_scores[j] <= 0 or not bag:
                continue
            for word, n in Counter(bag).items():
                if word not in terms and word not in QUERY_STOPWORDS:
                    weights[word] += n / len(bag) * np.log(total / self._window_df[word]) * window_scores[j]
                    said[word] += n
        ranked = [word for word, weight in weights.most_common() if weight > 0 and said[word] >= MIN_SAID]
        return ranked[:self.settings.feedback_terms]

    def whole(self, transcript: Transcript, words: int | None = None) -> FocusedSummary | None:
        """The whole meeting in about ``words`` words: each topic's most central sentences taken in turn (so a
        short budget still touches every topic), then, in a short meeting, the lines that gave key facts,
        decisions and action items."""
        if not self.sentences:
            return None
        budget = words or min(self.settings.whole_words, max(60, self.words // 3))
        return self.take(meeting_order(transcript, self.sentences), budget)

    def named_speakers(self, query: str) -> set[str]:
        """Speakers the query names: by their name ("Marketing", "Ms. Elizabeth May") or, for labels that end in
        one capital letter ("Professor C"), by that letter anywhere but the query's first word."""
        found = set()
        for label in {s.speaker for s in self.sentences}:
            name = speaker_name(label)
            letter = re.fullmatch(r".*\s([A-Z])", name)
            if re.search(rf"\b{re.escape(name)}\b", query, re.IGNORECASE) or (
                    letter and re.search(rf"(?<=\s){letter.group(1)}\b", query)):
                found.add(label)
        return found

    def take(self, ranked: Sequence[int], words: int) -> FocusedSummary:
        """Sentences in ``ranked`` order until ``words`` words of minutes (the last may run over), skipping one
        that mostly repeats a sentence already taken; in time order."""
        chosen, used, taken = [], 0, []
        for i in ranked:
            if used >= words:
                break
            said = set(content_words(self.sentences[i].text))
            if said and any(len(said & other) > self.settings.max_overlap * len(said) for other in taken):
                continue
            chosen.append(i)
            taken.append(said)
            used += len(minutes_line(self.sentences[i]).split())
        kept = [self.sentences[i] for i in sorted(chosen)]
        return FocusedSummary("\n".join(minutes_line(s) for s in kept), kept)


def _index(docs: list[list[str]]) -> bm25s.BM25:
    index = bm25s.BM25()
    index.index([doc or ["-"] for doc in docs] or [["-"]], show_progress=False)
    return index


def meeting_order(transcript: Transcript, sentences: Sequence[Sentence]) -> list[int]:
    """Indices of ``sentences`` in the order a whole-meeting summary takes them (see ``FocusedSummarizer.whole``)."""
    topics = build_topics(transcript, sentences, replace(SummarySettings(), max_sentences=12, min_sentences=1))
    index = {(s.turn_index, s.text): i for i, s in enumerate(sentences)}
    order = [index[(s.turn_index, s.text)] for group in itertools.zip_longest(*(t.sentences for t in topics))
             for s in group if s is not None and (s.turn_index, s.text) in index]
    listed = {(x.turn_index, x.text) for x in [*extract_key_facts(transcript), *extract_decisions(transcript)]}
    tasks = [(a.turn_index, a.task.lower()) for a in extract_action_items(transcript)]
    order += [i for i, s in enumerate(sentences) if (s.turn_index, s.text) in listed
              or any(turn == s.turn_index and task in s.text.lower() for turn, task in tasks)]
    return list(dict.fromkeys(order))
