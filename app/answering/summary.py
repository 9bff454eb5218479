"""The meeting summary: topics with their most central sentences, decisions, action items, key facts
and open questions, built from a transcript.

Why mostly extractive: a 270M base model cannot write a faithful paragraph, but sentences picked from
the transcript are faithful by construction and each one points at the turn it came from. The model
writes one overview line (``overview``) and, where a ``titler`` is given, the topic titles; without
one a topic is titled by its most distinctive words.

- topics: TextTiling (Hearst 1997) over turns, lexical cohesion between the words before and after
  each turn edge; the deepest valleys of cohesion are the topic boundaries.
- central sentences: LexRank (Erkan & Radev 2004), PageRank over the sentences' TF-IDF cosine graph,
  with redundant picks skipped.
- open questions: questions that no nearby turn of someone else answers and no decision settles.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np

from app.answering.actions import (
    ActionItem,
    Decision,
    KeyFact,
    _ASKED,
    extract_action_items,
    extract_decisions,
    extract_key_facts,
)
from app.answering.reported import as_minutes, minutes_line
from app.text.sentences import Sentence, split_sentences
from app.text.transcript import Transcript, format_time, unsure_note, unsure_words

# Function words and the fillers of spoken meetings: neither carries a topic.
STOPWORDS = frozenset(
    "a about above after again against all also am an and any are as at be because been before being below between "
    "both but by can could did do does doing down during each few for from further had has have having he her here "
    "hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off "
    "on once only or other our ours ourselves out over own same she should so some such than that the their theirs "
    "them themselves then there these they this those through to too under until up very was we were what when where "
    "which while who whom why will with would you your yours yourself yourselves "
    "um uh mm hmm mhm yeah yes okay ok oh ah like know think mean sort kind thing things gonna wanna got get go going "
    "really right well actually probably maybe lot bit guess want say said see just still yep sure good great thanks "
    "thank one two us let let's i'm it's that's don't we're you're they're there's i've we've can't isn't "
    "give take make need look way may might must sometimes stuff she's he's done put come came went use used try "
    "something anything everything somebody everybody yeah whatever pretty little much many".split()
)
_WORD = re.compile(r"[a-z][a-z0-9']*")
_YES_NO = re.compile(r"^(?:yes|yeah|yep|no|nope|sure|right|correct|exactly|absolutely|definitely|not really)\b", re.I)
_TAG = re.compile(r"\b(?:right|okay|ok|yeah|no|huh|eh|isn't it|don't you think)\?$", re.I)


def stem(word: str) -> str:
    """A crude suffix stripper: enough to make "problems" meet "problem" when comparing bags of words."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> list[str]:
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 2]


# ----------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Topic:
    title: str
    first_turn: int
    last_turn: int  # inclusive
    start: float | None
    sentences: list[Sentence]  # the most central sentences, in time order

    @property
    def text(self) -> str:
        """The topic's sentences as minutes (app/answering/reported.py; each ``Sentence.text`` stays as it was said)."""
        return " ".join(minutes_line(s) for s in self.sentences)


@dataclass
class MeetingSummary:
    summary: str  # the readable text: the overview line, then a paragraph per topic
    decisions: list[Decision] = field(default_factory=list)
    action_items: list[ActionItem] = field(default_factory=list)
    key_facts: list[KeyFact] = field(default_factory=list)
    parts: int = 1
    overview: str = ""
    topics: list[Topic] = field(default_factory=list)
    open_questions: list[Sentence] = field(default_factory=list)
    unsure: list[str] = field(default_factory=list)  # words of the lines it quotes heard with low confidence

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SummarySettings:
    """Sizes, tuned on the QMSum validation tuning split (bench/qmsum_summary.py)."""

    window_words: int = 120  # TextTiling: words compared on each side of a turn edge
    min_topic_words: int = 250  # no topic shorter than this (short meetings get one topic)
    words_per_sentence_kept: int = 250  # a topic keeps one sentence per this many words ...
    min_sentences: int = 2  # ... between these two
    max_sentences: int = 4
    min_sentence_words: int = 6  # shorter sentences ("Okay, sounds good.") are not summary material
    max_open_questions: int = 5


# ----------------------------------------------------------------------------------------- topics


