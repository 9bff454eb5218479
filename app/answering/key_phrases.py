"""What a meeting keeps talking about: its key phrases ("the training data", "the presentation platform").

A phrase is one of the parser's noun chunks with its determiners, pronouns and stop words dropped (and adjectives
at its end, which describe rather than name). Each is counted over the meeting and weighed by how rare its words are
in English at large (wordfreq's Zipf scale, 0-8): "transcripts" said 36 times says more about a meeting than
"things" said 16 times. This is the classic keyness of a text against a reference corpus, with no list of words to
keep or drop; it answers "what was the meeting about?" (app/answering/meeting_record.py) and names a meeting's
topics.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from app.answering.question_parse import parser
from app.text.textnorm import is_hesitation

log = logging.getLogger(__name__)

COMMONEST = 7.0  # Zipf frequency of the commonest English words ("the" is 7.7); a word this common weighs nothing
MIN_COUNT = 2  # a phrase said once is not what a meeting kept talking about


@dataclass(frozen=True)
class KeyPhrase:
    text: str  # as it was first said ("training data")
    count: int  # times said
    weight: float  # count x how rare its words are in English


@functools.lru_cache(maxsize=1)
def _zipf():
    """wordfreq's Zipf frequency for English, or None (each word weighs the same) where it is not installed."""
    try:
        from wordfreq import zipf_frequency
    except ImportError:
        log.warning("wordfreq is not installed: key phrases are ranked by how often they are said alone")
        return None
    return functools.lru_cache(maxsize=65536)(lambda word: zipf_frequency(word, "en"))


def rarity(words: Iterable[str]) -> float:
    """How much a phrase's words say, summed: COMMONEST less each word's Zipf frequency."""
    zipf = _zipf()
    return sum(1.0 if zipf is None else max(0.0, COMMONEST - zipf(w.lower())) for w in words)


def key_phrases(texts: Iterable[str], k: int = 6) -> list[KeyPhrase]:
    """The ``k`` phrases that weigh most in ``texts`` (a meeting's sentences), heaviest first; [] without the
    parser. A phrase whose words all lie inside a heavier one kept ("data" beside "training data") is not listed
    again."""
    nlp = parser()
    if nlp is None:
        return []
    counts: Counter[str] = Counter()
    said: dict[str, str] = {}
    for doc in nlp.pipe((t.replace("[", " ").replace("]", " ") for t in texts), batch_size=256):
        for chunk in doc.noun_chunks:
            words = [w for w in chunk if w.is_alpha and not w.is_stop and w.pos_ in ("NOUN", "PROPN", "ADJ")
                     and not is_hesitation(w.text)]
            while words and words[-1].pos_ == "ADJ":
                words.pop()
            if not words:
                continue
            key = " ".join(w.lemma_.lower() for w in words)
            counts[key] += 1
            said.setdefault(key, " ".join(w.text if w.pos_ == "PROPN" else w.text.lower() for w in words))
    weighed = sorted((KeyPhrase(said[key], n, round(n * rarity(said[key].split()), 2))
                      for key, n in counts.items() if n >= MIN_COUNT), key=lambda p: -p.weight)
    kept: list[KeyPhrase] = []
    for phrase in weighed:
        words = set(phrase.text.lower().split())
        if not any(words <= set(k.text.lower().split()) for k in kept):
            kept.append(phrase)
        if len(kept) == k:
            break
    return kept
