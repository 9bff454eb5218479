"""Operational figures for Prometheus (/metrics) and structured JSON logs.

Per-session figures (KV bytes per tier and modality, prefetch hit rate, commit lag, dropped
frames, the cold-tier placement's transfer counters) are read at scrape time, so nothing has to
push them; events that happen in the bot (questions, joins, frames it had to drop, the KV bytes a
session's save moves to the session store) are counters and histograms updated where they happen.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Callable, Iterable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from app.platform.cost import Usage, meeting_cost

SessionSource = Callable[[], Iterable[tuple[str, Any]]]
"""Returns (room or label, MeetingSession) pairs for the sessions to report."""


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def device_memory() -> dict[str, float]:
    """Bytes in use per device: CUDA allocations when torch has a GPU, and the process's resident host memory."""
    figures: dict[str, float] = {}
    torch = sys.modules.get("torch")  # never import torch just to report on it
    if torch is not None and torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            figures[f"cuda:{index}"] = float(torch.cuda.memory_allocated(index))
    try:
        import psutil

        figures["host"] = float(psutil.Process().memory_info().rss)
    except Exception:  # pragma: no cover - psutil is in the lock; a missing /proc must not break scrapes
        pass
    return figures


def placement_transfers(session: Any) -> dict[tuple[str, str], tuple[int, float]]:
    """(source tier, target tier) -> (bytes, seconds) moved so far by the session's cold-tier placement
    (kvstore.placement.TierPlacement.transfers); empty when the session's cache has no cold tier."""
    cache = getattr(getattr(session, "_context", None), "cache", None)
    placement = getattr(getattr(cache, "cold_tier", None), "placement", None)
    transfers = getattr(placement, "transfers", None) or {}
    return {(getattr(a, "value", str(a)), getattr(b, "value", str(b))): (c.bytes, c.seconds)
            for (a, b), c in list(transfers.items())}


# One gauge per session for each of these figures of its KV statistics: (metric, help, key in the statistics).
_KV_GAUGES = (
    ("minutia_kv_budget_bytes", "KV byte budget", "budget_bytes"),
    ("minutia_kv_compression_ratio", "full-precision bytes / stored bytes", "compression_ratio"),
    ("minutia_kv_tokens", "tokens in the KV cache", "tokens"),
    ("minutia_kv_prefetch_hit_rate", "share of prefetched blocks found resident", "prefetch_hit_rate"),
    ("minutia_kv_quality_drift", "Jensen-Shannon divergence of sparse vs dense decode reads on recent sampled steps",
     "quality_drift_js"),
    ("minutia_kv_shadow_top1_agreement", "share of recent sampled decode steps whose top token a dense read agrees "
     "with", "shadow_top1_agreement"),
    ("minutia_kv_shadow_answer_js", "mean JS divergence of sampled answers' steps against a dense read of the same "
     "question and answer", "shadow_answer_js"),
    ("minutia_kv_shadow_answer_agreement", "share of sampled answers a dense read would have given word for word",
     "shadow_answer_agreement"),
    ("minutia_kv_shadow_exact_js", "mean JS divergence of sampled answers' steps against the meeting read at full "
     "precision (exact copies, cold blocks recalled): the compression's drift", "shadow_exact_js"),
    ("minutia_kv_shadow_exact_agreement", "share of sampled answers the full-precision read would have given word "
     "for word", "shadow_exact_agreement"),
    ("minutia_decode_tokens_per_second", "answer tokens per second after the first, recent answers",
     "decode_tokens_per_second"),
    ("minutia_kv_memory_pressure", "KV bytes on the device / the device cap (the controller holds it at its "
     "setpoint)", "controller_pressure"),
    ("minutia_kv_controller_share", "share of the device cap the KV budget follows, as the PID set it",
     "controller_share"),
    ("minutia_kv_decode_top_k", "blocks per KV head the bandit chose for the last answer's decode read (0: dense)",
     "controller_decode_top_k"),
    ("minutia_kv_controller_reward", "the bandit's reward for the last answer (throughput x quality factor, "
     "relative to the first answer's)", "controller_reward"),
)


