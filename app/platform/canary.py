"""Canary roll-out of a KV preset: a share of new meetings run it, its signals are compared, a regression rolls it back.

A canary is a YAML file with a ``kv:`` mapping (the keys of the config's ``kv`` section it changes: a new budget,
a new top-k, other scorer weights, the controller; not the block layout, which a resumed meeting must find as it
was saved). While it runs, ``fraction`` of the new sessions of a process get it (chosen by a hash of the session
id); the others, and resumed meetings, are the baseline. When a session ends its golden signals are taken (decode
tokens/s, the sparse read's quality drift, the shadow answers' agreement with a dense read and with the meeting at
full precision); once both arms have ``min_sessions`` ended sessions with a signal, the canary's mean is checked
against the baseline's with that signal's margin, and a regression beyond it rolls the canary back: new sessions,
and an id opened again, get the baseline from then on (running ones keep their cache). The decision and its evidence go to the log, to the audit
log when the store keeps one (operation ``rollout``), and to ``<home>/canary/<name>.json``, so a restarted process
does not roll the same canary out again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import yaml

from encoders.errors import InputError

log = logging.getLogger(__name__)

Arm = Literal["canary", "baseline"]


@dataclass(frozen=True)
class Signal:
    """A golden signal of a session's KV statistics and how much worse the canary may be on it."""

    key: str  # in MeetingContext.stats()
    higher_is_better: bool
    margin: float
    relative: bool  # margin as a share of the baseline's mean (throughput), else in the signal's own units

    def regressed(self, baseline: float, canary: float) -> bool:
        allowed = self.margin * abs(baseline) if self.relative else self.margin
        worse = baseline - canary if self.higher_is_better else canary - baseline
        return worse > allowed


@dataclass
class CanaryDecision:
    """What the comparison found: per signal the two means and sample counts, and whether it regressed."""

    name: str
    state: Literal["running", "rolled_back"]
    evidence: dict[str, dict[str, Any]]
    reason: str = ""
    decided_at: float = field(default_factory=time.time)


# What a canary may change: settings read when a session's cache is built and used. The block layout (block_size,
# warm_kinds, ...) is not among them: a saved canary meeting is resumed with the baseline's, and must match it;
# nor the cold tier, which the runtime builds from its own settings.
CANARY_KEYS = frozenset({"budget_ratio", "budget_floor_tokens", "recent_tokens", "recent_budget_share", "sink_tokens",
                         "decode_top_k_blocks", "drift_sample_rate", "shadow_question_rate", "drop_last_resort",
                         "modalities", "scorers", "controller", "watermark", "device_cap_mib"})


