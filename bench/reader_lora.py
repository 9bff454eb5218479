"""Fine-tune the embedded LLM as a meeting reader with LoRA (peft), resumable, on this CPU or a lent GPU.

    .venv/bin/python -m bench.reader_lora --data bench/out/reader-data --out bench/out/reader-lora --steps 400

Examples come from bench/reader_data.py (QMSum train + MeeQA; never ELITR). Each is the app's answer prompt
(``Meeting transcript: ... Question: ... Answer:``, configs/prompts/completion.yaml without its worked example)
followed by the answer; only the answer's tokens are learnt. Every ``--save-every`` steps the adapter, the optimiser
and the step go to ``OUT/checkpoint`` (written to a temporary folder, then renamed); a run started again with the
same ``--out`` goes on from there, so hours of CPU training can be spread over sessions. ``OUT/loss.jsonl`` holds
the training loss of every step and the held-out loss every ``--eval-every`` steps; ``OUT/adapter`` is the last
adapter, ready for ``llm.adapter``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj"]


def load_rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise SystemExit(f"no training data at {path} (make it with python -m bench.reader_data)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def answer_template() -> tuple[str, str]:
    """The app's answer prompt (configs/prompts/completion.yaml) cut at ``{transcript}``: what the reader is trained
    on is what it is asked with."""
    from app.llm.engine import load_prompts

    head, tail = load_prompts("completion").answer.split("{transcript}", 1)
    return head, tail


def encode(tokenizer, row: dict, max_tokens: int) -> tuple[list[int], list[int]]:
    """Token ids and labels (-100 on the prompt): the context is cut from its end when the whole is too long."""
    before, after = answer_template()
    answer = tokenizer(" " + row["answer"], add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    answer = answer[:max_tokens // 4]
    tail = tokenizer(after.replace("{question}", row["question"]), add_special_tokens=False).input_ids
    head = [tokenizer.bos_token_id] + tokenizer(before + row["context"], add_special_tokens=False).input_ids
    room = max_tokens - len(answer) - len(tail)
    prompt = head[:max(8, room)] + tail
    return prompt + answer, [-100] * len(prompt) + answer


def batches(n: int, batch: int, seed: int, start_step: int):
    """(step, indices) from ``start_step`` on: one fixed shuffle per epoch, so a resumed run sees what it would have."""
    step = start_step
    while True:
        epoch, offset = divmod(step * batch, n)
        order = list(range(n))
        random.Random(seed + epoch).shuffle(order)
        yield step, [order[(offset + i) % n] for i in range(batch)]
        step += 1


def collate(pairs: list[tuple[list[int], list[int]]], pad: int):
    """Left-padded, so every answer ends the row: the vocabulary projection (262k words, most of a small model's
    work) is computed only for the last positions (``answer_loss``)."""
    import torch

    width = max(len(ids) for ids, _ in pairs)
    ids = torch.full((len(pairs), width), pad)
    labels = torch.full((len(pairs), width), -100)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    for i, (x, y) in enumerate(pairs):
        ids[i, width - len(x):] = torch.tensor(x)
        labels[i, width - len(y):] = torch.tensor(y)
        mask[i, width - len(x):] = 1
    return ids, labels, mask


def answer_loss(model, ids, labels, mask):
    """Mean cross-entropy of the answer tokens, with logits only for the positions that predict them."""
    import torch

    answered = labels != -100
    keep = int(answered.sum(1).max()) + 1
    position_ids = (mask.cumsum(1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, logits_to_keep=keep).logits
    predicted = logits[:, :-1].float()
    target = labels[:, -(keep - 1):]
    return torch.nn.functional.cross_entropy(predicted.reshape(-1, predicted.shape[-1]), target.reshape(-1),
                                             ignore_index=-100)


def heldout_loss(model, tokenizer, rows: list[dict], max_tokens: int, device: str = "cpu") -> float:
    import torch

    model.eval()
    total, count = 0.0, 0
    with torch.inference_mode():
        for i in range(0, len(rows), 4):
            ids, labels, mask = collate([encode(tokenizer, r, max_tokens) for r in rows[i:i + 4]], tokenizer.pad_token_id)
            n = int((labels != -100).sum())
            total += float(answer_loss(model, ids.to(device), labels.to(device), mask.to(device))) * n
            count += n
    model.train()
    return total / max(1, count)


def save_checkpoint(model, optimizer, step: int, out: Path) -> None:
    import torch

    tmp = out / "checkpoint.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    torch.save({"optimizer": optimizer.state_dict(), "step": step}, tmp / "trainer.pt")
    final = out / "checkpoint"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "out" / "reader-data")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "reader-lora")
    ap.add_argument("--model", default=None, help="a local model folder (default: the provisioned embedded LLM)")
    ap.add_argument("--steps", type=int, default=400, help="total optimiser steps (a resumed run stops here too)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--save-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-rows", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when torch sees a GPU)")
    args = ap.parse_args(argv)
    for name in ("steps", "batch", "rank", "max_tokens", "save_every", "eval_every"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be positive")

    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from app.platform.config import default_home
    from app.platform.models import EMBEDDED_LLM, resolve_model

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    train = load_rows(args.data / "train.jsonl")
    held = load_rows(args.data / "heldout.jsonl")[:args.eval_rows]
    folder = resolve_model(args.model or EMBEDDED_LLM, default_home(), "LLM", EMBEDDED_LLM, "config.json")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    base = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).to(args.device)
    base.config.use_cache = False
    args.out.mkdir(parents=True, exist_ok=True)
    checkpoint = args.out / "checkpoint"
    if (checkpoint / "trainer.pt").is_file():
        model = PeftModel.from_pretrained(base, str(checkpoint), is_trainable=True)
        state = torch.load(checkpoint / "trainer.pt", map_location=args.device)
        start = int(state["step"])
    else:
        model = get_peft_model(base, LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.05,
                                                target_modules=TARGET_MODULES, task_type="CAUSAL_LM"))
        state, start = None, 0
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
    warmup = max(1, args.steps // 20)

    def rate(step: int) -> float:  # linear warm-up, then cosine to 10%
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, args.steps - warmup)))

    log = (args.out / "loss.jsonl").open("a")
    if start == 0:  # the base model's held-out loss, what the adapter is measured against
        log.write(json.dumps({"step": 0, "heldout_loss": round(heldout_loss(model, tokenizer, held, args.max_tokens, args.device), 4)}) + "\n")
    model.train()
    started = time.perf_counter()
    with Progress(TextColumn("[bold]reader LoRA"), BarColumn(), TextColumn("{task.completed}/{task.total} {task.fields[loss]}"),
                  TimeElapsedColumn(), TimeRemainingColumn()) as progress:
        task = progress.add_task("train", total=args.steps, completed=start, loss="")
        for step, picked in batches(len(train), args.batch, args.seed, start):
            if step >= args.steps:
                break
            for group in optimizer.param_groups:
                group["lr"] = args.lr * rate(step)
            ids, labels, mask = collate([encode(tokenizer, train[i], args.max_tokens) for i in picked], tokenizer.pad_token_id)
            loss = answer_loss(model, ids.to(args.device), labels.to(args.device), mask.to(args.device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            entry = {"step": step + 1, "loss": round(loss.item(), 4), "lr": args.lr * rate(step),
                     "seconds": round(time.perf_counter() - started, 1)}
            if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
                entry["heldout_loss"] = round(heldout_loss(model, tokenizer, held, args.max_tokens, args.device), 4)
            log.write(json.dumps(entry) + "\n")
            log.flush()
            progress.update(task, advance=1, loss=f"loss {entry['loss']:.3f}")
            if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
                save_checkpoint(model, optimizer, step + 1, args.out)
    model.save_pretrained(str(args.out / "adapter"))
    print(json.dumps({"steps": args.steps, "out": str(args.out), "adapter": str(args.out / "adapter")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
