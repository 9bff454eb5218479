"""app/llm/repetition.py (issue 49): no generation path repeats a phrase of its own answer; quoting the prompt is fine."""

from __future__ import annotations

from app.llm.repetition import NGRAM, banned_tokens


def _repeats(ids, n=NGRAM) -> bool:
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) != len(set(grams))


def test_the_token_that_would_repeat_a_phrase_is_banned():
    said = [5, 6, 7, 8, 9, 5, 6, 7]
    assert banned_tokens(said) == {8}  # "5 6 7" again: "8" would repeat "5 6 7 8"
    assert banned_tokens([1, 2, 3]) == set() and banned_tokens([]) == set()


def test_the_live_path_never_loops(session_parts):
    """A live meeting's KV answering with the tiny random Gemma 3 (it loops when let): 60 tokens, no 4-gram twice."""
    runtime, meeting = session_parts
    session = runtime.new_session("loops")
    for start in range(0, len(meeting.audio), 8000):
        session.feed_audio(meeting.audio[start:start + 8000], 16000)
    session.finish(timeout=120)
    assert session.wait_until_prefilled(timeout=60)
    generation = session._context.generate("\nQuestion: What was said?\nAnswer:", 60, stop=())
    assert generation.new_tokens >= 20 and not _repeats(list(generation.token_ids)), generation


def test_the_batch_path_never_loops(tiny_llm_dir):
    from app.platform.config import load_settings
    from app.llm.engine import LLMEngine

    settings = load_settings(overrides={"llm": {"model": str(tiny_llm_dir)}})
    engine = LLMEngine.from_settings(settings.llm, settings.home, settings.kv)
    prompt = "Alice: the pilot costs twelve thousand dollars. Bob: the one that was on the list. " * 3 + "\nSummary:"
    completion = engine.complete(prompt, max_new_tokens=60)
    ids = engine.tokenizer(completion.text, add_special_tokens=False).input_ids
    assert completion.new_tokens >= 20 and not _repeats(ids, NGRAM + 2), completion.text  # re-tokenized: a little slack
