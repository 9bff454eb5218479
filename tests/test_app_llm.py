"""The LLM engine and the assistant on a tiny random Gemma 3 (conftest.tiny_llm_dir): the plumbing, not the
quality. Context splitting (map-reduce), limits, stop strings and errors behave the same on any model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.answering.actions import extract_action_items, extract_decisions
from app.llm.assistant import Assistant, render_turns
from app.platform.config import KVSettings, LLMSettings
from app.llm.engine import LLMEngine, load_prompts, native_dtype
from app.platform.models import EMBEDDED_LLM, resolve_model
from app.text.transcript import Transcript, load_transcript
from encoders.errors import InputError

STANDUP = Path(__file__).resolve().parent.parent / "samples" / "standup"


def _settings(folder: Path, **extra) -> LLMSettings:
    extra = {"max_context_tokens": 512, "dtype": "float32", **extra}
    return LLMSettings(model=str(folder), prompts="completion", **extra)


def _engine(folder: Path, kv: bool = False, **extra) -> LLMEngine:
    """The app-layer logic under test does not depend on the KV cache; transformers' DynamicCache is the
    fastest on CPU. ``test_tiered_kv_cache_matches_dynamic_cache`` covers the default (tiered) cache."""
    return LLMEngine(folder, _settings(folder, **extra), KVSettings(enabled=kv))


@pytest.fixture(scope="module")
def engine(tiny_llm_dir) -> LLMEngine:
    return _engine(tiny_llm_dir)


@pytest.fixture(scope="module")
def whole_engine(tiny_llm_dir) -> LLMEngine:
    """Reads the whole transcript (map-reduce) instead of the most relevant turns."""
    return _engine(tiny_llm_dir, answer_context_turns=None, max_new_tokens=32)


@pytest.fixture(scope="module")
def standup() -> Transcript:
    return load_transcript(STANDUP / "reference.json")


@pytest.fixture(scope="module")
def long_meeting(standup) -> Transcript:
    """The stand-up twice over: about 900 tokens, far more than the 512-token context."""
    return Transcript(turns=standup.turns * 2, source="long", duration=None)


# ----------------------------------------------------------------------------------------- engine


def test_engine_loads_local_folder(engine, tiny_llm_dir):
    assert engine.context_tokens == 512  # min(max_context_tokens, the model's 1024 positions)
    assert engine.prompts.style == "completion"
    assert engine.count_tokens("The pilot will cost twelve thousand dollars.") > 3
    assert LLMEngine.from_settings(_settings(tiny_llm_dir), Path("/nonexistent-home")).context_tokens == 512


def test_auto_dtype_is_bfloat16_only_where_the_processor_computes_it(tiny_llm_dir, monkeypatch):
    """bfloat16 on an AVX2-only CPU is emulated (5x slower here): auto takes float32 there, bfloat16 with AVX512-BF16
    or AMX, and the engine loads the model in what it picks."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert native_dtype("flags : fpu sse2 avx avx2 fma") == "float32"
    assert native_dtype("flags : avx2 avx512f avx512_bf16 amx_tile") == "bfloat16"
    assert native_dtype("flags : avx2 amx_bf16 amx_tile") == "bfloat16"
    picked = LLMEngine(tiny_llm_dir, _settings(tiny_llm_dir, dtype="auto"), KVSettings(enabled=False))
    assert picked.model.dtype == getattr(torch, native_dtype())


def test_complete_returns_text_within_max_new_tokens(engine):
    c = engine.complete("Meeting transcript:\nAlice: Bob, can you start?\nQuestion: Who starts?\nAnswer:", max_new_tokens=6)
    assert isinstance(c.text, str) and c.text
    assert 1 <= c.new_tokens <= 6
    assert c.prompt_tokens >= engine.count_tokens("Meeting transcript:")
    assert c.mean_logprob < 0.0
    longer = engine.complete("Meeting transcript:\nAlice: Bob, can you start?\nQuestion: Who starts?\nAnswer:", max_new_tokens=12)
    assert c.new_tokens < longer.new_tokens <= 12
    assert longer.text.startswith(c.text[:3])  # greedy: the same start


def test_complete_stops_at_stop_string(engine):
    prompt = "The pilot will cost"
    full = engine.complete(prompt, max_new_tokens=16)
    words = full.text.split()
    stop = next((w for i, w in enumerate(words) if i > 0 and w not in " ".join(words[:i])), None)
    assert stop is not None, f"the tiny model repeated itself: {full.text!r}"
    stopped = engine.complete(prompt, max_new_tokens=16, stop=(stop,))
    assert stop not in stopped.text
    assert stopped.text == full.text.split(stop)[0].strip()
    assert stopped.new_tokens < full.new_tokens  # generation ended at the stop string, not after


