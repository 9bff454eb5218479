"""Personal data in a meeting (issue 18): found by the real detector (spaCy's en_core_web_sm NER,
libphonenumber, Luhn), masked in what the CLI writes, and kept out of the LLM's cache under ``zero-in-kv``."""

from __future__ import annotations

import json

import pytest
import torch

from app.platform.config import KVSettings, LLMSettings, PIISettings, load_settings
from app.llm.context import ContextLine, MeetingContext
from app.llm.engine import LLMEngine
from app.text.pii import KINDS, SpacyPIIDetector, cut_text, detector_for, mask_text, mask_transcript
from app.text.transcript import Transcript, TranscriptWord, Turn
from encoders.errors import InputError
from kvstore.layers import TieredLayer

SAID = ("Thanks, Priya Raman will send the contract to dana.whitfield@example.org tonight; "
        "if it bounces call her on (415) 555-0132. The deposit goes on card 4539 1488 0343 6467, "
        "not 4539 1488 0343 6468, and the budget for 2025 stays at 48,000 dollars.")


@pytest.fixture(scope="module")
def detector() -> SpacyPIIDetector:
    return SpacyPIIDetector(KINDS)


def _found(text: str, spans) -> list[tuple[str, str]]:
    return [(s.kind, text[s.start:s.end]) for s in spans]


def test_the_detector_finds_email_phone_card_and_person_in_real_text(detector) -> None:
    assert _found(SAID, detector.find(SAID)) == [
        ("person", "Priya Raman"), ("email", "dana.whitfield@example.org"), ("phone", "(415) 555-0132"),
        ("card", "4539 1488 0343 6467")]  # the second number fails the Luhn check; years and amounts stay
    assert mask_text(SAID, detector.find(SAID)).startswith("Thanks, [PERSON] will send the contract to [EMAIL] "
                                                           "tonight; if it bounces call her on [PHONE].")
    assert _found("Call +44 20 7946 0958 or mail ops@acme.io.", detector.find("Call +44 20 7946 0958 or mail ops@acme.io.")) \
        == [("phone", "+44 20 7946 0958"), ("email", "ops@acme.io")]


@pytest.mark.parametrize("said, address", [("Write to Maria at Gmail.com, she answers fast.", "Maria at Gmail.com"),
                                            ("It's maria dot lopez at gmail dot com.", "maria dot lopez at gmail dot com")])
def test_an_address_said_aloud_is_found(detector, said, address) -> None:
    """Issue 49 F4: the recogniser writes a spoken address with "at" and "dot"; it was left in clear."""
    assert ("email", address) in _found(said, detector.find(said))


@pytest.mark.parametrize("said", ["We met at noon.", "He is at acme.co.uk now.", "Look at version two."])
def test_at_a_place_is_no_address(detector, said) -> None:
    assert not detector.find(said)


def test_names_are_only_found_when_asked_for() -> None:
    kinds = [s.kind for s in SpacyPIIDetector().find(SAID)]  # the default kinds
    assert kinds == ["email", "phone", "card"]


def test_a_missing_spacy_model_is_one_clear_line(monkeypatch) -> None:
    import app.text.pii

    monkeypatch.setattr(app.text.pii, "SPACY_MODEL", "en_core_web_sm_not_installed")
    with pytest.raises(InputError) as info:
        SpacyPIIDetector(["person"])
    assert "\n" not in str(info.value) and "en_core_web_sm_not_installed" in str(info.value)
    SpacyPIIDetector(["email", "phone"])  # the other kinds do not need the model


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InputError, match="invalid setting pii.policy"):
        load_settings(overrides={"pii": {"policy": "zero"}})
    with pytest.raises(InputError, match="unknown PII kind"):
        SpacyPIIDetector(["passport"])
    assert detector_for(PIISettings(policy="off")) is None


def test_masked_transcripts_keep_times_and_the_words_around(detector) -> None:
    text = "Mail dana.whitfield@example.org or call 415 555 0132, thanks."
    words = [TranscriptWord(w, i, i + 0.5, "Bob") for i, w in enumerate(text.split())]
    masked = mask_transcript(Transcript([Turn("Bob", text, 0.0, 9.0, words)], source="m"), detector)
    turn = masked.turns[0]
    assert turn.text == "Mail [EMAIL] or call [PHONE], thanks."
    assert [(w.text, w.start, w.end) for w in turn.words] == [
        ("Mail", 0, 0.5), ("[EMAIL]", 1, 1.5), ("or", 2, 2.5), ("call", 3, 3.5), ("[PHONE],", 4, 6.5),
        ("thanks.", 7, 7.5)]


