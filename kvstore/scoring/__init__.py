"""Importance scoring of KV blocks (kvpress-style: one small dataclass per scorer) and the budget planner."""

from kvstore.scoring.accumulated import AccumulatedAttentionScorer
from kvstore.scoring.budget import DROP, TierOption, TierPlan, budget_from_ratio, fewest_drops, plan_tiers
from kvstore.scoring.combined import CombinedScorer, ScoreWeights, min_max_normalize
from kvstore.scoring.inputs import BlockScoringInputs
from kvstore.scoring.position import PositionScorer
from kvstore.scoring.query_aware import QueryAwareScorer
from kvstore.scoring.structural import StructuralBonusScorer

__all__ = [
    "AccumulatedAttentionScorer",
    "BlockScoringInputs",
    "CombinedScorer",
    "DROP",
    "PositionScorer",
    "QueryAwareScorer",
    "ScoreWeights",
    "StructuralBonusScorer",
    "TierOption",
    "TierPlan",
    "budget_from_ratio",
    "min_max_normalize",
    "fewest_drops",
    "plan_tiers",
]