class SessionCollector(Collector):
    """Reads every live session's snapshot when Prometheus scrapes."""

    def __init__(self, sessions: SessionSource, peers: Callable[[], Mapping[str, int]] | None = None) -> None:
        self._sessions = sessions
        self._peers = peers

    def collect(self) -> Iterator[Any]:
        tier = GaugeMetricFamily("minutia_kv_bytes", "KV cache bytes per tier", labels=["session", "tier"])
        modality = GaugeMetricFamily("minutia_kv_modality_bytes", "KV cache bytes per modality",
                                     labels=["session", "modality"])
        per_kv = [(GaugeMetricFamily(name, text, labels=["session"]), key) for name, text, key in _KV_GAUGES]
        fallback = GaugeMetricFamily("minutia_kv_fallback", "1 while the KV store runs in L1/L2-only fallback",
                                     labels=["session"])
        latency = HistogramMetricFamily("minutia_asr_commit_latency_seconds", "seconds from each word's end to its "
                                        "commit", labels=["session"])
        lag = GaugeMetricFamily("minutia_asr_commit_lag_seconds", "seconds from a word's end to its commit",
                                labels=["session"])
        stream = GaugeMetricFamily("minutia_stream_seconds", "audio seconds received", labels=["session"])
        dropped = CounterMetricFamily("minutia_session_dropped", "audio samples / video frames the session's ring "
                                      "buffers dropped", labels=["session", "unit"])
        words = CounterMetricFamily("minutia_committed_words", "words committed by the recogniser", labels=["session"])
        ttft = GaugeMetricFamily("minutia_question_last_ttft_seconds", "time to first token of the last answer",
                                 labels=["session"])
        states = GaugeMetricFamily("minutia_sessions", "sessions by state", labels=["state"])
        cost = GaugeMetricFamily("minutia_session_cost_usd", "what the meeting cost so far at the configured prices "
                                 "(machine share, storage, network; app/platform/cost.py)", labels=["session"])
        hourly = GaugeMetricFamily("minutia_session_cost_per_meeting_hour_usd", "the meeting's cost per hour of "
                                   "meeting", labels=["session"])
        moved = CounterMetricFamily("minutia_kv_placement_transfer_bytes", "bytes the cold-tier placement moved "
                                    "between tiers", labels=["session", "source", "target"])
        moving = CounterMetricFamily("minutia_kv_placement_transfer_seconds", "seconds the cold-tier placement "
                                     "spent moving blocks", labels=["session", "source", "target"])
        by_state: dict[str, int] = {}
        for label, session in self._sessions():
            try:
                snap = session.snapshot()
            except Exception:  # a session in trouble must not hide the others
                by_state["error"] = by_state.get("error", 0) + 1
                continue
            by_state[snap.state] = by_state.get(snap.state, 0) + 1
            kv = snap.kv or {}
            for name, value in (kv.get("bytes_by_tier") or {}).items():
                tier.add_metric([label, str(name)], float(value))
            for name, value in (kv.get("bytes_by_modality") or {}).items():
                modality.add_metric([label, str(name)], float(value))
            for family, key in per_kv:  # absent while the session has no figure for it
                value = _float(kv.get(key))
                if value is not None:
                    family.add_metric([label], value)
            if "mode" in kv:
                fallback.add_metric([label], 1.0 if kv["mode"] == "fallback" else 0.0)
            if snap.commit_lag is not None:
                lag.add_metric([label], float(snap.commit_lag))
            stream.add_metric([label], float(snap.stream_seconds))
            counters = getattr(snap, "counters", None) or {}
            for name, key in (("audio_samples", "audio_dropped_samples"), ("video_frames", "video_dropped_frames")):
                if key in counters:
                    dropped.add_metric([label, name], float(counters[key]))
            if "commit_lag_buckets" in counters:
                buckets = [(str(bound), float(n)) for bound, n in counters["commit_lag_buckets"]]
                latency.add_metric([label], buckets + [("+Inf", float(counters["commit_lag_count"]))],
                                   sum_value=float(counters["commit_lag_sum"]))
            if "committed_words" in counters:
                words.add_metric([label], float(counters["committed_words"]))
            value = _float(kv.get("question_ttft"))
            if value is not None:
                ttft.add_metric([label], value)
            if "usage" in counters and getattr(session, "settings", None) is not None:
                priced = meeting_cost(Usage.from_dict(counters["usage"]), session.settings.cost)
                cost.add_metric([label], priced.total)
                if priced.per_meeting_hour is not None:
                    hourly.add_metric([label], priced.per_meeting_hour)
            for (source, target), (nbytes, seconds) in placement_transfers(session).items():
                moved.add_metric([label, source, target], float(nbytes))
                moving.add_metric([label, source, target], float(seconds))
        for state, count in by_state.items():
            states.add_metric([state], count)
        yield from (tier, modality, *(family for family, _ in per_kv), latency, fallback, lag, stream, dropped, words,
                    ttft, states, moved, moving, cost, hourly)
        memory = GaugeMetricFamily("minutia_device_memory_bytes", "memory in use per device", labels=["device"])
        for device, value in device_memory().items():
            memory.add_metric([device], value)
        yield memory
        if self._peers is not None:
            peers = self._peers()
            yield GaugeMetricFamily("minutia_rooms", "rooms with a session", value=len(peers))
            per_room = GaugeMetricFamily("minutia_room_peers", "connected peers per room", labels=["room"])
            for room, count in peers.items():
                per_room.add_metric([room], count)
            yield per_room


