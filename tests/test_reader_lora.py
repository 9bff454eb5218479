"""bench/reader_lora.py and bench/reader_data.py: the reader fine-tune learns only the answer, resumes where it
stopped, and its examples keep the answer inside what the reader sees (tiny random Gemma 3, tiny data)."""

from __future__ import annotations

import json

import pytest

from bench.reader_data import _cut, _first_sentences, meeqa_lines, split_by_meeting
from bench.reader_lora import answer_loss, batches, collate, encode, main


def _data(folder, n: int) -> None:
    folder.mkdir()
    rows = [{"source": "t", "meeting": f"m{i % 3}", "context": f"Alice: the pilot costs {i} dollars.\nBob: fine.",
             "question": "How much does the pilot cost?", "answer": f"{i} dollars."} for i in range(n)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))


def test_only_the_answer_is_learnt_and_a_long_context_is_cut(tiny_llm_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_llm_dir))
    row = {"context": "Alice: " + "words " * 400, "question": "What?", "answer": "Nothing."}
    ids, labels = encode(tokenizer, row, max_tokens=96)
    assert len(ids) <= 96 and len(ids) == len(labels)
    learnt = [t for t in labels if t != -100]
    assert learnt[-1] == tokenizer.eos_token_id and tokenizer.decode(learnt[:-1]).strip() == "Nothing."
    assert tokenizer.decode(ids).rstrip().endswith("Question: What?\nAnswer: Nothing.<eos>")


def test_the_answer_loss_equals_the_full_loss_over_answer_tokens(tiny_llm_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_llm_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llm_dir), dtype=torch.float32).eval()
    rows = [{"context": "Alice: yes.", "question": "Who?", "answer": "Alice."},
            {"context": "Bob: the budget is fine, we keep it.", "question": "What about the budget?", "answer": "Kept."}]
    pairs = [encode(tokenizer, r, 128) for r in rows]
    ids, labels, mask = collate(pairs, tokenizer.pad_token_id)
    with torch.inference_mode():
        fast = float(answer_loss(model, ids, labels, mask))
        # the reference: each row alone, unpadded, with the model's own loss over its labels
        losses, counts = [], []
        for x, y in pairs:
            out = model(input_ids=torch.tensor([x]), labels=torch.tensor([y]))
            n = sum(1 for t in y[1:] if t != -100)
            losses.append(float(out.loss) * n)
            counts.append(n)
    assert fast == pytest.approx(sum(losses) / sum(counts), rel=1e-4)


def test_batches_resume_in_the_same_order():
    whole = [b for _, b in zip(range(7), batches(10, 4, seed=1, start_step=0))]
    resumed = [b for _, b in zip(range(4), batches(10, 4, seed=1, start_step=3))]
    assert resumed == whole[3:]


def test_training_resumes_from_its_checkpoint(tiny_llm_dir, tmp_path):
    _data(tmp_path / "data", 12)
    out = tmp_path / "run"
    common = ["--data", str(tmp_path / "data"), "--out", str(out), "--model", str(tiny_llm_dir), "--batch", "2",
              "--save-every", "1", "--eval-every", "2", "--eval-rows", "2", "--max-tokens", "64"]
    assert main(common + ["--steps", "2"]) == 0
    assert main(common + ["--steps", "4"]) == 0  # goes on from step 2
    log = [json.loads(line) for line in (out / "loss.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [0, 1, 2, 3, 4]  # step 0: the base model's held-out loss, once
    assert all("heldout_loss" in log[i] for i in (0, 2, 4)) and "loss" not in log[0]
    assert (out / "adapter" / "adapter_config.json").is_file()
    import torch

    assert torch.load(out / "checkpoint" / "trainer.pt")["step"] == 4


def test_bad_settings_and_missing_data_are_one_line(tmp_path):
    with pytest.raises(SystemExit, match="must be positive"):
        main(["--steps", "0"])
    with pytest.raises(SystemExit, match="no training data"):
        main(["--data", str(tmp_path), "--out", str(tmp_path / "o"), "--steps", "1"])


def test_examples_keep_whole_lines_and_brief_answers():
    assert meeqa_lines("& SPEAKER_0: how much is it? & SPEAKER_1: . & SPEAKER_1: ten euros") == [
        "SPEAKER_0: how much is it?", "SPEAKER_1: ten euros"]
    assert _cut(["a b c", "d e", "f g h"], 5) == "a b c\nd e"
    assert _cut(["a b c", "d e", "f g h"], 5, keep_end=True) == "d e\nf g h"
    assert _first_sentences("One two. Three four five. Six.", words=5) == "One two. Three four five."
    rows = [{"source": "s", "meeting": f"m{i}"} for i in range(40)]
    train, held = split_by_meeting(rows, 0.1, 0)
    assert len(held) == 4 and not {r["meeting"] for r in held} & {r["meeting"] for r in train}


def test_the_engine_merges_a_trained_adapter_and_refuses_a_wrong_one(tiny_llm_dir, tmp_path):
    import torch

    from app.platform.config import LLMSettings
    from app.llm.engine import LLMEngine
    from encoders.errors import InputError

    _data(tmp_path / "data", 6)
    assert main(["--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--model", str(tiny_llm_dir),
                 "--batch", "2", "--steps", "2", "--eval-every", "2", "--eval-rows", "2", "--max-tokens", "64",
                 "--lr", "0.05"]) == 0
    plain = LLMEngine(tiny_llm_dir, LLMSettings(model=str(tiny_llm_dir), dtype="float32"))
    tuned = LLMEngine(tiny_llm_dir, LLMSettings(model=str(tiny_llm_dir), dtype="float32", adapter=str(tmp_path / "run" / "adapter")))
    ids = plain.tokenizer("Meeting transcript:\nAlice: hi", return_tensors="pt").input_ids
    with torch.inference_mode():
        assert not torch.allclose(plain.model(ids).logits, tuned.model(ids).logits)
    assert not any("lora" in name for name, _ in tuned.model.named_parameters())  # merged, an ordinary model
    with pytest.raises(InputError, match="no LoRA adapter"):
        LLMEngine(tiny_llm_dir, LLMSettings(model=str(tiny_llm_dir), adapter=str(tmp_path)))
