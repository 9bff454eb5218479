"""What a meeting costs: its measured use of the machine, priced (source document, section 14).

    cost per meeting-hour = (GPU rate x GPUs + CPU rate x cores) x machine share + storage + network
                            ------------------------------------------------------------------------
                                                    meeting hours

"Machine share" is the session's wall time divided by the meetings the process held at the time (the
document's "concurrent sessions"), summed as the meeting runs: one meeting alone pays the whole machine, four
rooms in one bot pay a quarter each. Storage is what the session store holds of it after its last save, priced
for a month of keeping; network is what its KV moved to and from a remote tier (Redis) and what its saves sent to a
remote session store (Redis). The KV's bytes on the device and in
the host cold tier are measured too (GiB-hours, and the peak, which says how many meetings fit one device);
their price is in the machine's (instances are priced by cores with their memory).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Callable

GIB = 1024**3
REMOTE_TIERS = ("redis",)  # placement tiers reached over the network


@dataclass
class Usage:
    """One meeting's use, integrated over the wall time it ran (saved with it, so a resume adds to it)."""

    meeting_seconds: float = 0.0  # stream seconds received
    wall_seconds: float = 0.0
    machine_seconds: float = 0.0  # sum of wall seconds / meetings open at the time
    device_kv_byte_seconds: float = 0.0
    host_kv_byte_seconds: float = 0.0  # the cold tier in host memory
    peak_device_kv_bytes: int = 0
    remote_bytes: int = 0  # KV moved to / from a remote tier
    stored_bytes: int = 0  # what the store holds of it after its last save (a saved copy holds the figure of the
    # save before; `minutia cost` measures the store itself)
    cores: int = 0  # the machine it ran on (0: not recorded; priced on the machine that prices it)
    gpus: int = 0

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> Usage:
        """Read back; raises ValueError (TypeError) on a figure that is not a number, or that no meeting can have
        used (negative, infinite, not a number): a damaged record is said, not priced."""
        types = {f.name: (int if f.type in ("int", int) else float) for f in fields(cls)}
        try:
            read = {k: types[k](v) for k, v in (data or {}).items() if k in types}
        except OverflowError as exc:  # int(inf)
            raise ValueError(str(exc)) from None
        bad = sorted(k for k, v in read.items() if not math.isfinite(v) or v < 0)
        if bad:
            raise ValueError(f"impossible figures for {', '.join(bad)}")
        return cls(**read)


def kv_bytes(kv: dict) -> tuple[int, int]:
    """(device, host cold tier) bytes of a session's KV statistics (``TieredCache.stats`` / context stats)."""
    by_tier = kv.get("bytes_by_tier") or {}
    device = sum(int(v) for name, v in by_tier.items() if not str(name).startswith("cold_"))
    return device, int(by_tier.get("cold_host", 0))


class UsageMeter:
    """Integrates a session's use as it runs: :meth:`tick` from its LLM worker (each step; it measures at most
    every ``every`` seconds, the KV statistics are read only then)."""

    def __init__(self, usage: Usage | None = None, every: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 cores: int = 0, gpus: int = 0):
        self.usage = usage or Usage()
        self.usage.cores, self.usage.gpus = cores or self.usage.cores, gpus or self.usage.gpus
        self.every = every
        self._clock = clock
        self._last = clock()  # the meeting runs (and holds its share of the machine) from now
        self._device = self._host = 0  # KV bytes at the last measure: the integral is by trapezoids
        self._remote_base = self.usage.remote_bytes  # the tiers' counters start at 0 in this process
        self._lock = threading.Lock()

    def start(self) -> None:
        """The meeting runs from now (its models are loaded: loading is not meeting time)."""
        with self._lock:
            self._last = self._clock()

    def snapshot(self) -> Usage:
        with self._lock:
            return replace(self.usage)

    def add(self, earlier: Usage) -> None:
        """Count what an earlier run of the meeting used (a rebuilt meeting goes on with the old one's cost)."""
        with self._lock:
            self._add(earlier)

    def _add(self, earlier: Usage) -> None:
        u = self.usage
        for f in fields(Usage):
            if f.name in ("cores", "gpus"):
                continue
            if f.name in ("meeting_seconds", "peak_device_kv_bytes", "stored_bytes"):
                setattr(u, f.name, max(getattr(u, f.name), getattr(earlier, f.name)))
            else:
                setattr(u, f.name, getattr(u, f.name) + getattr(earlier, f.name))
        self._remote_base += earlier.remote_bytes

    def due(self) -> bool:
        return self._clock() - self._last >= self.every

    def tick(self, kv: dict, open_meetings: int, meeting_seconds: float, remote_bytes: int) -> None:
        """Add the time since the last tick at the use seen now (``kv``: the session's KV statistics)."""
        device, host = kv_bytes(kv)
        with self._lock:
            self._tick(device, host, open_meetings, meeting_seconds, remote_bytes)

    def _tick(self, device: int, host: int, open_meetings: int, meeting_seconds: float, remote_bytes: int) -> None:
        now = self._clock()
        dt, self._last = now - self._last, now
        u = self.usage
        u.wall_seconds += dt
        u.machine_seconds += dt / max(1, open_meetings)
        u.device_kv_byte_seconds += dt * (self._device + device) / 2
        u.host_kv_byte_seconds += dt * (self._host + host) / 2
        self._device, self._host = device, host
        u.peak_device_kv_bytes = max(u.peak_device_kv_bytes, device)
        u.meeting_seconds = max(u.meeting_seconds, meeting_seconds)
        u.remote_bytes = self._remote_base + remote_bytes

    def saved(self, stored: int, sent: int = 0) -> None:
        """The store holds ``stored`` bytes of the meeting after a save (not added up: a save replaces blocks);
        ``sent``: bytes the save moved over the network (a remote session store such as Redis), added up."""
        with self._lock:
            self.usage.stored_bytes = int(stored)
            self._remote_base += int(sent)
            self.usage.remote_bytes += int(sent)


@dataclass(frozen=True)
class CostReport:
    usage: Usage
    cores: int
    gpus: int
    compute: float  # USD
    storage: float
    network: float

    @property
    def total(self) -> float:
        return self.compute + self.storage + self.network

    @property
    def per_meeting_hour(self) -> float | None:
        hours = self.usage.meeting_seconds / 3600
        return self.total / hours if hours > 0 else None


def machine(prices: Any) -> tuple[int, int]:
    """(cores, GPUs) the prices apply to: the settings', else this machine's."""
    import os

    cores = prices.cpu_cores
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpus = prices.gpus
    if gpus is None:
        try:
            import torch

            gpus = torch.cuda.device_count()
        except Exception:  # pragma: no cover - no torch: no GPU
            gpus = 0
    return int(cores or 1), int(gpus)


def meeting_cost(usage: Usage, prices: Any, cores: int | None = None, gpus: int | None = None) -> CostReport:
    """Price ``usage`` with ``prices`` (app.platform.config.CostSettings) on a machine of ``cores`` and ``gpus``."""
    ran_on = (usage.cores, usage.gpus) if usage.cores else machine(prices)  # recorded with the use, else here
    cores = ran_on[0] if cores is None else cores
    gpus = ran_on[1] if gpus is None else gpus
    rate = prices.gpu_hour * gpus + prices.cpu_core_hour * cores  # USD per machine-hour
    return CostReport(usage, cores, gpus,
                      compute=rate * usage.machine_seconds / 3600,
                      storage=prices.storage_gib_month * usage.stored_bytes / GIB,
                      network=prices.network_gib * usage.remote_bytes / GIB)
