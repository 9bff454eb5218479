"""kvstore.quant (quantizer dataclasses + registry) and kvstore.scoring (scorers + budget planner)."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.reference import element_step
from kvstore.annotations import EntityFinder, TokenAnnotations, TokenFlag, tokens_in_spans
from kvstore.quant import QUANTIZERS, Fp8Quantizer, Int4Quantizer, Int8Quantizer, get_quantizer
from kvstore.scoring import (
    DROP,
    AccumulatedAttentionScorer,
    BlockScoringInputs,
    CombinedScorer,
    PositionScorer,
    QueryAwareScorer,
    ScoreWeights,
    StructuralBonusScorer,
    TierOption,
    budget_from_ratio,
    fewest_drops,
    min_max_normalize,
    plan_tiers,
)

FAST = settings(max_examples=25, deadline=None)

# ------------------------------------------------------------------------------------------------
# Quantizers
# ------------------------------------------------------------------------------------------------


def test_registry_knows_the_three_formats() -> None:
    assert set(QUANTIZERS) >= {"int8", "int4", "fp8"}
    q = get_quantizer("int4", group_size=16, axis=1)
    assert isinstance(q, Int4Quantizer) and q.group_size == 16 and q.axis == 1
    with pytest.raises(KeyError):
        get_quantizer("int3")


@pytest.mark.parametrize("cls", [Int8Quantizer, Int4Quantizer, Fp8Quantizer])
def test_quantizer_roundtrip_keys_and_values(cls) -> None:
    torch.manual_seed(0)
    block = torch.randn(3, 64, 2, 16, dtype=torch.bfloat16)  # [n, block, heads, head_dim]
    for quantizer in (cls(group_size=32).for_keys(token_axis=1), cls(group_size=32).for_values()):
        qt = quantizer.quantize(block)
        restored = quantizer.dequantize(qt)
        assert restored.shape == block.shape and restored.dtype == block.dtype
        assert qt.nbytes() < block.numel() * block.element_size()
        err = (restored.float() - block.float()).abs()
        if cls.kind == "fp8":
            assert (err <= 2**-4 * block.float().abs() + element_step(qt) + 1e-2).all()
        else:
            # half a step from quantization + the bf16 rounding (2^-9 relative) of the result
            step = element_step(qt)
            assert (err <= step / 2 + 2**-8 * (block.float().abs() + step) + 1e-6).all()


def test_group_size_falls_back_to_a_divisor() -> None:
    q = Int8Quantizer(group_size=32).for_values()
    qt = q.quantize(torch.randn(2, 8, 1, 16))  # head_dim 16 < 32
    assert qt.group_size == 16


def test_fp8_native_support_is_false_on_cpu() -> None:
    assert not Fp8Quantizer.natively_supported("cpu")


# ------------------------------------------------------------------------------------------------
# Scorers
# ------------------------------------------------------------------------------------------------


def _inputs(n: int = 6, k: int = 2, d: int = 8, seed: int = 0, **overrides) -> BlockScoringInputs:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(n, 16, k, d, generator=gen)
    base = dict(
        block_start=torch.arange(n) * 16,
        block_len=torch.full((n,), 16),
        seq_len=n * 16,
        attention_mass=torch.rand(n, k, generator=gen),
        observations=torch.full((n, k), 4.0),
        key_min=keys.amin(1),
        key_max=keys.amax(1),
        queries=torch.randn(k, 3, d, generator=gen),
        scale=d**-0.5,
        flags=torch.zeros(n, dtype=torch.long),
    )
    base.update(overrides)
    return BlockScoringInputs(**base)


def test_accumulated_scorer_divides_by_observations() -> None:
    inputs = _inputs(attention_mass=torch.tensor([[2.0], [2.0]]), observations=torch.tensor([4.0, 1.0]),
                     block_start=torch.tensor([0, 16]), block_len=torch.tensor([16, 16]), seq_len=32)
    assert AccumulatedAttentionScorer().score(inputs).flatten().tolist() == [0.5, 2.0]
    assert AccumulatedAttentionScorer(per_observation=False).score(inputs).flatten().tolist() == [2.0, 2.0]


def test_query_aware_scorer_prefers_the_block_aligned_with_the_query() -> None:
    d = 8
    q = torch.zeros(1, 1, d)
    q[0, 0, 3] = 4.0
    key_min = torch.zeros(3, 1, d)
    key_max = torch.zeros(3, 1, d)
    key_max[1, 0, 3] = 5.0  # block 1 has a key pointing along the query
    key_min[2, 0, 3] = -5.0  # block 2 only points away
    inputs = _inputs(n=3, k=1, d=d, queries=q, key_min=key_min, key_max=key_max)
    s = QueryAwareScorer().score(inputs).flatten()
    assert s.argmax().item() == 1 and s[1].item() == pytest.approx(1.0)
    assert s[0] > s[2] - 1e-6


def test_position_scorer_protects_sinks_and_recent_window() -> None:
    inputs = _inputs(n=8, k=1)
    scorer = PositionScorer(sink_tokens=4, recent_tokens=32)
    assert scorer.protected(inputs).tolist() == [True, False, False, False, False, False, True, True]
    s = scorer.score(inputs).flatten()
    assert s[0] == 1 and s[-1] == 1 and 0 < s[1] < s[5] < 1


def test_entity_finder_marks_numbers_and_names_not_labels_or_sentence_starts() -> None:
    finder = EntityFinder()
    text = ("Project Manager: So the budget is 24,500 euros. Ask Maria Lopez about the XML parser.\n"
            "Marketing: Smart idea, we need smart remotes by March 3. OK, Yeah.")
    found = [text[a:b] for a, b in finder.find(text)]
    assert found == ["24,500", "Maria", "Lopez", "XML", "March", "3"]
    # "Smart" is known in lower case now; "Maria" stays a name
    later = "Then Smart Maria said code 4821."
    assert [later[a:b] for a, b in finder.find(later)] == ["Maria", "4821"]


def test_tokens_in_spans_maps_characters_to_tokens() -> None:
    offsets = [(0, 0), (0, 4), (4, 8), (8, 8), (9, 12), (12, 15)]  # a special token, words, an empty piece
    assert tokens_in_spans(offsets, [(5, 6), (10, 13)]) == [2, 4, 5]
    assert tokens_in_spans(offsets, []) == []


def test_structural_bonus_from_annotations() -> None:
    notes = TokenAnnotations()
    notes.mark([17], TokenFlag.TURN_START | TokenFlag.SPEAKER_CHANGE)
    notes.mark(torch.tensor([40, 41]), TokenFlag.ENTITY)
    notes.mark([90], TokenFlag.TIMESTAMP)
    flags = notes.block_flags(torch.arange(6), 16)
    assert flags.tolist() == [0, int(TokenFlag.TURN_START | TokenFlag.SPEAKER_CHANGE), int(TokenFlag.ENTITY), 0, 0,
                              int(TokenFlag.TIMESTAMP)]
    bonus = StructuralBonusScorer(rarity=False).score(_inputs(n=6, k=1, flags=flags)).flatten()
    assert bonus.tolist() == [0.0, 1.0, 1.0, 0.0, 0.0, 0.5]  # a turn start alone earns nothing
    # rarity: each flag is on 1 of 6 blocks, so it keeps 5/6 of its weight; a flag on every block, none
    bonus = StructuralBonusScorer().score(_inputs(n=6, k=1, flags=flags)).flatten()
    torch.testing.assert_close(bonus, torch.tensor([0.0, 5 / 6, 5 / 6, 0.0, 0.0, 5 / 12]))
    everywhere = torch.full((6,), int(TokenFlag.SPEAKER_CHANGE))
    assert StructuralBonusScorer().score(_inputs(n=6, k=1, flags=everywhere)).abs().max() == 0
    notes.truncate(40)
    assert notes.block_flags(torch.arange(6), 16)[2] == 0


def test_combined_scorer_is_the_weighted_sum() -> None:
    inputs = _inputs(n=6, k=2, flags=torch.tensor([0, 1, 0, 0, 8, 0]))
    weights = ScoreWeights(accumulated=2.0, query=0.5, position=0.25, structural=3.0)
    scorer = CombinedScorer(weights=weights, position=PositionScorer(sink_tokens=1, recent_tokens=16))
    expected = (
        2.0 * min_max_normalize(AccumulatedAttentionScorer().score(inputs))
        + 0.5 * min_max_normalize(QueryAwareScorer().score(inputs))
        + 0.25 * PositionScorer(sink_tokens=1, recent_tokens=16).score(inputs)
        + 3.0 * StructuralBonusScorer().score(inputs)
    )
    torch.testing.assert_close(scorer.score(inputs), expected)
    assert scorer.block_scores(inputs).shape == (6,)
    normalized = min_max_normalize(torch.tensor([[1.0, 5.0], [3.0, 5.0]]))
    assert normalized.tolist() == [[0.0, 0.0], [1.0, 0.0]]


def test_scorers_tolerate_missing_evidence() -> None:
    inputs = BlockScoringInputs(block_start=torch.arange(3) * 16, block_len=torch.full((3,), 16), seq_len=48)
    assert CombinedScorer().block_scores(inputs).shape == (3,)


# ------------------------------------------------------------------------------------------------
# Budget planner
# ------------------------------------------------------------------------------------------------

OPTIONS = [
    TierOption("full", 1000, 1.0),
    TierOption("int8", 560, 0.99),
    TierOption("int4", 310, 0.9),
]


def _plan_bytes(level: torch.Tensor) -> int:
    costs = {DROP: 0, 0: 1000, 1: 560, 2: 310}
    return sum(costs[int(x)] for x in level)


def test_budget_extremes() -> None:
    scores = torch.rand(10)
    assert (plan_tiers(scores, OPTIONS, 10**9).level == 0).all()
    assert (plan_tiers(scores, OPTIONS, 0).level == DROP).all()
    no_drop = plan_tiers(scores, OPTIONS, 0, allow_drop=False)
    assert (no_drop.level == 2).all() and no_drop.over_budget


def test_fewest_drops_are_the_lowest_scored_and_no_more_than_needed() -> None:
    scores = torch.tensor([5.0, 0.1, 3.0, 0.2, 0.3, 9.0])
    protected = torch.tensor([True, False, False, False, False, False])
    allowed = torch.ones(6, 3, dtype=torch.bool)
    droppable = torch.tensor([True, True, True, True, False, True])  # block 4 may not be dropped
    # Cheapest plan: 1000 (protected) + 5 x 310 = 2550; a 2000-byte budget needs two drops.
    chosen = fewest_drops(scores, OPTIONS, 2000, protected, allowed, droppable)
    assert torch.nonzero(chosen).flatten().tolist() == [1, 3]
    assert not fewest_drops(scores, OPTIONS, 2550, protected, allowed, droppable).any()
    # A block limited to full precision is dearer (cheapest plan 3240): dropping it alone frees enough.
    full_only = allowed.clone()
    full_only[1] = torch.tensor([True, False, False])
    assert torch.nonzero(fewest_drops(scores, OPTIONS, 2300, protected, full_only, droppable)).flatten().tolist() == [1]
    # Not enough even with every droppable block gone: all of them.
    assert fewest_drops(scores, OPTIONS, 100, protected, allowed, droppable).tolist() == [False, True, True, True, False, True]
    # The plan restricted to them keeps everything else and fits.
    plan = plan_tiers(scores, OPTIONS, 2000, protected=protected, allow_drop=chosen)
    assert set(torch.nonzero(plan.level == DROP).flatten().tolist()) <= {1, 3} and not plan.over_budget


def test_protected_blocks_stay_full_and_caps_hold() -> None:
    scores = torch.tensor([0.0, 5.0, 1.0, 1.0])
    protected = torch.tensor([True, False, False, False])
    cap = torch.tensor([1.0, 0.9, 1.0, 1.0])  # block 1 is already INT4
    plan = plan_tiers(scores, OPTIONS, 10**6, protected=protected, max_fidelity=cap)
    assert plan.level.tolist() == [0, 2, 0, 0]


@FAST
@given(
    n=st.integers(1, 40),
    ratio=st.floats(0.0, 1.2),
    seed=st.integers(0, 2**16),
    allow_drop=st.booleans(),
)
def test_plan_respects_budget_and_is_monotone_in_score(n: int, ratio: float, seed: int, allow_drop: bool) -> None:
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(n, generator=gen)
    budget = budget_from_ratio(ratio, n * 1000)
    plan = plan_tiers(scores, OPTIONS, budget, allow_drop=allow_drop)
    assert plan.total_bytes == _plan_bytes(plan.level)
    if not plan.over_budget:
        assert plan.total_bytes <= budget
    else:
        assert not allow_drop and (plan.level == 2).all()
    fidelity = {DROP: 0.0, 0: 1.0, 1: 0.99, 2: 0.9}
    fid = torch.tensor([fidelity[int(x)] for x in plan.level])
    order = scores.argsort()
    assert (fid[order].diff() >= 0).all(), "a higher score never gets a worse tier"


def test_greedy_is_near_optimal_against_brute_force() -> None:
    gen = torch.Generator().manual_seed(3)
    choices = [DROP, 0, 1, 2]
    fidelity = {DROP: 0.0, 0: 1.0, 1: 0.99, 2: 0.9}
    for trial in range(30):
        scores = torch.rand(5, generator=gen) * 3
        budget = int(torch.randint(0, 5000, (1,), generator=gen))
        plan = plan_tiers(scores, OPTIONS, budget)
        best = 0.0
        for combo in itertools.product(choices, repeat=5):
            if _plan_bytes(torch.tensor(combo)) <= budget:
                best = max(best, sum(float(s) * fidelity[c] for s, c in zip(scores, combo)))
        # Greedy on the convex hull loses at most one block's worth of value.
        assert plan.kept_value >= best - float(scores.max()) - 1e-6, trial
        assert plan.total_bytes <= budget