def _summarize(tmp_path, monkeypatch, tiny_llm_dir, policy: str) -> str:
    from app.cli import summarize

    meeting = tmp_path / "meeting.txt"
    meeting.write_text("Alice: Please send the signed contract to dana.whitfield@example.org before Friday.\n"
                       "Bob: I will send the contract to dana.whitfield@example.org tomorrow.\n"
                       "Alice: If anything is missing call me on 415-555-0132 and we fix it.\n")
    monkeypatch.setenv("MINUTIA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MINUTIA_PII__POLICY", policy)
    monkeypatch.setenv("MINUTIA_LLM__DTYPE", "float32")  # the random model's words do not matter here:
    monkeypatch.setenv("MINUTIA_LLM__MAX_NEW_TOKENS", "4")  # the summary's quotes of the meeting do
    out = tmp_path / policy
    summarize(meeting, out_dir=out, llm=str(tiny_llm_dir))
    return (out / "meeting.summary.json").read_text() + (out / "meeting.summary.md").read_text()


def test_exports_are_masked_under_mask_in_exports_and_unchanged_when_off(tmp_path, monkeypatch, tiny_llm_dir) -> None:
    plain = _summarize(tmp_path, monkeypatch, tiny_llm_dir, "off")
    assert "dana.whitfield@example.org" in plain  # the extractive parts quote the meeting
    masked = _summarize(tmp_path, monkeypatch, tiny_llm_dir, "mask-in-exports")
    assert "dana.whitfield@example.org" not in masked and "555-0132" not in masked
    assert "[EMAIL]" in masked
    json.loads(masked[: masked.index("\n}\n") + 2])  # still valid JSON


LINE = ContextLine("audio", 1.0, 5.0, "Alice", "The payment page needs a week, mail dana@example.org about it.")


def _context(tiny_llm_dir, erase, line: ContextLine = LINE, kv: KVSettings | None = None) -> MeetingContext:
    engine = LLMEngine(tiny_llm_dir, LLMSettings(model=str(tiny_llm_dir), dtype="float32", max_context_tokens=1024),
                       kv or KVSettings(compress=False))
    context = MeetingContext(engine, engine.kv, header="Meeting transcript:\n", erase_pii=erase)
    context.append(ContextLine("audio", 0.0, 1.0, "Bob", "Good morning."))
    context.append(line)
    context.flush()
    return context


def _all_rows(cache) -> list[torch.Tensor]:
    rows = []
    for layer in cache.layers:
        keys, values = layer.dense_kv() if isinstance(layer, TieredLayer) else (layer.keys, layer.values)
        rows += [keys, values]
    return rows


def _placed(context: MeetingContext) -> list:
    placed = []
    context.on_placed(placed.append)
    return placed


def test_zero_in_kv_keeps_personal_data_out_of_the_cache(tiny_llm_dir, detector) -> None:
    """The cache holds exactly what a meeting in which the address was never said holds: same length,
    same K/V, same next-token logits; the timeline's line shows the mask."""
    erased = _context(tiny_llm_dir, detector)
    said = "The payment page needs a week, mail about it."
    never = _context(tiny_llm_dir, None, line=ContextLine("audio", 1.0, 5.0, "Alice", said))
    assert cut_text(LINE.text, detector.find(LINE.text)) == said
    assert erased.tokens == never.tokens == erased.cache.get_seq_length()
    for mine, theirs in zip(_all_rows(erased.cache), _all_rows(never.cache)):
        assert torch.equal(mine, theirs)
    question = "\nQuestion: What is the address?\nAnswer:"
    assert erased.generate(question, max_new_tokens=3).text == never.generate(question, max_new_tokens=3).text
    kept = _context(tiny_llm_dir, None)  # the policy off: the address is read
    assert kept.tokens > erased.tokens


def test_the_timeline_shows_where_personal_data_was_left_out(tiny_llm_dir, detector) -> None:
    engine = LLMEngine(tiny_llm_dir, LLMSettings(model=str(tiny_llm_dir), dtype="float32"), KVSettings(compress=False))
    context = MeetingContext(engine, engine.kv, header="Meeting transcript:\n", erase_pii=detector)
    placed = _placed(context)
    context.append(LINE)
    context.flush()
    assert [p.line.text for p in placed] == ["The payment page needs a week, mail [EMAIL] about it."]


