"""The quality-drift signal (issue 19): sampled decode steps are also read densely, after the answer; the user's
answer is neither touched nor held for it."""

from __future__ import annotations

import math

import pytest
import torch

from app.platform.config import KVSettings, LLMSettings
from app.llm.context import ContextLine, MeetingContext
from app.llm.drift import DriftMonitor, js_divergence
from app.llm.engine import LLMEngine

LINES = [
    ContextLine("audio", 0.5, 4.0, "Alice", "Good morning, this is our weekly meeting about the launch."),
    ContextLine("audio", 4.2, 9.0, "Bob", "The login page is finished and the payment page needs another week."),
    ContextLine("audio", 9.5, 13.0, "Carol", "We have spent thirty thousand dollars of the fifty thousand so far."),
    ContextLine("audio", 13.0, 18.0, "Alice", "Dave will send the new contract to the vendor by Friday afternoon."),
]
SUFFIX = "\nQuestion: Who will send the contract?\nAnswer:"


def _context(folder, top_k: int | None, rate: float, shadow: float = 0.0) -> MeetingContext:
    settings = LLMSettings(model=str(folder), dtype="float32", prompts="completion", max_context_tokens=1024)
    kv = KVSettings(enabled=True, compress=False, block_size=8, sink_tokens=4, recent_tokens=8,
                    decode_top_k_blocks=top_k, drift_sample_rate=rate, shadow_question_rate=shadow)
    engine = LLMEngine(folder, settings, kv)
    context = MeetingContext(engine, engine.kv, header=engine.live_prompts().header)
    for line in LINES:
        context.append(line)
    context.flush()
    return context


def test_js_divergence_is_zero_for_equal_distributions_and_bounded_by_ln2():
    a = torch.tensor([2.0, 0.5, -1.0, 0.0])
    assert js_divergence(a, a) == pytest.approx(0.0, abs=1e-7)
    assert js_divergence(a, a + 3.0) == pytest.approx(0.0, abs=1e-6)  # same softmax
    b = torch.tensor([-1.0, 0.0, 2.0, 0.5])
    assert js_divergence(a, b) == pytest.approx(js_divergence(b, a), rel=1e-6)
    assert js_divergence(a, b) > 0.05
    far = torch.tensor([50.0, -50.0]), torch.tensor([-50.0, 50.0])
    assert js_divergence(*far) == pytest.approx(math.log(2), rel=1e-4)


def test_the_monitor_samples_every_nth_step_and_reports_the_recent_window():
    monitor = DriftMonitor(sample_rate=0.25, window=2)
    assert [monitor.due() for _ in range(8)] == [True, False, False, False, True, False, False, False]
    assert monitor.report() == {"quality_drift_js": None, "shadow_top1_agreement": None, "drift_samples": 0,
                                "drift_skipped": 0}
    same = torch.tensor([1.0, 0.0])
    monitor.record(same, same)
    monitor.record(same, torch.tensor([0.0, 1.0]))
    monitor.record(same, torch.tensor([0.0, 3.0]))
    report = monitor.report()
    assert report["drift_samples"] == 3 and report["shadow_top1_agreement"] == 0.0  # the first left the window
    assert report["quality_drift_js"] > 0.05
    assert not any(DriftMonitor(sample_rate=0.0).due() for _ in range(5))


def test_sampled_dense_reads_leave_the_answer_and_the_cache_bit_identical(tiny_llm_dir):
    plain = _context(tiny_llm_dir, top_k=2, rate=0.0)
    watched = _context(tiny_llm_dir, top_k=2, rate=1.0)
    before = plain.next_token_logits(SUFFIX)
    assert torch.equal(before, watched.next_token_logits(SUFFIX))
    a = plain.generate(SUFFIX, max_new_tokens=6, stop=())
    b = watched.generate(SUFFIX, max_new_tokens=6, stop=())
    assert (a.text, a.mean_logprob, a.new_tokens) == (b.text, b.mean_logprob, b.new_tokens)
    assert torch.equal(plain.next_token_logits(SUFFIX), watched.next_token_logits(SUFFIX))
    assert watched.shadow.wait(60)
    assert plain.stats()["drift_samples"] == 0 and plain.stats()["quality_drift_js"] is None
    if a.new_tokens > 1:  # a decode rate once an answer has more than its first token
        assert plain.stats()["decode_tokens_per_second"] > 0
    stats = watched.stats()
    assert stats["drift_samples"] == b.new_tokens + (b.new_tokens < 6)  # every step, the one that ended it too
    # reading 2 of the past blocks (plus sinks and the recent window) moves the distribution; a dense read
    # with top-k off would not
    assert 0 < stats["quality_drift_js"] <= math.log(2) and 0 <= stats["shadow_top1_agreement"] <= 1


def test_the_answer_is_returned_before_its_steps_are_compared(tiny_llm_dir):
    """The dense reads run after the answer, in the background: while the context is busy (its lock held here, as a
    prefill would) the answer is back and nothing is compared yet; the live loop's chunked flush gives way to the
    comparison; a comparison whose meeting moved on is skipped and counted."""
    watched = _context(tiny_llm_dir, top_k=2, rate=1.0)
    with watched._lock:
        answer = watched.generate(SUFFIX, max_new_tokens=4, stop=())
        assert answer.text is not None and watched.drift.samples == 0 and watched.shadow.running()
        watched.append(ContextLine("audio", 20.0, 22.0, "Bob", "One more thing: the vendor called back."))
        assert watched.flush(min_tokens=1) == 0 and watched.pending_lines == 1  # waits its turn
    assert watched.shadow.wait(60)
    assert watched.drift.samples == answer.new_tokens + (answer.new_tokens < 4) and watched.drift.skipped == 0
    with watched._lock:  # now the meeting moves on before the comparison can run
        again = watched.generate(SUFFIX, max_new_tokens=4, stop=())
        watched.append(ContextLine("audio", 22.0, 24.0, "Carol", "They want the contract signed by Monday."))
        assert watched.flush() > 0  # a full flush (before a question, at a checkpoint) does not wait
    assert watched.shadow.wait(60)
    assert watched.drift.skipped == again.new_tokens + (again.new_tokens < 4)
    watched.close()