class CanaryRollout:
    """One canary preset over the sessions of a process (Runtime holds it; thread-safe)."""

    def __init__(self, preset: Path, fraction: float, signals: tuple[Signal, ...], min_sessions: int, home: Path,
                 audit: Callable[[CanaryDecision], None] | None = None) -> None:
        self.preset = Path(preset)
        self.kv_changes = _read_kv_changes(self.preset)
        digest = hashlib.sha256(json.dumps(self.kv_changes, sort_keys=True).encode()).hexdigest()[:10]
        self.name = f"{self.preset.stem}-{digest}"
        self.fraction = fraction
        self.signals = signals
        self.min_sessions = min_sessions
        self.state_path = Path(home) / "canary" / f"{self.name}.json"
        self._audit = audit
        self._lock = threading.Lock()
        self._arms: dict[str, Arm] = {}  # the live sessions' arms
        self._seen: list[tuple[Arm, dict[str, float]]] = []  # ended sessions: their arm and signals
        self.decision: CanaryDecision | None = None
        if self.state_path.is_file():  # decided before this process started: stays decided
            try:
                saved = json.loads(self.state_path.read_text())
                self.decision = CanaryDecision(**saved)
            except (ValueError, TypeError) as exc:
                raise InputError(f"canary state {self.state_path} is unreadable ({exc}); move it aside") from exc

    @property
    def state(self) -> str:
        return self.decision.state if self.decision is not None else "running"

    def arm(self, session_id: str) -> Arm:
        """The arm of a session: fixed when it is first asked, ``baseline`` for new sessions once rolled back."""
        with self._lock:
            if session_id not in self._arms:
                share = int(hashlib.sha256(session_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
                running = self.state == "running"
                self._arms[session_id] = "canary" if running and share < self.fraction else "baseline"
            return self._arms[session_id]

    def kv_for(self, base: Any, session_id: str) -> Any:
        """The session's KVSettings: the baseline's, with the canary's changes for a canary session."""
        if self.arm(session_id) == "baseline":
            return base
        merged = _merge(base.model_dump(), self.kv_changes)
        return type(base).model_validate(merged)

    def ended(self, session_id: str, stats: dict[str, Any]) -> None:
        """A session ended with these KV statistics: its signals count for its arm, and its id is free again (an
        id opened later is assigned anew). A session the canary never assigned (a resumed one) is ignored."""
        with self._lock:
            arm = self._arms.pop(session_id, None)
            if arm is None:
                return
            values = {signal.key: float(stats[signal.key]) for signal in self.signals
                      if isinstance(stats.get(signal.key), (int, float)) and not isinstance(stats[signal.key], bool)}
            self._seen.append((arm, values))

    def forget(self, session_id: str) -> None:
        """A session that did not open after all: no arm, no signals."""
        with self._lock:
            self._arms.pop(session_id, None)

    def evaluate(self) -> CanaryDecision | None:
        """Compare the arms; roll back on a regression. Returns the decision when one is made now."""
        with self._lock:
            if self.state != "running":
                return None
            evidence, regressed = {}, []
            for signal in self.signals:
                values: dict[str, list[float]] = {"canary": [], "baseline": []}
                for arm, seen in self._seen:
                    if signal.key in seen:
                        values[arm].append(seen[signal.key])
                row: dict[str, Any] = {arm: (statistics.mean(v) if v else None) for arm, v in values.items()}
                row.update({f"{arm}_sessions": len(v) for arm, v in values.items()}, margin=signal.margin,
                           relative=signal.relative, higher_is_better=signal.higher_is_better)
                enough = min(len(values["canary"]), len(values["baseline"])) >= self.min_sessions
                row["compared"] = enough
                row["regressed"] = bool(enough and signal.regressed(row["baseline"], row["canary"]))
                evidence[signal.key] = row
                if row["regressed"]:
                    regressed.append(signal.key)
            if not regressed:
                return None
            self.decision = CanaryDecision(self.name, "rolled_back", evidence,
                                           reason=f"regressed on {', '.join(regressed)}")
            self._save(self.decision)
        log.warning("canary %s rolled back: %s", self.name, self.decision.reason)
        if self._audit is not None:
            try:
                self._audit(self.decision)
            except Exception:  # the decision stands (saved, logged) even when the audit log cannot take it
                log.exception("canary %s: the audit record failed", self.name)
        return self.decision

    def report(self) -> dict[str, Any]:
        with self._lock:
            live, ended = list(self._arms.values()), [arm for arm, _ in self._seen]
            return {"name": self.name, "state": self.state, "fraction": self.fraction,
                    "sessions": {arm: live.count(arm) for arm in ("canary", "baseline")},
                    "ended": {arm: ended.count(arm) for arm in ("canary", "baseline")},
                    "decision": None if self.decision is None else asdict(self.decision)}

    def _save(self, decision: CanaryDecision) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(decision), indent=1))
        tmp.replace(self.state_path)


def signals_of(canary: Any) -> tuple[Signal, ...]:
    """The compared signals with the margins of ``settings.canary`` (app.platform.config.CanarySettings)."""
    return (Signal("decode_tokens_per_second", True, canary.max_throughput_drop, relative=True),
            Signal("quality_drift_js", False, canary.max_drift_rise, relative=False),
            Signal("shadow_answer_agreement", True, canary.max_agreement_drop, relative=False),
            Signal("shadow_exact_js", False, canary.max_drift_rise, relative=False),
            Signal("shadow_exact_agreement", True, canary.max_agreement_drop, relative=False))


def rollout_for(settings: Any, audit: Callable[[CanaryDecision], None] | None = None) -> CanaryRollout | None:
    """The process's canary from ``settings.canary`` (None when no preset is set); a canary whose changes do not
    make valid KV settings is refused now, with the setting named."""
    canary = settings.canary
    if canary.preset is None:
        return None
    rollout = CanaryRollout(canary.preset, canary.fraction, signals_of(canary), canary.min_sessions, settings.home,
                            audit)
    try:
        type(settings.kv).model_validate(_merge(settings.kv.model_dump(), rollout.kv_changes))
    except ValueError as exc:
        first = exc.errors()[0] if hasattr(exc, "errors") else {"loc": (), "msg": str(exc)}
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"canary preset {canary.preset}: invalid kv.{where}: {first['msg']}") from None
    return rollout


def _read_kv_changes(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"canary preset {path} cannot be read ({exc.__class__.__name__})") from exc
    if not isinstance(data, dict) or set(data) != {"kv"} or not isinstance(data["kv"], dict) or not data["kv"]:
        raise InputError(f"canary preset {path} must hold one non-empty 'kv:' mapping (the KV settings it changes)")
    other = sorted(set(data["kv"]) - CANARY_KEYS)
    if other:
        raise InputError(f"canary preset {path}: kv.{other[0]} cannot change per session (a canary may change "
                         f"{', '.join(sorted(CANARY_KEYS))})")
    return data["kv"]


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