def test_zero_in_kv_works_without_the_tiered_cache(tiny_llm_dir, detector) -> None:
    """Nothing is zeroed in place, so a plain DynamicCache (kv.enabled: false) keeps the data out too."""
    plain = KVSettings(enabled=False)
    erased = _context(tiny_llm_dir, detector, kv=plain)
    said = ContextLine("audio", 1.0, 5.0, "Alice", "The payment page needs a week, mail about it.")
    never = _context(tiny_llm_dir, None, line=said, kv=plain)
    assert erased.tokens == never.tokens < _context(tiny_llm_dir, None, kv=plain).tokens
    for mine, theirs in zip(_all_rows(erased.cache), _all_rows(never.cache)):
        assert torch.equal(mine, theirs)


def _ask_json(tmp_path, monkeypatch, capsys, tiny_llm_dir, policy: str) -> str:
    from app.cli import ask

    meeting = tmp_path / "ask.txt"
    meeting.write_text("Alice: The release is on Friday.\n"
                       "Bob: If anything is missing call me on 415-555-0132 and we fix it.\n")
    monkeypatch.setenv("MINUTIA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MINUTIA_PII__POLICY", policy)
    monkeypatch.setenv("MINUTIA_LLM__DTYPE", "float32")
    monkeypatch.setenv("MINUTIA_LLM__MAX_NEW_TOKENS", "4")
    capsys.readouterr()
    ask(meeting, "What number do we call if anything is missing?", llm=str(tiny_llm_dir), as_json=True)
    return capsys.readouterr().out


def test_zero_in_kv_keeps_personal_data_out_of_batch_answers(tmp_path, monkeypatch, capsys, tiny_llm_dir) -> None:
    """The batch path has no cache to zero: under zero-in-kv the model reads, and answers from, the masked
    transcript, so an answer can no more give the number than the live KV can."""
    assert "555-0132" in _ask_json(tmp_path, monkeypatch, capsys, tiny_llm_dir, "off")
    erased = _ask_json(tmp_path, monkeypatch, capsys, tiny_llm_dir, "zero-in-kv")
    assert "555-0132" not in erased and "[PHONE]" in erased, erased


def test_zero_in_kv_keeps_personal_data_out_of_live_answers_and_summaries(scripted_runtime, tmp_path) -> None:
    """A live session's answers read the transcript as well as the KV: under zero-in-kv they read it masked."""
    from tests.scripted_parts import scripted_meeting

    meeting = scripted_meeting([("SPEAKER_00", "Good morning.")])
    said = [Turn("Alice", "The release is on Friday.", 0.0, 2.0),
            Turn("Bob", "Mail the contract to dana.whitfield@example.org before noon.", 2.5, 6.0)]
    for policy, leaks in (("mask-in-exports", True), ("zero-in-kv", False)):
        runtime = scripted_runtime(meeting, tmp_path / policy, pii={"policy": policy})
        try:
            session = runtime.new_session("pii")
            session.add_transcript(Transcript(said))
            session.finish(timeout=120)
            answer = session.ask("Where should the contract be mailed?")
            shown = answer.text + " ".join(c.text for c in answer.citations)
            summary = json.dumps(session.summary().to_dict())
            assert ("dana.whitfield@example.org" in shown) is leaks, (policy, shown)
            if not leaks:
                assert "[EMAIL]" in shown and "dana.whitfield" not in summary
        finally:
            runtime.close()


def test_a_meeting_saved_under_zero_in_kv_keeps_to_it_when_resumed_without_the_config(scripted_runtime, tmp_path) -> None:
    """Issue 49 F4: resumed without --config, a zero-in-kv meeting answered with the phone number in clear."""
    from tests.scripted_parts import scripted_meeting

    meeting = scripted_meeting([("SPEAKER_00", "Good morning.")])
    said = [Turn("Alice", "The release is on Friday.", 0.0, 2.0),
            Turn("Bob", "Mail the contract to dana.whitfield@example.org before noon.", 2.5, 6.0)]
    saving = scripted_runtime(meeting, tmp_path, pii={"policy": "zero-in-kv"})
    try:
        session = saving.new_session("kept-private")
        session.add_transcript(Transcript(said))
        session.finish(timeout=120)
        session.save()
    finally:
        saving.close()
    resuming = scripted_runtime(meeting, tmp_path)  # the default policy: mask-in-exports
    try:
        resumed = resuming.resume_session("kept-private")
        assert resumed.settings.pii.policy == "zero-in-kv"
        answer = resumed.ask("Where should the contract be mailed?")
        shown = answer.text + " ".join(c.text for c in answer.citations)
        assert "dana.whitfield" not in shown and "[EMAIL]" in shown, shown
    finally:
        resuming.close()
