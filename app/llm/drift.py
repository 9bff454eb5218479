"""Quality drift of the sparse KV read: how far a decode step's next-token distribution moves from a dense one.

With ``decode_top_k_blocks`` a decode step reads only the blocks with the best Quest bound. A sampled share of
decode steps keeps its sparse next-token distribution; after the answer is returned, a background pass runs the
question and the answer's tokens once more reading every resident (device and host) block, inside a cache
checkpoint that is rolled back, and the Jensen-Shannon divergence of each sampled step's two distributions and
whether their top tokens agree are recorded. The user's answer is decoded from the sparse steps as always and is
never held for the comparison, so sampling changes nothing but background time.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

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


def _nth(count: int, rate: float) -> bool:
    """Whether the ``count``-th event (from 1) is sampled at ``rate``: every ``1 / rate``-th, the first included."""
    if rate <= 0:
        return False
    period = max(1, round(1 / rate))
    return count % period == 1 % period


@dataclass
class _Recent:
    """The last ``size`` (divergence, agreed) pairs and their means (None before the first)."""

    size: int
    pairs: deque = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the shadow thread adds while stats() reads

    def add(self, divergence: float, agreed: bool) -> None:
        with self._lock:
            self.pairs.append((divergence, agreed))
            while len(self.pairs) > self.size:
                self.pairs.popleft()

    def snapshot(self) -> list[tuple[float, bool]]:
        with self._lock:
            return list(self.pairs)

    def means(self) -> tuple[float | None, float | None]:
        pairs = self.snapshot()
        if not pairs:
            return None, None
        return sum(d for d, _ in pairs) / len(pairs), sum(a for _, a in pairs) / len(pairs)


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
    skipped: int = 0  # sampled steps never compared: the meeting moved on first, or a comparison was running
    _recent: _Recent = field(default_factory=lambda: _Recent(256))

    def __post_init__(self) -> None:
        self._recent.size = self.window

    def due(self) -> bool:
        """Count one decode step; True when this one is sampled."""
        self.steps += 1
        return _nth(self.steps, self.sample_rate)

    def record(self, sparse_logits: torch.Tensor, dense_logits: torch.Tensor) -> float:
        divergence = js_divergence(sparse_logits, dense_logits)
        self._recent.add(divergence, int(sparse_logits.argmax()) == int(dense_logits.argmax()))
        self.samples += 1
        return divergence

    def last(self, count: int) -> list[float]:
        """The divergences of the last ``count`` sampled steps (at most the window's)."""
        return [divergence for divergence, _ in self._recent.snapshot()[-count:]] if count > 0 else []

    def report(self) -> dict[str, float | int | None]:
        """Mean JS divergence and top-1 agreement over the recent samples (None before the first one)."""
        divergence, agreement = self._recent.means()
        return {"quality_drift_js": divergence, "shadow_top1_agreement": agreement, "drift_samples": self.samples,
                "drift_skipped": self.skipped}


SHADOW_MAX_STEPS = 64  # answer steps kept per sampled question (a step's logits are a vocabulary of floats)


@dataclass
class AnswerTrace:
    """What one answer's decode keeps for the comparisons after it: the token of each step, every step's logits
    when the question is shadowed (``steps``, up to SHADOW_MAX_STEPS), and the drift's sampled steps' logits."""

    tokens: list[int] = field(default_factory=list)
    steps: list[torch.Tensor] | None = None
    sampled: dict[int, torch.Tensor] = field(default_factory=dict)  # step index -> its sparse logits

    def keep(self, token: int, logits: torch.Tensor, sampled: bool) -> None:
        index = len(self.tokens)
        self.tokens.append(token)
        if self.steps is not None and len(self.steps) < SHADOW_MAX_STEPS:
            self.steps.append(logits.float().clone())
        if sampled:
            self.sampled[index] = logits.float().clone()


@dataclass
class ShadowQuestions:
    """A sampled share of questions compared, after the answer is returned, with reference reads of the same
    question and answer: each a teacher-forced forward over the question and the answer's tokens (in a background
    thread, under the context's lock, rolled back), step by step against the decode's distributions. References:
    ``resident``, every resident block (the sparse read's drift), and ``exact``, the meeting's cold blocks recalled
    and its quantized blocks read from their full-precision copies (the compression's drift, as far as the copies
    and the device cap go). Reports per reference the mean JS divergence and how often it would have given the
    same answer (its top token agrees at every step). A question whose meeting moved on before the shadow ran (new
    lines prefilled) is skipped, not compared against another prefix."""

    sample_rate: float = 0.1
    window: int = 64
    asked: int = 0
    compared: int = 0
    skipped: int = 0
    _recent: dict = field(default_factory=dict)  # reference -> _Recent
    _thread: threading.Thread | None = None

    def due(self) -> bool:
        """Count one question; True when this one is shadowed."""
        self.asked += 1
        return _nth(self.asked, self.sample_rate)

    def start(self, job: Callable[[], None]) -> bool:
        """Run ``job`` (an answer's comparisons) in the background; False, and nothing runs, while the last one is
        still running: one at a time, and never waited for here (the caller holds the lock the running one needs)."""
        if self.running():
            return False
        self._thread = threading.Thread(target=job, name="minutia-shadow-question", daemon=True)
        self._thread.start()
        return True

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def record(self, sparse: list[torch.Tensor], dense: list[torch.Tensor], reference: str = "resident") -> None:
        divergences = [js_divergence(s, d) for s, d in zip(sparse, dense)]
        agree = [int(s.argmax()) == int(d.argmax()) for s, d in zip(sparse, dense)]
        self._recent.setdefault(reference, _Recent(self.window)).add(sum(divergences) / len(divergences), all(agree))

    def wait(self, timeout: float | None) -> bool:
        """Wait for the running shadow (if any); True when none is left running."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def report(self) -> dict[str, float | int | None]:
        resident = self._recent.get("resident", _Recent(self.window)).means()
        exact = self._recent.get("exact", _Recent(self.window)).means()
        return {"shadow_answer_js": resident[0], "shadow_answer_agreement": resident[1],
                "shadow_exact_js": exact[0], "shadow_exact_agreement": exact[1],
                "shadow_questions": self.compared, "shadow_skipped": self.skipped}