class Metrics:
    """A private registry (tests and several bots in one process do not collide) with the bot's figures."""

    def __init__(self, sessions: SessionSource | None = None, peers: Callable[[], Mapping[str, int]] | None = None) -> None:
        self.registry = CollectorRegistry()
        if sessions is not None:
            self.registry.register(SessionCollector(sessions, peers))
        buckets = (0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)
        self.question_ttft = Histogram("minutia_question_ttft_seconds", "seconds from a question to its answer's "
                                       "first token", buckets=buckets, registry=self.registry)
        self.question_seconds = Histogram("minutia_question_seconds", "seconds from a question to its whole answer",
                                          buckets=buckets, registry=self.registry)
        self.questions = Counter("minutia_questions", "questions asked", ["outcome"], registry=self.registry)
        self.dropped_frames = Counter("minutia_bot_dropped_frames", "frames the bot dropped before the session",
                                      ["room", "modality"], registry=self.registry)
        self.late_audio_frames = Counter("minutia_bot_late_audio_frames", "20 ms frames of a speaker's audio that "
                                         "came too late for the mix and were heard as silence", ["room"],
                                         registry=self.registry)
        self.mix_wait = Gauge("minutia_bot_mix_wait_seconds", "how long a room's mixer waits for a late speaker now "
                              "(it grows with the lateness seen, then settles)", ["room"], registry=self.registry)
        self.joins = Counter("minutia_bot_joins", "join requests by outcome", ["outcome"], registry=self.registry)
        self.transfer_bytes = Counter("minutia_kv_tier_transfer_bytes", "bytes moved between KV tiers (a session's "
                                      "save: device -> session store)", ["source", "target"],
                                      registry=self.registry)
        self.transfer_seconds = Counter("minutia_kv_tier_transfer_seconds", "seconds spent moving KV between tiers",
                                        ["source", "target"], registry=self.registry)

    def record_transfer(self, source: str, target: str, nbytes: int, seconds: float) -> None:
        """Each move (e.g. ``MeetingSession.on_transfer`` on a save); throughput = rate(bytes) / rate(seconds)."""
        self.transfer_bytes.labels(source, target).inc(nbytes)
        self.transfer_seconds.labels(source, target).inc(seconds)

    def render(self) -> tuple[bytes, str]:
        """The text exposition format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any ``extra={...}`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_json_logging(level: int | str = logging.INFO, stream: Any = None) -> logging.Handler:
    """Send the root logger's records to ``stream`` (stderr) as JSON lines; returns the handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if not isinstance(getattr(h, "formatter", None), JsonFormatter)]
    root.addHandler(handler)
    root.setLevel(level)
    return handler
