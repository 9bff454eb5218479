"""Importance scoring of KV blocks (kvpress-style: one small dataclass per scorer) and the budget planner.

A scorer (:class:`Scorer`: ``score(inputs) -> [N, K]`` and whether its column is min-max normalised)
lives in its own module and registers a name with :func:`register_scorer`; the combined score is the
weighted sum of the names a config's ``weights`` lists (:class:`CombinedScorer`). Adding one is a new
module imported below (or by whoever defines it) and one ``weights`` entry.
"""

from kvstore.scoring.accumulated import AccumulatedAttentionScorer
from kvstore.scoring.base import Scorer
from kvstore.scoring.budget import DROP, TierOption, TierPlan, budget_from_ratio, fewest_drops, plan_tiers
from kvstore.scoring.combined import CombinedScorer, ScoreWeights, min_max_normalize
from kvstore.scoring.inputs import BlockScoringInputs
from kvstore.scoring.position import PositionScorer
from kvstore.scoring.query_aware import QueryAwareScorer
from kvstore.scoring.registry import SCORERS, get_scorer, register_scorer
from kvstore.scoring.structural import StructuralBonusScorer

__all__ = [
    "AccumulatedAttentionScorer",
    "BlockScoringInputs",
    "CombinedScorer",
    "DROP",
    "PositionScorer",
    "QueryAwareScorer",
    "SCORERS",
    "ScoreWeights",
    "Scorer",
    "StructuralBonusScorer",
    "TierOption",
    "TierPlan",
    "budget_from_ratio",
    "min_max_normalize",
    "fewest_drops",
    "get_scorer",
    "plan_tiers",
    "register_scorer",
]
