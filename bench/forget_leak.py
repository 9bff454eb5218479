"""Why a forget rebuilds the meeting: shredding only a speaker's own KV entries leaves what they said in the others'.

    .venv/bin/python bench/forget_leak.py bench/out/suite-eval2 --limit 40 [--out bench/out/forget-leak]

A transformer's key and value at a position are computed from the hidden state there, which every layer above the
first mixes with the positions before it. So the K/V rows of lines said *after* a speaker's line carry some of it,
and deleting (crypto-shredding) only the rows that speaker's tokens wrote (what per-source block tags would allow)
may not remove it. This bench measures that on the same needles as bench/forget.py (an amount, metric or date only
one speaker says), with the model alone reading the KV (greedy decoding after "Question: ... Answer:", no
transcript, no retrieval), dense attention, the configured LLM (Gemma 3 270M by default), three ways:

- ``full``: the whole meeting's KV;
- ``shredded``: the same KV with every row the forgotten speaker's lines wrote masked out of attention (token
  granularity, the best case for tag-and-shred: a block holds other speakers' tokens too);
- ``rebuilt``: the KV of the meeting prefilled again without that speaker's lines (what app/live/forget.py does).

Needles of the forgotten speaker answered under ``shredded`` but not ``rebuilt`` are what leaked through the other
speakers' rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.forget import needles  # noqa: E402  (same needles, same choice of speaker)

ANSWER_TOKENS = 24


class Reader:
    """The model alone on a dense cache: prefill a meeting once, then answer questions with parts of it masked."""

    def __init__(self, engine) -> None:
        self.engine = engine
        tokenizer = engine.tokenizer
        header = engine.live_prompts().header
        bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None and not header.startswith(
            str(tokenizer.bos_token)) else []
        self.header = bos + self._encode(header)
        self.newline = self._encode("\n")

    def _encode(self, text: str) -> list[int]:
        return self.engine.tokenizer(text, add_special_tokens=False).input_ids

    def meeting(self, turns: list[dict]) -> tuple[list[int], list[str]]:
        """Token ids of the header and the lines as the app renders them, and the speaker of each token."""
        from app.llm.context import ContextLine

        ids, owner = list(self.header), [""] * len(self.header)
        for turn in turns:
            line = self._encode(ContextLine("audio", turn["start"], turn["end"], turn["speaker"], turn["text"]).render())
            ids += line
            owner += [turn["speaker"]] * len(line)
        return ids, owner

    def prefill(self, ids: list[int]):
        import torch
        from transformers import DynamicCache

        cache = DynamicCache(config=self.engine.model.config)
        with torch.inference_mode():
            self.engine.model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
        return cache

    def answer(self, cache, length: int, question: str, hidden: list[bool] | None = None) -> str:
        """Greedy answer after the cache's ``length`` tokens, positions flagged in ``hidden`` unseen; decoded on a
        copy (sliding-window layers cannot be cropped back)."""
        import copy

        import torch

        cache = copy.deepcopy(cache)

        keep = [0 if h else 1 for h in (hidden or [False] * length)]
        feed = self._encode(f"\nQuestion: {question}\nAnswer:")
        out: list[int] = []
        with torch.inference_mode():
            for _ in range(ANSWER_TOKENS):
                keep += [1] * len(feed)
                logits = self.engine.model(input_ids=torch.tensor([feed]), past_key_values=cache, use_cache=True,
                                           attention_mask=torch.tensor([keep], dtype=torch.long)).logits
                token = int(logits[0, -1].argmax())
                if token == self.engine.tokenizer.eos_token_id or token in self.newline:
                    break
                out.append(token)
                feed = [token]
        return self.engine.tokenizer.decode(out, skip_special_tokens=True)

    def answer_nll(self, cache, length: int, question: str, answer: str, hidden: list[bool] | None = None) -> float:
        """Mean negative log-likelihood of the true ``answer``'s tokens after the question (teacher-forced): how
        much of the answer the KV still holds, even where greedy decoding misses it."""
        import copy

        import torch

        prompt = self._encode(f"\nQuestion: {question}\nAnswer:")
        target = self._encode(f" {answer}")
        keep = [0 if h else 1 for h in (hidden or [False] * length)] + [1] * (len(prompt) + len(target))
        with torch.inference_mode():
            logits = self.engine.model(input_ids=torch.tensor([prompt + target]), past_key_values=copy.deepcopy(cache),
                                       use_cache=True, attention_mask=torch.tensor([keep], dtype=torch.long)).logits
        logp = torch.log_softmax(logits[0, len(prompt) - 1:-1].float(), dim=-1)
        return float(-logp[torch.arange(len(target)), torch.tensor(target)].mean())


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from app.platform.config import load_settings
    from app.llm.engine import LLMEngine
    from bench.suites.score import keywords_match

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", type=Path, help="a folder of generated meetings (bench/suites/meetings.py)")
    ap.add_argument("--limit", type=int, default=40)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "forget-leak")
    args = ap.parse_args(argv)
    if args.limit < 1:
        ap.error("--limit must be at least 1")
    folders = sorted(p.parent for p in args.suite.glob("*/facts.json"))[: args.limit]
    if not folders:
        ap.error(f"no generated meetings under {args.suite}")
    settings = load_settings(overrides={"kv": {"enabled": False}})
    engine = LLMEngine.from_settings(settings.llm, settings.home, settings.kv)
    reader = Reader(engine)
    rows, started = [], time.perf_counter()
    with Progress(console=Console(stderr=True)) as progress:
        task = progress.add_task("meetings", total=len(folders))
        for folder in folders:
            turns, found = needles(folder)
            if found:
                counts: dict[str, int] = {}
                for n in found:
                    counts[n["speaker"]] = counts.get(n["speaker"], 0) + 1
                target = max(counts, key=lambda s: (counts[s], s))
                ids, owner = reader.meeting(turns)
                full = reader.prefill(ids)
                hidden = [who == target for who in owner]
                kept_ids, _ = reader.meeting([t for t in turns if t["speaker"] != target])
                rebuilt = reader.prefill(kept_ids)
                for n in found:
                    arms = {"full": reader.answer(full, len(ids), n["question"]),
                            "shredded": reader.answer(full, len(ids), n["question"], hidden),
                            "rebuilt": reader.answer(rebuilt, len(kept_ids), n["question"])}
                    nll = {"full": reader.answer_nll(full, len(ids), n["question"], n["answer"]),
                           "shredded": reader.answer_nll(full, len(ids), n["question"], n["answer"], hidden),
                           "rebuilt": reader.answer_nll(rebuilt, len(kept_ids), n["question"], n["answer"])}
                    rows.append({"meeting": folder.name, "forgotten": n["speaker"] == target,
                                 "question": n["question"], "keywords": n["keywords"], "answers": arms, "nll": nll,
                                 **{arm: keywords_match(text, n["keywords"]) for arm, text in arms.items()},
                                 "tokens": len(ids), "tokens_hidden": sum(hidden)})
            progress.advance(task)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "forget_leak.json").write_text(json.dumps(rows, indent=1))
    print(f"`python bench/forget_leak.py {args.suite} --limit {args.limit}` -- {len(folders)} meetings, "
          f"{len(rows)} needles, {settings.llm.model or 'gemma-3-270m'}, {time.perf_counter() - started:.0f} s\n")
    print("| needles of | needles | answered: full KV | forgotten rows masked (tag and shred) | rebuilt without them "
          "| answer NLL: full | masked | rebuilt |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, group in (("the forgotten speaker", [r for r in rows if r["forgotten"]]),
                         ("the other speakers", [r for r in rows if not r["forgotten"]])):
        n = len(group) or 1
        cells = " | ".join(f"{sum(r[arm] for r in group) / n:.0%} ({sum(r[arm] for r in group)})"
                           for arm in ("full", "shredded", "rebuilt"))
        nlls = " | ".join(f"{sum(r['nll'][arm] for r in group) / n:.2f}" for arm in ("full", "shredded", "rebuilt"))
        print(f"| {label} | {len(group)} | {cells} | {nlls} |")
    gone = [r for r in rows if r["forgotten"]]
    if gone:
        full, masked, rebuilt = (sum(r["nll"][arm] for r in gone) / len(gone) for arm in ("full", "shredded", "rebuilt"))
        if rebuilt > full:
            print(f"\nof what the forgotten speaker's lines add to the answer's likelihood, the masked KV keeps "
                  f"{(rebuilt - masked) / (rebuilt - full):.0%}")
    leaked = [r for r in rows if r["forgotten"] and r["shredded"] and not r["rebuilt"]]
    print(f"\nforgotten needles answered with the rows masked but not after the rebuild: {len(leaked)}")
    for r in leaked[:10]:
        print(f"- {r['meeting']}: {r['question']} -> {r['answers']['shredded']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
