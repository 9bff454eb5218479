"""The answer finder the app asks with: one place that puts the shipped parts together, so the batch path, the
live path and the benches answer with the same embedder, rankers and reader."""

from __future__ import annotations

from app.answering.answers import AnswerFinder, Generate
from app.answering.cross_rank import default_cross_ranker
from app.answering.rerank import default_reranker
from app.answering.retrieval import default_embedder
from app.text.transcript import Transcript


def meeting_finder(transcript: Transcript, generate: Generate | None = None) -> AnswerFinder:
    """A finder over ``transcript`` with the embedded MiniLM, the meeting ranker (people, dates, figures), the
    cross-ranker (quoted lines) and ``generate`` (the LLM) for free-form answers. No span reader: the one trained
    so far loses to quoting the lines on ELITR dev (docs/benchmarks.md), so none ships."""
    return AnswerFinder(transcript, default_embedder(), generate, reranker=default_reranker(),
                        quote_reranker=default_cross_ranker())
