"""A contextual bandit over the decode read's sparsity (seed 12.3): which ``decode_top_k_blocks`` to run.

Each arm is a number of blocks a decode step reads per KV head (``None``: every resident block, the dense
read). The reward of an answer is its decode throughput times a quality factor from the shadow signal,
``tokens/s x (1 - js_weight x max(0, JS - js_threshold))``, JS being the Jensen-Shannon divergence between the
sparse read and a dense read of the same step (app/llm/drift.py samples it). The context is what changes which
arm pays: how many blocks the meeting keeps (a longer meeting makes a dense read dearer). The learning is
mabwiser's linear Thompson sampling (one ridge model per arm over the context, sampled for each choice);
every arm is tried once before the model decides.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

DENSE = 0  # the arm label of the dense read (mabwiser arms must be comparable, so not None)


def arm_label(top_k: int | None) -> int:
    return DENSE if top_k is None else int(top_k)


def arm_top_k(label: int) -> int | None:
    return None if label == DENSE else label


@dataclass
class SparsityBandit:
    """Chooses the decode top-k for the next answer and learns from each answer's reward."""

    arms: tuple[int | None, ...]
    js_threshold: float = 0.02
    js_weight: float = 0.5
    alpha: float = 0.25  # LinTS exploration: the posterior's scale
    seed: int = 0
    js_memory: int = 64  # JS samples remembered per arm
    chosen: dict[int, int] = field(default_factory=lambda: defaultdict(int), init=False)
    pulls: dict[int, int] = field(default_factory=lambda: defaultdict(int), init=False)  # rewards received
    rewards: dict[int, float] = field(default_factory=lambda: defaultdict(float), init=False)
    _js: dict[int, deque] = field(default_factory=dict, init=False)
    _scale: float | None = field(default=None, init=False)  # tokens/s of the first answer: rewards near 1
    _mab: Any = field(default=None, init=False)
    _fitted: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if not self.arms:
            raise ValueError("the bandit needs at least one arm")
        labels = [arm_label(a) for a in self.arms]
        if len(set(labels)) != len(labels) or any(label < 0 for label in labels):
            raise ValueError("arms must be distinct positive block counts or None (dense)")
        from mabwiser.mab import MAB, LearningPolicy  # pandas and scikit-learn: only when a bandit is built

        self._mab = MAB(labels, LearningPolicy.LinTS(alpha=self.alpha), seed=self.seed)
        self._js = {label: deque(maxlen=self.js_memory) for label in labels}

    @staticmethod
    def context(resident_blocks: int) -> list[float]:
        """Features of the moment: a constant and the meeting's kept blocks per layer on a log scale."""
        return [1.0, math.log2(1 + max(resident_blocks, 0)) / 10]

    def choose(self, resident_blocks: int) -> int | None:
        """The top-k of the next answer: each arm once in turn, then the model's sampled best (the least chosen
        arm while no reward has come yet: a reward arrives when its answer's quality signal is measured)."""
        if not self._fitted or any(self.chosen[arm_label(arm)] == 0 for arm in self.arms):
            arm = min(self.arms, key=lambda a: self.chosen[arm_label(a)])
        else:
            arm = arm_top_k(int(self._mab.predict([self.context(resident_blocks)])))
        self.chosen[arm_label(arm)] += 1
        return arm

    def js_estimate(self, arm: int | None) -> float:
        """The arm's mean sampled JS divergence (0 for the dense arm, and while none was sampled)."""
        samples = self._js[arm_label(arm)]
        return 0.0 if arm is None or not samples else sum(samples) / len(samples)

    def reward(self, tokens_per_second: float, js: float) -> float:
        """The seed's reward, throughput scaled by the first answer's so rewards sit near 1."""
        if self._scale is None:
            self._scale = max(tokens_per_second, 1e-9)
        return tokens_per_second / self._scale * (1 - self.js_weight * max(0.0, js - self.js_threshold))

    def update(self, arm: int | None, resident_blocks: int, tokens_per_second: float,
               js_samples: list[float] = ()) -> float:
        """Learn from one answer read with ``arm``; returns its reward."""
        label = arm_label(arm)
        if arm is not None:
            self._js[label].extend(js_samples)
        value = self.reward(tokens_per_second, self.js_estimate(arm))
        context = [self.context(resident_blocks)]
        if self._fitted:
            self._mab.partial_fit([label], [value], context)
        else:
            self._mab.fit([label], [value], context)
            self._fitted = True
        self.pulls[label] += 1
        self.rewards[label] += value
        return value

    def report(self) -> dict[str, Any]:
        """Pulls, mean reward and mean JS per arm (arm "dense" for None)."""
        out = {}
        for arm in self.arms:
            label = arm_label(arm)
            n = self.pulls[label]
            out["dense" if arm is None else str(arm)] = {
                "pulls": n, "mean_reward": self.rewards[label] / n if n else None,
                "js": self.js_estimate(arm) if self._js[label] or arm is None else None}
        return out
