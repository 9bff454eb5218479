"""Quality drift of the sparse KV read: how far a decode step's next-token distribution moves from a dense one.

With ``decode_top_k_blocks`` a decode step reads only the blocks with the best Quest bound. On a sampled share
of decode steps the same step is also run reading every resident (device and host) block, inside a cache
checkpoint that is rolled back, and the Jensen-Shannon divergence of the two next-token distributions and
whether their top tokens agree are recorded. The user's answer is decoded from the sparse step as always,
so sampling changes nothing but time.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import torch


def js_divergence(logits_p: torch.Tensor, logits_q: torch.Tensor) -> float:
    """Jensen-Shannon divergence (natural log, 0..ln 2) of the softmax distributions of two logit vectors."""
    log_p = torch.log_softmax(logits_p.float(), dim=-1)
    log_q = torch.log_softmax(logits_q.float(), dim=-1)
    log_m = torch.logsumexp(torch.stack([log_p, log_q]), dim=0) - math.log(2.0)
    p, q = log_p.exp(), log_q.exp()
    kl_pm = (p * (log_p - log_m)).sum()
    kl_qm = (q * (log_q - log_m)).sum()
    return max(0.0, float(0.5 * (kl_pm + kl_qm)))


@dataclass
class DriftMonitor:
    """Which decode steps are read densely as well (every ``1 / sample_rate``-th), and what they showed.

    Deterministic (a step counter, not a random draw) so a run is reproducible; the report covers the last
    ``window`` sampled steps, so the gauge follows the meeting rather than its whole history.
    """

    sample_rate: float = 0.05
    window: int = 256
    steps: int = 0
    samples: int = 0
    _recent: deque = field(default_factory=deque)

    def due(self) -> bool:
        """Count one decode step; True when this one is sampled."""
        self.steps += 1
        if self.sample_rate <= 0:
            return False
        period = max(1, round(1 / self.sample_rate))
        return self.steps % period == 1 % period

    def record(self, sparse_logits: torch.Tensor, dense_logits: torch.Tensor) -> float:
        divergence = js_divergence(sparse_logits, dense_logits)
        agree = int(sparse_logits.argmax()) == int(dense_logits.argmax())
        self._recent.append((divergence, agree))
        while len(self._recent) > self.window:
            self._recent.popleft()
        self.samples += 1
        return divergence

    def report(self) -> dict[str, float | int | None]:
        """Mean JS divergence and top-1 agreement over the recent samples (None before the first one)."""
        n = len(self._recent)
        return {
            "quality_drift_js": sum(d for d, _ in self._recent) / n if n else None,
            "shadow_top1_agreement": sum(a for _, a in self._recent) / n if n else None,
            "drift_samples": self.samples,
        }