def test_prompt_longer_than_context_is_input_error(engine):
    prompt = "The pilot will cost twelve thousand dollars. " * 80
    assert engine.count_tokens(prompt) > engine.context_tokens
    with pytest.raises(InputError, match="context"):
        engine.complete(prompt)
    # Fits alone, but not with the tokens to generate.
    near = "pilot " * (engine.context_tokens - 20)
    assert engine.count_tokens(near) < engine.context_tokens
    with pytest.raises(InputError, match="does not fit"):
        engine.complete(near, max_new_tokens=40)


def test_tiered_kv_cache_matches_dynamic_cache(engine, tiny_llm_dir):
    """The default engine (minutia's tiered KV cache) decodes a prompt shorter than its recent window
    exactly like transformers' DynamicCache."""
    tiered = LLMEngine(tiny_llm_dir, _settings(tiny_llm_dir))
    assert tiered.kv.enabled and not engine.kv.enabled
    prompt = "Meeting transcript:\n" + (STANDUP / "reference.txt").read_text()[:300] + "\nThe meeting was about"
    assert tiered.count_tokens(prompt) < tiered.kv.recent_tokens
    a, b = engine.complete(prompt, max_new_tokens=12), tiered.complete(prompt, max_new_tokens=12)
    assert (a.text, a.new_tokens) == (b.text, b.new_tokens)
    assert a.mean_logprob == pytest.approx(b.mean_logprob, abs=1e-4)


def test_chat_prompts_need_a_chat_template(tiny_llm_dir):
    with pytest.raises(InputError, match="chat template"):
        LLMEngine(tiny_llm_dir, LLMSettings(model=str(tiny_llm_dir), dtype="float32", prompts="chat"))


def test_prompt_sets_load():
    for name in ("completion", "chat"):
        prompts = load_prompts(name)
        assert "{transcript}" in prompts.answer and "{question}" in prompts.answer
        assert "{transcript}" in prompts.summary and "{transcript}" in prompts.summary_reduce
        assert prompts.not_found
    with pytest.raises(InputError, match="not found"):
        load_prompts("no-such-prompts")


def test_bad_prompt_files_are_input_errors(tmp_path):
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(InputError, match="mapping"):
        load_prompts(str(listing))
    broken = tmp_path / "broken.yaml"
    broken.write_text("answer: [unclosed\n")
    with pytest.raises(InputError, match="YAML"):
        load_prompts(str(broken))


# ----------------------------------------------------------------------------------------- ask


def test_ask_whole_transcript_map_reduce(whole_engine, long_meeting):
    """A free-form question is put to the model; without answer_context_turns it reads the whole transcript,
    in parts past the context. The tiny random model's words are not in the meeting, so the best sentence stands."""
    budget_check = whole_engine.count_tokens(render_turns(long_meeting.turns))
    assert budget_check > whole_engine.context_tokens
    answer = Assistant(whole_engine).ask(long_meeting, "What problem did the payment company cause?")
    assert answer.parts > 1
    assert answer.question == "What problem did the payment company cause?"
    assert "contract" in answer.text
    assert 0.0 <= answer.confidence <= 1.0
    for c in answer.citations:
        assert 0 <= c.turn_index < len(long_meeting.turns)
        assert c.text in long_meeting.turns[c.turn_index].text
    json.dumps(answer.to_dict())


def test_ask_amount_is_grounded(engine, standup):
    answer = Assistant(engine).ask(standup, "  How much   will the pilot cost? ")
    assert answer.parts == 1 and answer.kind == "how_much"
    assert answer.question == "How much will the pilot cost?"
    assert answer.text == "Twelve thousand dollars"
    assert answer.citations
    for c in answer.citations:
        turn = standup.turns[c.turn_index]
        assert (c.speaker, c.start) == (turn.speaker, turn.start) and c.text in turn.text
        assert c.label.startswith("[00:")
    data = answer.to_dict()
    assert data["citations"][0]["label"] == answer.citations[0].label


def test_sentence_retrieval_finds_the_matching_one(standup):
    from app.answering.retrieval import SentenceIndex
    from app.text.sentences import split_sentences

    index = SentenceIndex(split_sentences(standup))
    best = index.sentences[index.search("How much will the pilot cost?", 3)[0].index]
    assert best.text == "The pilot will cost twelve thousand dollars." and best.turn_index == 5


@pytest.mark.parametrize("question", ["", "   \n\t "])
def test_empty_question(engine, standup, question):
    with pytest.raises(InputError, match="empty"):
        Assistant(engine).ask(standup, question)


def test_overlong_question(engine, standup):
    with pytest.raises(InputError, match="question is"):
        Assistant(engine).ask(standup, "What did they say about the pilot budget? " * 30)


