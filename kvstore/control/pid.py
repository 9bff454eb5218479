"""A discrete PID loop (the source document's controller on memory pressure, seed 12.2).

Small and plain on purpose: one :meth:`PID.step` per sample, the output clamped to ``[low, high]`` and the
integral frozen while the output sits at a clamp in the direction of the error (no wind-up through a long
squeeze). Used by :class:`kvstore.control.KVController` to steer the share of the device cap the KV budget
follows, so that the bytes actually held settle at the setpoint whatever the compression's hysteresis and
the layers outside the budget (sliding windows, staging) add.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PID:
    """``output = bias + kp * e + ki * sum(e) + kd * (e - e_prev)`` with ``e = setpoint - measured``."""

    setpoint: float
    kp: float = 0.5
    ki: float = 0.25
    kd: float = 0.0
    low: float = 0.0
    high: float = 1.0
    bias: float | None = None  # output at zero error (default: the setpoint, a share steering a share)
    integral: float = field(default=0.0, init=False)
    last_error: float | None = field(default=None, init=False)
    output: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError("PID needs low <= high")
        if self.bias is None:
            self.bias = self.setpoint
        self.output = min(max(self.bias, self.low), self.high)

    def step(self, measured: float) -> float:
        """One control step from the measured value; returns the new (clamped) output."""
        error = self.setpoint - measured
        derivative = 0.0 if self.last_error is None else error - self.last_error
        self.last_error = error
        unclamped = self.bias + self.kp * error + self.ki * (self.integral + error) + self.kd * derivative
        saturated_high = unclamped > self.high and error > 0
        saturated_low = unclamped < self.low and error < 0
        if not (saturated_high or saturated_low):  # anti-windup: integrate only while the output can follow
            self.integral += error
        raw = self.bias + self.kp * error + self.ki * self.integral + self.kd * derivative
        self.output = min(max(raw, self.low), self.high)
        return self.output

    def reset(self) -> None:
        self.integral, self.last_error = 0.0, None
        self.output = min(max(self.bias, self.low), self.high)