def test_without_a_sparse_read_there_is_nothing_to_measure(tiny_llm_dir):
    context = _context(tiny_llm_dir, top_k=None, rate=1.0)
    context.generate(SUFFIX, max_new_tokens=3, stop=())
    assert context.stats()["drift_samples"] == 0 and context.stats()["quality_drift_js"] is None


def _shadowed_answer_changes_nothing(plain: MeetingContext, shadowed: MeetingContext) -> dict:
    """The same question on a context without and with the shadow: same answer, same cache; the shadow's report."""
    a = plain.generate(SUFFIX, max_new_tokens=6, stop=())
    b = shadowed.generate(SUFFIX, max_new_tokens=6, stop=())
    assert shadowed.shadow.wait(60)
    assert (a.text, a.mean_logprob) == (b.text, b.mean_logprob)
    assert torch.equal(plain.next_token_logits(SUFFIX), shadowed.next_token_logits(SUFFIX))  # the cache as it was
    return shadowed.stats()


def test_a_shadowed_question_is_compared_afterwards_and_changes_nothing(tiny_llm_dir):
    plain, shadowed = _context(tiny_llm_dir, 2, 0.0, shadow=0.0), _context(tiny_llm_dir, 2, 0.0, shadow=1.0)
    report = _shadowed_answer_changes_nothing(plain, shadowed)
    assert report["shadow_questions"] == 1 and report["shadow_skipped"] == 0
    assert 0 < report["shadow_answer_js"] <= math.log(2) and report["shadow_answer_agreement"] in (0.0, 1.0)
    assert plain.stats()["shadow_questions"] == 0 and plain.stats()["shadow_answer_js"] is None
    # the meeting moves on (a line prefilled) before the shadow runs: skipped, not compared with another prefix
    with shadowed._lock:
        shadowed.generate(SUFFIX, max_new_tokens=3, stop=())
        shadowed.append(ContextLine("audio", 20.0, 22.0, "Bob", "One more thing: the vendor called back."))
        shadowed.flush()
    assert shadowed.shadow.wait(60)
    assert shadowed.stats()["shadow_questions"] == 1 and shadowed.stats()["shadow_skipped"] == 1
    shadowed.close()


def _compressed_context(folder, tmp_path, shadow: float) -> MeetingContext:
    from kvstore.cold import ColdTier
    from kvstore.placement import PlacementPolicy, Tier, TierPlacement
    from kvstore.tier_guards import WatermarkController
    from kvstore.stores.memory import MemoryStore

    settings = LLMSettings(model=str(folder), dtype="float32", prompts="completion", max_context_tokens=1024)
    kv = KVSettings(enabled=True, compress=True, budget_ratio=0.3, budget_floor_tokens=0, block_size=8,
                    sink_tokens=4, recent_tokens=8, warm_kinds=("int2",), drift_sample_rate=0.0,
                    shadow_question_rate=shadow, shadow_exact=True)
    engine = LLMEngine(folder, settings, kv)
    tiers = {Tier.DEVICE: MemoryStore("cpu", tier="device"), Tier.HOST: MemoryStore("cpu", tier="host")}
    placement = TierPlacement(tiers, f"m{shadow}", WatermarkController(1 << 20), PlacementPolicy())
    cold = ColdTier(placement, recall_top_k=2, exact_copies=True)
    context = MeetingContext(engine, engine.kv, header=engine.live_prompts().header, cold_tier=cold)
    for line in LINES:
        context.append(line)
    context.flush()
    return context


def test_the_shadow_reads_the_uncompressed_meeting_from_its_exact_copies_and_changes_nothing(tiny_llm_dir, tmp_path):
    """With exact copies kept, a shadowed answer is also compared with the meeting read at full precision (every
    quantized block from its copy, evicted ones recalled): the compression's drift, not only the sparse read's."""
    plain, shadowed = _compressed_context(tiny_llm_dir, tmp_path, 0.0), _compressed_context(tiny_llm_dir, tmp_path, 1.0)
    assert any(int(f) != 0 for layer in shadowed.cache.tiered_layers for f in layer.table.format), "quantized"
    report = _shadowed_answer_changes_nothing(plain, shadowed)
    assert report["shadow_questions"] == 1 and report["shadow_answer_js"] is None  # no sparse read: no resident pass
    assert 0 < report["shadow_exact_js"] <= math.log(2) and report["shadow_exact_agreement"] is not None
    # the reference is the full-precision meeting: an uncompressed cache over the same lines gives the same logits
    full = _context(tiny_llm_dir, None, 0.0)
    cold = shadowed.cache.cold_tier

    def counted():  # the cold tier's counts and placement (the transfer speed is a timing)
        cold.wait()
        return {k: v for k, v in cold.stats().items() if k != "transfer_gbps"}

    before = counted()
    exact = shadowed.comparer.dense_answer(shadowed._encode(SUFFIX), [], [0], shadowed.tokens, exact=True)
    assert torch.allclose(exact[0], full.next_token_logits(SUFFIX), atol=1e-4)
    # ...and the cold tier is as it was: the shadow's reads count as no decode reads (hit rate, so the fallback
    # mode) and stage nothing
    assert counted() == before
    for context in (plain, shadowed, full):
        context.close()