def test_batch_and_live_refuse_a_question_by_one_rule(engine, standup):
    from app.answering.questions import MAX_QUESTION_CHARS, checked_question

    assert checked_question("  Who   pays?\n") == "Who pays?"
    too_long = "Who pays? " * (MAX_QUESTION_CHARS // 10 + 1)
    for question, said in (("  \n ", "the question is empty"), (too_long, f"keep it under {MAX_QUESTION_CHARS}")):
        with pytest.raises(InputError, match=said):
            checked_question(question)
        with pytest.raises(InputError, match=said):
            Assistant(engine).ask(standup, question)


# ----------------------------------------------------------------------------------------- summarize


def test_summarize_long_transcript_map_reduce(whole_engine, long_meeting):
    summary = Assistant(whole_engine).summarize(long_meeting)
    assert summary.parts > 1
    assert summary.summary.startswith("The meeting was about")
    assert summary.action_items == extract_action_items(long_meeting)
    assert [(a.owner, a.due) for a in summary.action_items] == [
        ("Bob", "Thursday, March sixth"), ("Carol", "Friday, March seventh"), ("Alice", "Wednesday, March twelfth")
    ]
    assert len(extract_decisions(long_meeting)) == 4 and len(summary.decisions) == 2  # each said twice, listed once
    assert any("pilot will cost" in f.text for f in summary.key_facts)
    json.dumps(summary.to_dict())


def test_summarize_short_transcript_one_part(engine, standup):
    summary = Assistant(engine).summarize(Transcript(turns=standup.turns[:4], source="short"))
    assert summary.parts == 1
    assert summary.summary.startswith("The meeting was about")


# A merge pass at this size holds 186 tokens of notes: 62-token notes fit in pairs; 118-token notes
# fit only alone (the rounds used to repeat forever); 195-token notes do not fit at all (the reduce
# used to fail with "turn 1 alone ... is longer than the model's context budget").
@pytest.mark.parametrize("repeat", [6, 14, 25])
def test_reduce_long_notes_terminates(tiny_llm_dir, repeat):
    """Part notes of any length merge into one summary, every round merging at least two notes."""
    engine = _engine(tiny_llm_dir, answer_context_turns=None, max_context_tokens=256, max_new_tokens=40)
    assistant = Assistant(engine)
    calls = []
    real = assistant._complete_summary

    def counted(body: str) -> str:
        calls.append(body)
        assert len(calls) <= 8, "the merge rounds make no progress"
        return real(body)

    assistant._complete_summary = counted
    notes = ["The meeting was about " + "the pilot budget and the payment company " * repeat] * 5
    merged = assistant._reduce(notes)
    assert merged.startswith("The meeting was about")
    assert len(calls) <= 6  # 5 notes -> 3 -> 2 -> 1


def test_turn_longer_than_context_is_input_error(whole_engine):
    huge = Transcript(turns=load_transcript(STANDUP / "reference.json").turns[:1])
    huge.turns[0].text = "The pilot will cost twelve thousand dollars. " * 80
    with pytest.raises(InputError, match="longer than the model's context"):
        Assistant(whole_engine).summarize(huge)


# ----------------------------------------------------------------------------------------- resolve_model


def test_resolve_model_errors(tmp_path, tiny_llm_dir):
    home = tmp_path / "home"
    with pytest.raises(InputError, match="minutia models"):
        resolve_model(EMBEDDED_LLM, home, "LLM", EMBEDDED_LLM, "config.json")
    with pytest.raises(InputError, match="folder"):
        resolve_model("no-such-model", home, "LLM", EMBEDDED_LLM, "config.json")
    with pytest.raises(InputError, match="folder"):
        resolve_model("nobody/no-such-model-xyz", home, "LLM", EMBEDDED_LLM, "config.json")
    empty = tmp_path / "empty-model"
    empty.mkdir()
    with pytest.raises(InputError, match="no config.json"):
        resolve_model(str(empty), home, "LLM", EMBEDDED_LLM, "config.json")
    assert resolve_model(str(tiny_llm_dir), home, "LLM", EMBEDDED_LLM, "config.json") == tiny_llm_dir


def test_half_provisioned_embedded_model_is_not_used(tmp_path):
    folder = tmp_path / "models" / EMBEDDED_LLM
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # no completion marker: an interrupted provisioning
    with pytest.raises(InputError, match="minutia models"):
        resolve_model(EMBEDDED_LLM, tmp_path, "LLM", EMBEDDED_LLM, "config.json")


def test_unloadable_model_folder_is_input_error(tmp_path, tiny_llm_dir):
    folder = tmp_path / "weights-missing"
    folder.mkdir()
    shutil.copy(tiny_llm_dir / "config.json", folder / "config.json")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_llm_dir / name, folder / name)
    with pytest.raises(InputError, match="cannot load the LLM"):
        LLMEngine(folder, _settings(folder))