def _tfidf(bags: Sequence[Sequence[str]], idf_from: Sequence[Sequence[str]] | None = None) -> np.ndarray:
    """Rows: L2-normalised TF-IDF vectors of the bags of words (IDF from ``idf_from``, default the bags)."""
    docs = idf_from if idf_from is not None else bags
    vocab = {w: i for i, w in enumerate(sorted({w for d in docs for w in d} | {w for b in bags for w in b}))}
    df = np.zeros(len(vocab))
    for d in docs:
        df[[vocab[w] for w in set(d)]] += 1
    idf = np.log((1 + len(docs)) / (1 + df)) + 1.0
    matrix = np.zeros((len(bags), len(vocab)))
    for row, bag in enumerate(bags):
        for w in bag:
            matrix[row, vocab[w]] += 1.0
    matrix *= idf
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def _window(bags: Sequence[list[str]], edge: int, step: int, words: int) -> list[str]:
    """Content words of whole turns from ``edge`` going ``step`` (+1 / -1) until ``words`` are taken."""
    taken: list[str] = []
    i = edge if step > 0 else edge - 1
    while 0 <= i < len(bags) and len(taken) < words:
        taken.extend(bags[i])
        i += step
    return taken


def _depths(similarity: np.ndarray) -> np.ndarray:
    """TextTiling depth: how far cohesion at each edge is below the peaks on its left and right."""
    depths = np.zeros_like(similarity)
    for i, value in enumerate(similarity):
        left = right = value
        for j in range(i - 1, -1, -1):
            if similarity[j] < left:
                break
            left = similarity[j]
        for j in range(i + 1, len(similarity)):
            if similarity[j] < right:
                break
            right = similarity[j]
        depths[i] = (left - value) + (right - value)
    return depths


def segment_topics(transcript: Transcript, settings: SummarySettings = SummarySettings()) -> list[tuple[int, int]]:
    """Topics as (first turn, last turn) ranges that cover the transcript in order."""
    n = len(transcript.turns)
    if n == 0:
        return []
    bags = [content_words(t.text) for t in transcript.turns]
    sizes = np.cumsum([len(t.text.split()) for t in transcript.turns])
    total = int(sizes[-1])
    if n < 4 or total < 2 * settings.min_topic_words:
        return [(0, n - 1)]
    edges = list(range(1, n))  # edge e lies between turn e-1 and turn e
    pairs = [(_window(bags, e, -1, settings.window_words), _window(bags, e, 1, settings.window_words)) for e in edges]
    vectors = _tfidf([bag for pair in pairs for bag in pair], idf_from=bags)
    similarity = np.einsum("ij,ij->i", vectors[0::2], vectors[1::2])
    similarity = np.convolve(similarity, np.ones(3) / 3, mode="same")  # TextTiling's smoothing
    depths = _depths(similarity)
    cutoff = depths.mean() + 0.5 * depths.std()  # Hearst's "liberal" cutoff is mean - std/2; topics are fewer
    words_before = np.concatenate([[0], sizes])  # words before turn e
    chosen: list[int] = []
    for k in np.argsort(-depths, kind="stable"):
        e = edges[k]
        if depths[k] <= cutoff:
            break
        cuts = sorted(chosen + [e])
        bounds = [0] + [int(words_before[c]) for c in cuts] + [total]
        if min(b - a for a, b in zip(bounds, bounds[1:])) >= settings.min_topic_words:
            chosen.append(e)
    cuts = [0] + sorted(chosen) + [n]
    return [(a, b - 1) for a, b in zip(cuts, cuts[1:])]


# ----------------------------------------------------------------------------------------- central sentences


def lexrank(bags: Sequence[Sequence[str]], idf_from: Sequence[Sequence[str]] | None = None, damping: float = 0.85) -> np.ndarray:
    """Continuous LexRank: stationary distribution of a random walk over the cosine-similarity graph."""
    n = len(bags)
    if n == 0:
        return np.zeros(0)
    vectors = _tfidf(bags, idf_from)
    graph = vectors @ vectors.T
    np.fill_diagonal(graph, 0.0)
    rows = graph.sum(axis=1, keepdims=True)
    walk = np.where(rows > 0, graph / np.where(rows == 0, 1.0, rows), 1.0 / n)
    scores = np.full(n, 1.0 / n)
    for _ in range(100):
        new = (1 - damping) / n + damping * scores @ walk
        if np.abs(new - scores).sum() < 1e-8:
            break
        scores = new
    return scores


def select(candidates: Sequence[Sentence], scores: Sequence[float], k: int, max_overlap: float = 0.5) -> list[Sentence]:
    """The ``k`` best-scored sentences, skipping near-repeats of one already taken, in time order."""
    chosen: list[tuple[int, set[str]]] = []
    for i in sorted(range(len(candidates)), key=lambda i: -scores[i]):
        if len(chosen) >= k:
            break
        words = set(content_words(candidates[i].text))
        if words and all(len(words & w) / min(len(words), len(w)) <= max_overlap for _, w in chosen if w):
            chosen.append((i, words))
    return [candidates[i] for i, _ in sorted(chosen)]


