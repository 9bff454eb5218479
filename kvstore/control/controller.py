"""One session's KV controller: the PID on device memory and the bandit over the decode read.

Stepped by the session loop (app/llm/context.py): :meth:`KVController.after_prefill` after each prefill chunk,
:meth:`KVController.before_answer` / :meth:`KVController.after_answer` around each answer, and
:meth:`KVController.set_cap` when the memory the session may use changes (a squeeze: rooms joining the
process). It replaces the fixed watermark: the cache's budget follows ``budget_share x cap``
(``TieredCache.budget_share``), and the PID moves that share so the bytes actually held sit at
``setpoint x cap`` — the compression's hysteresis and the layers outside the budget would otherwise keep
them a few points under it. The share never goes above what leaves room for one prefill chunk under the
hard cap, so the cap itself is never crossed by the budget's doing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvstore.control.bandit import SparsityBandit
from kvstore.control.pid import PID

if TYPE_CHECKING:
    from kvstore.cache import TieredCache


def cap_binds(cache: "TieredCache") -> bool:
    """Whether the device cap holds some layer's KV down: its budget without the cap and the KV it would keep
    uncompressed both exceed what the cap allows. Before, the bytes are under the setpoint because the meeting
    is short, not by the controller's doing, and integrating that error would only wind the share up."""
    capped = cache.watermark_budget_per_layer()
    if capped is None:
        return False
    for layer in cache.tiered_layers:
        if not layer.is_initialized:
            continue
        full = layer.full_precision_bytes()
        if full >= capped and layer.policy.uncapped_budget(full, layer.full_precision_bytes_per_token()) >= capped:
            return True
    return False


@dataclass(frozen=True)
class ArmChoice:
    """The decode top-k an answer was read with, and the kept blocks per layer it was chosen at: its reward may
    come after the next answer's choice (the quality signal is measured in the background)."""

    top_k: int | None
    blocks: int


@dataclass(frozen=True)
class ControllerConfig:
    """What the controller holds and explores (app/platform/config.py ``kv.controller`` converts to this)."""

    setpoint: float = 0.85  # share of the device cap the KV bytes are held at
    kp: float = 0.5
    ki: float = 0.3
    min_share: float = 0.3  # the budget's share of the cap never goes below this...
    max_share: float = 0.95  # ...nor above this (and never above what one more prefill chunk leaves)
    arms: tuple[int | None, ...] = ()  # decode top-k arms (None: dense); empty: the bandit is off
    js_threshold: float = 0.02
    js_weight: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.setpoint < 1:
            raise ValueError("controller setpoint must be in (0, 1)")
        if not 0 < self.min_share <= self.setpoint <= self.max_share <= 1:
            raise ValueError("controller needs 0 < min_share <= setpoint <= max_share <= 1")


@dataclass
class KVController:
    """The controller of one TieredCache (one meeting session)."""

    cache: "TieredCache"
    config: ControllerConfig = field(default_factory=ControllerConfig)
    chunk_bytes: int = field(default=0, init=False)  # the largest prefill chunk's bytes in one layer, seen
    current_arm: int | None = field(default=None, init=False)
    last_reward: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        c = self.config
        self.pid = PID(c.setpoint, kp=c.kp, ki=c.ki, low=c.min_share, high=c.max_share)
        self.bandit = SparsityBandit(c.arms, c.js_threshold, c.js_weight, seed=c.seed) if c.arms else None
        if self.bandit is not None:
            self.current_arm = self.cache.settings.decode_top_k_blocks

    # ------------------------------------------------------------------ memory
    @property
    def cap_bytes(self) -> int | None:
        return self.cache.settings.device_cap_bytes

    def _high(self) -> float:
        """The highest share that still leaves one prefill chunk's bytes under the cap (never under ``min_share``:
        a cap smaller than a chunk cannot be kept by any budget)."""
        cap = self.cap_bytes or 1
        return max(self.config.min_share, min(self.config.max_share, 1 - self.chunk_bytes / cap - 0.01))

    def after_prefill(self, tokens: int) -> float | None:
        """One PID step after a chunk of ``tokens`` was prefilled; returns the budget's new share of the cap (None
        without a cap)."""
        cap = self.cap_bytes
        if cap is None:
            return None
        # Each layer compresses right after its own attention, before the next layer appends: the peak above
        # the budget is one layer's chunk at full precision, not every layer's.
        per_token = max((layer.full_precision_bytes_per_token() for layer in self.cache.tiered_layers
                         if layer.is_initialized), default=0)
        self.chunk_bytes = max(self.chunk_bytes, tokens * per_token)
        self._lower_ceiling()
        share = self.pid.step(self.cache.device_bytes() / cap) if cap_binds(self.cache) else self.pid.output
        self.cache.budget_share = share
        return share

    def _lower_ceiling(self) -> None:
        """Recompute the share's ceiling (the cap or the largest chunk changed) and hold the output under it."""
        self.pid.high = self._high()
        self.pid.output = min(self.pid.output, self.pid.high)

    def set_cap(self, cap_bytes: int) -> None:
        """A new device cap (a squeeze or a release): the budget follows at once and is enforced now."""
        if cap_bytes <= 0:
            raise ValueError("device cap must be positive")
        self.cache.settings.device_cap_bytes = cap_bytes
        self._lower_ceiling()
        self.cache.budget_share = self.pid.output
        self.cache.compress()

    # ------------------------------------------------------------------ decode sparsity
    def resident_blocks(self) -> int:
        layers = [layer for layer in self.cache.tiered_layers if layer.is_initialized]
        return max((len(layer.table) for layer in layers), default=0)

    def before_answer(self) -> ArmChoice | None:
        """Set the decode top-k of the next answer (the bandit's choice); None without a bandit."""
        if self.bandit is None:
            return None
        blocks = self.resident_blocks()
        self.current_arm = self.bandit.choose(blocks)
        self.cache.settings.decode_top_k_blocks = self.current_arm
        return ArmChoice(self.current_arm, blocks)

    def after_answer(self, choice: ArmChoice | None, tokens_per_second: float | None,
                     js_samples: list[float] = ()) -> float | None:
        """Reward the arm that read an answer (None when the answer had too few tokens to time)."""
        if self.bandit is None or choice is None or tokens_per_second is None:
            return None
        self.last_reward = self.bandit.update(choice.top_k, choice.blocks, tokens_per_second, list(js_samples))
        return self.last_reward

    # ------------------------------------------------------------------ report
    def report(self) -> dict[str, Any]:
        cap = self.cap_bytes
        out: dict[str, Any] = {"controller_share": self.cache.budget_share if cap else None,
                               "controller_setpoint": self.config.setpoint if cap else None,
                               "controller_pressure": self.cache.device_bytes() / cap if cap else None}
        if self.bandit is not None:
            out["controller_decode_top_k"] = 0 if self.current_arm is None else self.current_arm
            out["controller_reward"] = self.last_reward
            out["controller_arms"] = self.bandit.report()
        return out
