"""The training loop the project's LoRA adapters share (bench/ranker_train.py, cross_ranker_train.py,
span_reader_train.py): AdamW with a short warm-up and a linear decay, gradient clipping, a checkpoint every few
steps that a later run resumes from, a held-out figure logged at each checkpoint, and shipping the adapter into
app/weights without this machine's paths. Each script keeps only what is its own: its data and its loss."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

WARMUP_STEPS = 30
# Where a LoRA goes in MiniLM when a new head reads its output (cross-ranker, span reader): every attention and
# feed-forward projection.
HEAD_LORA_TARGETS = ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense")


def saved_step(checkpoint: Path) -> int | None:
    """The step a checkpoint was saved at; None when there is none to resume."""
    state = checkpoint / "state.json"
    return json.loads(state.read_text())["step"] if state.is_file() else None


def train(model, step_loss: Callable[[int], "object"], *, label: str, steps: int, start: int, lr: float,
          checkpoint: Path, log_path: Path, every: int, heldout: Callable[[], dict]) -> None:
    """Train ``model``'s trainable parameters from step ``start`` to ``steps``: ``step_loss(step)`` is the loss of
    one step's batch. Every ``every`` steps (and at the end) the adapter and the optimizer are saved in
    ``checkpoint`` and ``heldout()`` (run with the model in eval mode) is logged to ``log_path``."""
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    if start and (checkpoint / "optimizer.pt").is_file():
        optimizer.load_state_dict(torch.load(checkpoint / "optimizer.pt"))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / WARMUP_STEPS) * max(0.05, 1 - s / max(1, steps)), last_epoch=start - 1)
    model.train()
    started = time.perf_counter()
    step = start
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[loss]}")) as bar:
        task = bar.add_task("train", total=steps, completed=step, loss="")
        while step < steps:
            loss = step_loss(step)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            bar.update(task, completed=step, loss=f"loss {loss.item():.3f}")
            if step % every == 0 or step == steps:
                checkpoint.mkdir(parents=True, exist_ok=True)
                model.save_pretrained(str(checkpoint))
                torch.save(optimizer.state_dict(), checkpoint / "optimizer.pt")
                (checkpoint / "state.json").write_text(json.dumps({"step": step}))
                model.eval()
                with torch.inference_mode():
                    held = heldout()
                model.train()
                with log_path.open("a") as f:
                    f.write(json.dumps({"step": step, "loss": round(loss.item(), 4), **held,
                                        "seconds": round(time.perf_counter() - started, 1)}) + "\n")


def ship(model, dest: Path) -> None:
    """Save the adapter (and its trained head) into ``dest``, naming the public base model, not this machine's copy."""
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(dest))
    for extra in ("optimizer.pt", "state.json", "README.md"):
        (dest / extra).unlink(missing_ok=True)
    config = json.loads((dest / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "sentence-transformers/all-MiniLM-L6-v2"
    (dest / "adapter_config.json").write_text(json.dumps(config, indent=2))
    print(f"adapter shipped to {dest}")