def is_summary_material(sentence: Sentence, settings: SummarySettings) -> bool:
    return (not sentence.text.endswith("?") and len(sentence.text.split()) >= settings.min_sentence_words
            and len(set(content_words(sentence.text))) >= 3)


def keyword_title(topic_bags: Sequence[Sequence[str]], meeting_bags: Sequence[Sequence[str]], topic_text: str, k: int = 3) -> str:
    """The topic's most distinctive words (TF-IDF against the meeting), as they were spoken."""
    weights = _tfidf([[w for bag in topic_bags for w in bag]], idf_from=meeting_bags)[0]
    vocab = sorted({w for d in meeting_bags for w in d} | {w for b in topic_bags for w in b})
    best = [vocab[i] for i in np.argsort(-weights)[:k] if weights[i] > 0]
    surface = {}
    for word in _WORD.findall(topic_text.lower()):
        surface.setdefault(stem(word), word)
    words = [surface.get(w, w) for w in best]
    return ", ".join(words).capitalize() if words else "Discussion"


# ----------------------------------------------------------------------------------------- open questions


def open_questions(transcript: Transcript, all_sentences: Sequence[Sentence], decisions: Sequence[Decision],
                   limit: int = 5, lookahead: int = 3, forgotten: Sequence[str] = ()) -> list[Sentence]:
    """Questions asked and not answered: no one else's reply in the next few turns shares a content word
    with it (or starts with yes/no), and no later decision does. Requests ("Bob, can you ...?") are
    action items and tag questions ("..., right?") are not real questions, so both are skipped.

    A question that names a ``forgotten`` speaker is skipped too: their reply went with them, so the
    transcript left cannot say whether it was answered, and calling it open would state what nobody said."""
    asked_of_forgotten = re.compile(r"\b(?:" + "|".join(map(re.escape, forgotten)) + r")\b", re.I) if forgotten else None
    found: list[Sentence] = []
    for s in all_sentences:
        if not s.text.endswith("?") or _ASKED.search(s.text) or _TAG.search(s.text):
            continue
        if asked_of_forgotten is not None and asked_of_forgotten.search(s.text):
            continue
        words = set(content_words(s.text))
        if len(words) < 2:
            continue
        replies = [t for t in transcript.turns[s.turn_index + 1: s.turn_index + 1 + lookahead] if t.speaker != s.speaker]
        answered = any(words & set(content_words(t.text)) or _YES_NO.match(t.text.strip()) for t in replies)
        settled = any(d.turn_index > s.turn_index and len(words & set(content_words(d.text))) >= 2 for d in decisions)
        if not answered and not settled:
            found.append(s)
    return found[:limit]


# ----------------------------------------------------------------------------------------- the summary


def _unique(items: Sequence, key: Callable) -> list:
    seen: set = set()
    out = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


