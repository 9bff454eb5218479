"""MeetingContext on a tiny random Gemma 3: incremental prefill of lines is exact, questions roll back.

The live session prefills committed lines in packed chunks as they arrive; with compression off the
next-token logits must equal those of the same text prefilled in one forward pass, and asking must
leave the cache exactly as it was.
"""

from __future__ import annotations

import pytest
import torch

from app.platform.config import KVSettings, LLMSettings
from app.llm.context import ContextLine, MeetingContext
from app.llm.engine import LLMEngine
from encoders.errors import InputError

LINES = [
    ContextLine("audio", 0.5, 4.0, "Alice", "Good morning, this is our weekly meeting."),
    ContextLine("audio", 4.2, 9.0, "Bob", "The login page is finished and the payment page needs a week."),
    ContextLine("video", 9.5, 9.5, None, "Budget; Spent so far: $30,000; Total: $50,000", slide_change=True),
    ContextLine("audio", 13.0, 18.0, "Carol", "We have spent thirty thousand dollars so far.", speaker_change=True),
]


def _engine(folder, enabled: bool) -> LLMEngine:
    settings = LLMSettings(model=str(folder), dtype="float32", prompts="completion", max_context_tokens=1024)
    return LLMEngine(folder, settings, KVSettings(enabled=enabled, compress=False))


@pytest.mark.parametrize("tiered", [True, False], ids=["tiered", "dynamic"])
def test_incremental_prefill_equals_one_pass_and_rolls_back(tiny_llm_dir, tiered):
    engine = _engine(tiny_llm_dir, tiered)
    header = engine.live_prompts().header
    context = MeetingContext(engine, engine.kv, header=header, prefill_chunk_tokens=16)
    placed = []
    context.on_placed(placed.append)
    for line in LINES[:2]:
        context.append(line)
    assert context.flush(min_tokens=10_000) == 0  # below the chunk size: waits for more
    context.flush(max_chunk_tokens=8)  # several forwards of packed lines
    for line in LINES[2:]:
        context.append(line)
    context.flush()
    assert [p.line for p in placed] == LINES and context.lines == 4
    assert all(a.token_end == b.token_start for a, b in zip(placed, placed[1:]))

    suffix = "\nQuestion: How much was spent?\nAnswer:"
    incremental = context.next_token_logits(suffix)

    text = header + "".join(line.render() for line in LINES)
    ids = [engine.tokenizer.bos_token_id] + [
        i for piece in [header] + [line.render() for line in LINES] for i in engine.tokenizer(piece, add_special_tokens=False).input_ids
    ] + engine.tokenizer(suffix, add_special_tokens=False).input_ids
    assert context.tokens == len(ids) - len(engine.tokenizer(suffix, add_special_tokens=False).input_ids)
    with torch.inference_mode():
        one_pass = engine.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    assert (incremental - one_pass).abs().max().item() <= 1e-5, text

    before = context.tokens
    generation = context.generate(suffix, max_new_tokens=5, stop=("\n",))
    assert generation.new_tokens <= 5 and generation.time_to_first_token <= generation.total_seconds
    assert context.tokens == before == context.cache.get_seq_length()  # the question left nothing behind
    assert torch.allclose(context.next_token_logits(suffix), incremental, atol=1e-6)
    stats = context.stats()
    assert stats["tokens"] == before and stats["kv_bytes"] > 0
    if tiered:
        assert set(stats["bytes_by_modality"]) >= {"audio", "text"}


def test_numbers_and_names_in_lines_are_marked_for_the_structural_bonus(tiny_llm_dir):
    from kvstore.annotations import TokenFlag

    engine = _engine(tiny_llm_dir, True)
    context = MeetingContext(engine, engine.kv, header="Meeting transcript:\n")
    placed = []
    context.on_placed(placed.append)
    context.append(ContextLine("audio", 0.0, 3.0, "Alice", "the access code is 4821, ask Marta Lopez."))
    context.append(ContextLine("audio", 3.0, 6.0, "Bob", "fine, thanks."))
    context.flush()
    flags = context.cache.annotations.flags
    entity = [i for i in range(int(flags.numel())) if int(flags[i]) & int(TokenFlag.ENTITY)]
    first, second = placed
    assert entity and all(first.token_start <= i < first.token_end for i in entity)
    marked = engine.tokenizer.decode([engine.tokenizer(first.line.render(), add_special_tokens=False).input_ids[i - first.token_start]
                                      for i in entity])
    assert "4821" in marked.replace(" ", "") and "Marta" in marked and "Lopez" in marked
    assert "Alice" not in marked  # the speaker label is not an entity
    # the batch path marks the same kind of tokens in its prompt
    assert engine.entity_positions("Notes: the code is 4821.")


