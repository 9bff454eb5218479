"""The two guards of tier placement (kvstore/placement.py): the device watermark, which sets how many bytes may sit on
the device, and the hit-rate window, which falls back to the fast tiers alone when the prefetcher keeps guessing wrong.
"""

from __future__ import annotations

import collections


class WatermarkController:
    """Device budget that keeps device bytes near ``target`` x ``cap_bytes`` with a hysteresis band.

    Inside ``[target - band, target + band]`` nothing moves (no ping-pong); above it the budget is
    the target (demote down to it); below it the budget is the target too (promote up to it).
    The hard cap is enforced separately by :meth:`admits` on every move.
    """

    def __init__(self, cap_bytes: int, target: float = 0.85, band: float = 0.05) -> None:
        if not 0 < target <= 1 or band < 0 or target + band > 1:
            raise ValueError("need 0 < target <= 1 and target + band <= 1")
        self.cap_bytes = cap_bytes
        self.target = target
        self.band = band
        self.peak_bytes = 0

    @property
    def target_bytes(self) -> int:
        return int(self.target * self.cap_bytes)

    def device_budget(self, device_bytes: int) -> int | None:
        """Bytes the device should hold after rebalancing, or None to leave it as it is."""
        self.peak_bytes = max(self.peak_bytes, device_bytes)
        high = (self.target + self.band) * self.cap_bytes
        low = (self.target - self.band) * self.cap_bytes
        if device_bytes > high or device_bytes < low:
            return self.target_bytes
        return None

    def admits(self, device_bytes: int, extra: int) -> bool:
        return device_bytes + extra <= self.cap_bytes


class HitRateWindow:
    """Hits over the last ``window`` reads; decides the normal / fallback mode."""

    def __init__(self, window: int = 256, threshold: float = 0.5, cooldown: int = 1024) -> None:
        self.window = window
        self.threshold = threshold
        self.cooldown = cooldown
        self._hits: collections.deque[bool] = collections.deque(maxlen=window)
        self.total_reads = 0
        self.total_hits = 0
        self.mode = "normal"
        self.reason = ""  # why the last fallback happened
        self._fallback_reads = 0

    def record(self, hit: bool) -> str | None:
        """Count one read; returns the new mode when it changes."""
        self._hits.append(hit)
        self.total_reads += 1
        self.total_hits += int(hit)
        if self.mode == "normal":
            if len(self._hits) == self.window and self.rate < self.threshold:
                return self.fall_back(f"prefetch hit rate {100 * self.rate:.0f}% over {self.window} reads")
        else:
            self._fallback_reads += 1
            if self._fallback_reads >= self.cooldown:
                self.mode = "normal"
                self._hits.clear()
                return self.mode
        return None

    def fall_back(self, reason: str) -> str | None:
        """Enter L1/L2-only mode (returns the new mode, or None if already there)."""
        if self.mode == "fallback":
            return None
        self.mode, self.reason, self._fallback_reads = "fallback", reason, 0
        return self.mode

    @property
    def rate(self) -> float | None:
        """Share of the last ``window`` reads found resident; None before the first read (nothing to rate)."""
        return sum(self._hits) / len(self._hits) if self._hits else None

    @property
    def overall_rate(self) -> float | None:
        """Share of all reads found resident; None ("n/a") when nothing was read, never a made-up 100%."""
        return self.total_hits / self.total_reads if self.total_reads else None