def _normal(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def build_topics(transcript: Transcript, all_sentences: Sequence[Sentence], settings: SummarySettings = SummarySettings(),
                 titler: Callable[[str], str] | None = None, listed: Sequence[Sentence] = ()) -> list[Topic]:
    """Topics with their central sentences; sentences in ``listed`` (decisions, action items, key facts:
    they have sections of their own) are not picked again."""
    meeting_bags = [content_words(s.text) for s in all_sentences]
    scores = lexrank(meeting_bags)  # centrality within the whole meeting ...
    skip = {(s.turn_index, _normal(s.text)) for s in listed}
    topics = []
    for first, last in segment_topics(transcript, settings):
        members = [i for i, s in enumerate(all_sentences) if first <= s.turn_index <= last]
        words = sum(len(t.text.split()) for t in transcript.turns[first: last + 1])
        k = max(settings.min_sentences, min(settings.max_sentences, round(words / settings.words_per_sentence_kept)))
        material = [i for i in members if is_summary_material(all_sentences[i], settings)
                    and (all_sentences[i].turn_index, _normal(all_sentences[i].text)) not in skip] or members
        local = lexrank([meeting_bags[i] for i in material], idf_from=meeting_bags)  # ... and within the topic
        ranked = [local[j] * len(material) + scores[i] * len(meeting_bags) for j, i in enumerate(material)]
        chosen = select([all_sentences[i] for i in material], ranked, k)
        text = " ".join(all_sentences[i].text for i in members)
        title = titler(" ".join(s.text for s in chosen)) if titler and chosen else ""
        title = title or keyword_title([meeting_bags[i] for i in members], meeting_bags, text)
        topics.append(Topic(title, first, last, transcript.turns[first].start, chosen))
    return topics


def summary_text(overview: str, topics: Sequence[Topic]) -> str:
    """The readable summary: the overview line, then one paragraph per topic."""
    paragraphs = [overview.strip()] if overview.strip() else []
    paragraphs += [f"{t.title}: {t.text}" if len(topics) > 1 else t.text for t in topics if t.sentences]
    return "\n\n".join(paragraphs)


def build_summary(transcript: Transcript, overview: str = "", parts: int = 1,
                  titler: Callable[[str], str] | None = None, settings: SummarySettings = SummarySettings(),
                  forgotten: Sequence[str] = ()) -> MeetingSummary:
    """The whole summary of a transcript; ``overview`` is the model's one-line gist (may be empty);
    ``forgotten``: names of speakers forgotten from the meeting (see :func:`open_questions`)."""
    all_sentences = split_sentences(transcript)
    decisions = _unique(extract_decisions(transcript), lambda d: _normal(d.text))
    items = _unique(extract_action_items(transcript), lambda a: (a.owner, _normal(a.task)))
    facts = _unique(extract_key_facts(transcript), lambda f: _normal(f.text))
    listed = [s for s in all_sentences if any(x.turn_index == s.turn_index and x.text == s.text for x in [*decisions, *facts])
              or any(a.turn_index == s.turn_index and _normal(a.task) in _normal(s.text) for a in items)]
    topics = build_topics(transcript, all_sentences, settings, titler, listed)
    quoted = [(s.turn_index, s.text) for t in topics for s in t.sentences] + \
        [(x.turn_index, x.text) for x in [*decisions, *facts]] + [(a.turn_index, a.task) for a in items]
    unsure = [w for turn, text in quoted if 0 <= turn < len(transcript.turns)
              for w in unsure_words(transcript.turns[turn], text)]
    return MeetingSummary(
        summary=summary_text(overview, topics) or "Nothing has been said yet.",
        decisions=decisions,
        action_items=items,
        key_facts=facts,
        parts=parts,
        overview=overview.strip(),
        topics=topics,
        open_questions=open_questions(transcript, all_sentences, decisions, settings.max_open_questions,
                                      forgotten=forgotten),
        unsure=list(dict.fromkeys(unsure)),
    )


# ----------------------------------------------------------------------------------------- Markdown


def _at(start: float | None, turn_index: int) -> str:
    return format_time(start) if start is not None else f"turn {turn_index + 1}"


def render_markdown(summary: MeetingSummary, heading: str = "Meeting summary", action_items: bool = True) -> str:
    """The one Markdown form of a summary (CLI files, live page, exports). ``action_items=False`` where
    the page shows the action items in a panel of their own."""
    lines = [f"# {heading}", ""]
    if summary.overview:
        lines += [summary.overview, ""]
    if summary.topics:
        for topic in summary.topics:
            if not topic.sentences:
                continue
            if len(summary.topics) > 1:
                lines += [f"## {topic.title} [{_at(topic.start, topic.first_turn)}]", ""]
            lines += [f"- {as_minutes(s.text)} ({s.speaker}, {_at(s.start, s.turn_index)})" for s in topic.sentences] + [""]
    elif summary.summary.strip() and summary.summary.strip() != summary.overview:
        lines += [summary.summary.strip(), ""]
    if summary.key_facts:
        lines += ["## Key facts", ""] + [f"- {f.text} ({f.speaker}, {_at(f.start, f.turn_index)})" for f in summary.key_facts] + [""]
    if summary.decisions:
        lines += ["## Decisions", ""] + [f"- {d.text} ({d.speaker}, {_at(d.start, d.turn_index)})" for d in summary.decisions] + [""]
    if action_items:
        lines += ["## Action items", ""]
        if summary.action_items:
            lines += ["| Owner | Task | Due | Said at |", "|---|---|---|---|"]
            lines += [f"| {a.owner} | {a.task} | {a.due or '-'} | {_at(a.start, a.turn_index)} |" for a in summary.action_items]
        else:
            lines.append("None found.")
        lines.append("")
    if summary.open_questions:
        lines += ["## Open questions", ""] + [f"- {q.text} ({q.speaker}, {_at(q.start, q.turn_index)})" for q in summary.open_questions] + [""]
    if summary.unsure:
        lines += [unsure_note(summary.unsure, "the lines above"), ""]
    return "\n".join(lines).rstrip() + "\n"