def test_a_question_that_does_not_fit_is_refused(tiny_llm_dir):
    engine = _engine(tiny_llm_dir, True)
    context = MeetingContext(engine, engine.kv, header="Meeting transcript:\n")
    with pytest.raises(InputError, match="fills the model's context"):
        context.generate("x " * 10, max_new_tokens=5000)
    assert context.tokens == context.cache.get_seq_length()


def test_a_long_meeting_evicts_to_the_cold_tier_and_a_question_recalls_its_lines(tiny_llm_dir, tmp_path):
    from kvstore.cold import ColdTier
    from kvstore.placement import PlacementPolicy, Tier, TierPlacement
    from kvstore.tier_guards import WatermarkController
    from kvstore.stores.disk import DiskStore
    from kvstore.stores.memory import MemoryStore

    settings = LLMSettings(model=str(tiny_llm_dir), dtype="float32", prompts="completion", max_context_tokens=4096)
    kv = KVSettings(compress=True, budget_ratio=0.25, block_size=8, budget_floor_tokens=0, recent_tokens=16,
                    warm_kinds=("int4",))
    engine = LLMEngine(tiny_llm_dir, settings, kv)
    tiers = {Tier.DEVICE: MemoryStore(tier="device"), Tier.HOST: MemoryStore(tier="host"),
             Tier.DISK: DiskStore(tmp_path / "cold")}
    cold = ColdTier(TierPlacement(tiers, "m.cold", WatermarkController(1 << 20), PlacementPolicy(host_bytes=4096)))
    context = MeetingContext(engine, engine.kv, header=engine.live_prompts().header, cold_tier=cold)
    placed = []
    context.on_placed(placed.append)
    for minute in range(12):
        for line in LINES:
            context.append(ContextLine(line.modality, line.start + 60 * minute, line.end + 60 * minute, line.speaker,
                                       f"{line.text} (item {minute})"))
        context.flush()
    stats = context.stats()
    assert stats["bytes_by_tier"]["cold_host"] > 0 and stats["bytes_by_tier"]["cold_disk"] > 0
    suffix = "\nQuestion: What was said at the start?\nAnswer:"
    before = context.next_token_logits(suffix)
    first = placed[1]  # an early line: long evicted under a 25% budget
    assert context.cache.block_residency(torch.arange(first.token_start // 8, first.token_end // 8 + 1)).cold > 0
    context.generate(suffix, max_new_tokens=3, focus=[(first.token_start, first.token_end)])
    assert cold.counts.recalled > 0
    assert torch.allclose(context.next_token_logits(suffix), before, atol=1e-6), "the answer left the cache as it was"
    freed = context.compact()  # what the session does once input is idle
    assert freed >= 0 and context.cache.reserved_bytes(False) == context.cache.kv_bytes(False)
    context.close()
    assert not cold.placement.blocks and not list((tmp_path / "cold").rglob("*.blk"))


def _long_meeting(engine, kv, cold, minutes: int) -> MeetingContext:
    """A live context over ``cold`` fed ``minutes`` of the lines (enough to evict under the budget)."""
    context = MeetingContext(engine, kv, header=engine.live_prompts().header, cold_tier=cold)
    for minute in range(minutes):
        for line in LINES:
            context.append(ContextLine(line.modality, line.start + 60 * minute, line.end + 60 * minute,
                                       line.speaker, f"{line.text} (item {minute})"))
        context.flush()
    return context


def test_the_runtime_spills_cold_blocks_to_an_encrypted_segment_log_removed_with_the_meeting(tiny_llm_dir, tmp_path):
    from app.platform.audit import verify
    from app.platform.config import load_settings
    from app.live.runtime import Runtime

    settings = load_settings(overrides={
        "home": str(tmp_path), "llm": {"model": str(tiny_llm_dir), "dtype": "float32", "max_context_tokens": 4096},
        "kv": {"block_size": 8, "budget_floor_tokens": 0, "recent_tokens": 16, "warm_kinds": ["int8", "int4"],
               "cold": {"host_mib": 0}}})
    runtime = Runtime(settings)
    try:
        cold = runtime.cold_tier("m1")
        assert not (tmp_path / "cold").exists() and not (tmp_path / "audit.log").exists(), "opened on first spill only"
        engine = runtime.engine
        context = _long_meeting(engine, settings.kv, cold, minutes=8)
        assert cold.placement.tier_bytes()["disk"] > 0 and cold.placement.tier_bytes()["host"] == 0
        segments = list((tmp_path / "cold").glob("m1.*/seg-*.log"))  # <session>.<pid>
        assert segments and b"MKVB" not in b"".join(p.read_bytes() for p in segments), "blocks are encrypted"
        before = context.next_token_logits("\nQuestion: What was said first?\nAnswer:")
        context.generate("\nQuestion: What was said first?\nAnswer:", max_new_tokens=2, focus=[(0, 64)])
        assert cold.counts.recalled > 0
        assert torch.allclose(context.next_token_logits("\nQuestion: What was said first?\nAnswer:"), before, atol=1e-6)
        context.close()
        assert not list((tmp_path / "cold").glob("m1.*")), "the meeting's cold log is removed with it"
        runtime.session_store().put("m2", "b0", b"still logged")  # the shared audit log outlives the meeting
        assert "m2" in (tmp_path / "audit.log").read_text()
        from app.platform.store import load_master_key

        key = load_master_key(settings, create_key=False).audit_key()
        assert verify(tmp_path / "audit.log", key).ok and "write" in (tmp_path / "audit.log").read_text()
        assert verify(tmp_path / "audit.log", key).keyed > 0  # keyed by default
    finally:
        runtime.close()


@pytest.mark.parametrize("encrypt", [True, False], ids=["sealed", "plain"])
def test_the_runtime_seals_cold_blocks_in_host_memory_unless_configured_off(tiny_llm_dir, tmp_path, encrypt):
    from app.platform.config import load_settings
    from app.live.runtime import Runtime
    from kvstore.placement import Tier

    settings = load_settings(overrides={
        "home": str(tmp_path), "llm": {"model": str(tiny_llm_dir), "dtype": "float32", "max_context_tokens": 4096},
        "kv": {"block_size": 8, "budget_floor_tokens": 0, "recent_tokens": 16, "warm_kinds": ["int8", "int4"],
               "cold": {"spill_to_store": False, "encrypt_host": encrypt}}})
    runtime = Runtime(settings)
    try:
        cold = runtime.cold_tier("m1", source="mic")
        assert not (tmp_path / "master.key").exists(), "the key is loaded on the first eviction, not before"
        engine = runtime.engine
        context = _long_meeting(engine, settings.kv, cold, minutes=6)
        placement = cold.placement
        assert placement.tier_bytes()["host"] > 0
        host = placement.tiers[Tier.HOST]
        slab_store = host._store._inner.inner if encrypt else host  # LazyStore > AuditedStore > EncryptedStore
        slab = b"".join(c.tensor.numpy().tobytes() for cls in slab_store._classes.values() for c in cls.chunks)
        block_id = next(iter(placement.blocks))
        patterns = [t.contiguous().view(torch.uint8).numpy().tobytes()[:48] for t in cold.fetch(block_id).values()]
        assert (not any(p in slab for p in patterns)) if encrypt else all(p in slab for p in patterns)
        assert (tmp_path / "master.key").exists() is encrypt, "with encryption off, nothing changes"
        question = "\nQuestion: What was said first?\nAnswer:"
        before = context.next_token_logits(question)
        context.generate(question, max_new_tokens=2, focus=[(0, 64)])
        assert cold.counts.recalled > 1
        assert torch.allclose(context.next_token_logits(question), before, atol=1e-6)
        if encrypt:  # the meeting's source crypto-shredded in host memory: its key and blocks are gone
            assert cold.shred("mic") > 0 and not placement.blocks and host.sources("m1.cold") == []
        context.close()
        if encrypt:  # every host-tier write, read and the shred are in the keyed audit log, ids batched
            import json

            from app.platform.audit import verify
            from app.platform.store import HOST_AUDIT_BATCH, load_master_key

            log = tmp_path / "audit.log"
            assert verify(log, load_master_key(settings, create_key=False).audit_key()).ok
            records = [json.loads(line) for line in log.read_text().splitlines()]
            host_records = [r for r in records if r.get("details", {}).get("tier") == "host"]
            written = {b for r in host_records if r["op"] == "write" for b in r["blocks"]}
            read = {b for r in host_records if r["op"] == "read" for b in r["blocks"]}
            assert len(written) >= cold.counts.evicted > 0 and read and read <= written
            assert all(r["source"] == "mic" for r in host_records if r["op"] == "write")
            assert all(len(r["blocks"]) <= HOST_AUDIT_BATCH for r in host_records)
            assert len(host_records) < len(written) / 4  # batched: not a record per block
            assert any(r["op"] == "delete" and r.get("details", {}).get("shredded") for r in records)
        else:
            assert not (tmp_path / "audit.log").exists()
    finally:
        runtime.close()
