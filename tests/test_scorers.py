"""Pluggable scorers (kvstore.scoring): the combined score is today's formula, and a new scorer is one
class plus one ``weights`` entry, down to the plan of a TieredCache."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from kvstore.attention import MINUTIA_ATTENTION
from kvstore.cache import TieredCache
from kvstore.config import TieredCacheConfig
from kvstore.scoring import (
    SCORERS,
    AccumulatedAttentionScorer,
    BlockScoringInputs,
    CombinedScorer,
    PositionScorer,
    QueryAwareScorer,
    ScoreWeights,
    StructuralBonusScorer,
    get_scorer,
    min_max_normalize,
    register_scorer,
)
try:
    from kv_helpers import feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids


@register_scorer("oldest-first")
@dataclass(frozen=True)
class OldestFirstScorer:
    """Test-only scorer: the earlier a block starts, the more it is worth (the opposite of recency)."""

    normalize: ClassVar[bool] = True

    def score(self, inputs: BlockScoringInputs) -> torch.Tensor:
        return -inputs.block_start.float().unsqueeze(-1)


def _random_inputs(seed: int, n: int = 12, k: int = 3, d: int = 8) -> BlockScoringInputs:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(n, 16, k, d, generator=gen)
    return BlockScoringInputs(
        block_start=torch.arange(n) * 16,
        block_len=torch.full((n,), 16),
        seq_len=n * 16,
        attention_mass=torch.rand(n, k, generator=gen) * 10,
        observations=torch.randint(0, 6, (n, k), generator=gen).float(),
        key_min=keys.amin(1),
        key_max=keys.amax(1),
        queries=torch.randn(k, 4, d, generator=gen),
        scale=d**-0.5,
        flags=torch.randint(0, 32, (n,), generator=gen),
        boost=torch.rand(n, generator=gen),
    )


def _old_formula(inputs: BlockScoringInputs, w: ScoreWeights, position: PositionScorer) -> torch.Tensor:
    """The hand-written sum CombinedScorer had before scorers were pluggable."""
    total = (
        w.accumulated * min_max_normalize(AccumulatedAttentionScorer().score(inputs))
        + w.query * min_max_normalize(QueryAwareScorer().score(inputs))
        + w.position * position.score(inputs)
        + w.structural * StructuralBonusScorer().score(inputs)
    )
    return total + inputs.boost.float().view(-1, 1)


@pytest.mark.parametrize("seed", range(5))
def test_combined_score_is_bit_identical_to_the_old_formula(seed: int) -> None:
    inputs = _random_inputs(seed)
    gen = torch.Generator().manual_seed(100 + seed)
    weights = ScoreWeights(*(float(x) for x in torch.rand(4, generator=gen) * 2))
    position = PositionScorer(sink_tokens=5, recent_tokens=40)
    for w in (ScoreWeights(), weights):
        assert torch.equal(CombinedScorer(weights=w, position=position).score(inputs), _old_formula(inputs, w, position))
    assert torch.equal(CombinedScorer().score(inputs), _old_formula(inputs, ScoreWeights(), PositionScorer()))


def test_each_builtin_scorer_is_registered_under_its_short_name() -> None:
    builtin = {"accumulated": AccumulatedAttentionScorer, "query": QueryAwareScorer,
               "position": PositionScorer, "structural": StructuralBonusScorer}
    assert {name: SCORERS[name] for name in builtin} == builtin
    assert get_scorer("position", sink_tokens=2) == PositionScorer(sink_tokens=2)
    assert [scorer.normalize for scorer in builtin.values()] == [True, True, False, False]
    scorer = CombinedScorer(position=PositionScorer(recent_tokens=8))
    assert [weight for _, weight in scorer.terms] == [1.0, 1.0, 0.5, 0.3]
    assert scorer.terms[2][0] is scorer.position  # the term the policy's protected window comes from


def test_a_registered_scorer_is_one_more_weighted_term() -> None:
    inputs = _random_inputs(7)
    with_new = CombinedScorer(weights={**ScoreWeights(), "oldest-first": 2.0}).score(inputs)
    expected = CombinedScorer().score(inputs) + 2.0 * min_max_normalize(OldestFirstScorer().score(inputs))
    torch.testing.assert_close(with_new, expected)


def test_unknown_scorer_names_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match=r"unknown scorers \['recency-squared'\] \(registered: .*accumulated"):
        TieredCacheConfig(weights={"accumulated": 1.0, "recency-squared": 1.0})
    with pytest.raises(KeyError, match="unknown scorer 'nope'"):
        get_scorer("nope")
    with pytest.raises(ValueError, match="taken by"):
        register_scorer("accumulated")(OldestFirstScorer)


DROP_ONLY_BUDGET = 2 * 7 * 4400 + 2 * 3000  # ~7 full blocks per layer of the tiny llama's 16


def _kept_blocks(weights) -> set[int]:
    """Blocks a drop-only cache of ~7 full blocks per layer keeps of 16 (sinks block 0, recent 14-15)."""
    return _kept_blocks_of(TieredCacheConfig(block_size=16, compress=True, budget_bytes=DROP_ONLY_BUDGET,
                                             recent_tokens=32, warm_kinds=(), observation_window=8, weights=weights))


def _kept_blocks_of(settings: TieredCacheConfig) -> set[int]:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION)
    cache = TieredCache(config=model.config, settings=settings)
    feed(model, cache, token_ids(256), chunk=64)
    return set(cache.tiered_layers[0].table.block_index.tolist())


def test_a_config_entry_puts_a_new_scorer_in_the_cache_plan() -> None:
    default = _kept_blocks(ScoreWeights())
    oldest = _kept_blocks({**ScoreWeights(), "oldest-first": 10.0})
    assert oldest != default
    unprotected = sorted(oldest - {14, 15})
    assert unprotected == list(range(len(unprotected))), "the new term keeps the oldest blocks"
    assert len(oldest) < 16, "budget forced drops"


def _kept_blocks_configured(tmp_path, scorers: str) -> set[int]:
    """Blocks the drop-only cache above keeps when it is built from an app config file's ``kv`` section."""
    from app.platform.config import load_settings, tiered_cache_config

    path = tmp_path / "drop-only.yaml"
    path.write_text("kv:\n  compress: true\n  block_size: 16\n  recent_tokens: 32\n  warm_kinds: []\n"
                    f"  scorers: {scorers}\n")
    return _kept_blocks_of(tiered_cache_config(load_settings(str(path)).kv, budget_bytes=DROP_ONLY_BUDGET))


def test_the_app_config_names_a_new_scorer_in_one_entry(tmp_path, monkeypatch) -> None:
    """``kv.scorers: {oldest-first: 10}`` in a config file adds the test-only term to the default score."""
    for key in [k for k in os.environ if k.startswith("MINUTIA_")]:
        monkeypatch.delenv(key)
    default = _kept_blocks_configured(tmp_path, "{}")
    oldest = _kept_blocks_configured(tmp_path, "{oldest-first: 10.0}")
    assert oldest != default
    unprotected = sorted(oldest - {14, 15})
    assert unprotected == list(range(len(unprotected))), "the configured term keeps the oldest blocks"
    assert len(oldest) < 16, "budget forced drops"
