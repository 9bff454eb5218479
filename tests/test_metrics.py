"""Prometheus figures from real sessions, the bot's counters, and JSON logs."""

from __future__ import annotations

import io
import json
import logging
import time

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.platform.config import load_settings
from app.platform.metrics import JsonFormatter, Metrics, configure_json_logging, device_memory
from app.live.runtime import Runtime


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def runtime(tiny_llm_dir):
    rt = Runtime(load_settings(overrides={"llm": {"model": str(tiny_llm_dir)}}))
    yield rt
    rt.close()


def session_with_kv(runtime, name: str):
    """A real session fed 2 s of quiet noise, once its KV figures exist (so every per-session series is scraped)."""
    session = runtime.new_session(name)
    session.feed_audio((np.random.default_rng(0).standard_normal(16000 * 2) * 0.01).astype(np.float32), 16000)
    deadline = time.monotonic() + 60
    while "bytes_by_tier" not in session.snapshot().kv and time.monotonic() < deadline:
        time.sleep(0.1)
    return session


def test_session_figures_are_scraped(runtime):
    session = session_with_kv(runtime, "metrics-a")
    metrics = Metrics(lambda: [(s.session_id, s) for s in runtime.sessions()], lambda: {"room-a": 2})
    metrics.record_transfer("L1", "L2", 4096, 0.002)
    metrics.question_ttft.observe(0.4)
    metrics.dropped_frames.labels("room-a", "video").inc(3)
    text, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    samples = _samples(text.decode())
    snap = session.snapshot()
    for tier, value in snap.kv["bytes_by_tier"].items():
        assert samples[("minutia_kv_bytes", (("session", "metrics-a"), ("tier", tier)))] == value
    assert samples[("minutia_kv_tokens", (("session", "metrics-a"),))] == snap.kv["tokens"]
    assert samples[("minutia_stream_seconds", (("session", "metrics-a"),))] == pytest.approx(2.0)
    assert samples[("minutia_session_dropped_total", (("session", "metrics-a"), ("unit", "audio_samples")))] == 0
    assert samples[("minutia_sessions", (("state", snap.state),))] >= 1
    assert samples[("minutia_rooms", ())] == 1
    assert samples[("minutia_room_peers", (("room", "room-a"),))] == 2
    assert samples[("minutia_kv_tier_transfer_bytes_total", (("source", "L1"), ("target", "L2")))] == 4096
    assert samples[("minutia_question_ttft_seconds_count", ())] == 1
    assert samples[("minutia_bot_dropped_frames_total", (("modality", "video"), ("room", "room-a")))] == 3
    assert samples[("minutia_device_memory_bytes", (("device", "host"),))] > 50e6
    runtime.close_session("metrics-a")


def test_a_failing_session_does_not_hide_the_others(runtime):
    class Broken:
        def snapshot(self):
            raise RuntimeError("worker died")

    good = runtime.new_session("metrics-b")
    metrics = Metrics(lambda: [("broken", Broken()), ("metrics-b", good)])
    samples = _samples(metrics.render()[0].decode())
    assert samples[("minutia_sessions", (("state", "error"),))] == 1 + (good.snapshot().state == "error")
    assert ("minutia_stream_seconds", (("session", "metrics-b"),)) in samples
    runtime.close_session("metrics-b")


def test_device_memory_reports_the_host():
    figures = device_memory()
    assert figures["host"] > 10e6


def test_json_logs_are_one_object_per_line():
    stream = io.StringIO()
    handler = configure_json_logging(logging.INFO, stream)
    try:
        log = logging.getLogger("minutia.test")
        log.info("peer joined %s", "abc", extra={"room": "standup", "peer": "abc"})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    first, second = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert first["message"] == "peer joined abc" and first["room"] == "standup" and first["level"] == "info"
    assert first["logger"] == "minutia.test" and first["time"].endswith("Z")
    assert second["level"] == "error" and "ValueError: boom" in second["exception"]
    record = logging.LogRecord("x", logging.INFO, "f", 1, "odd %s", (object(),), None)
    assert json.loads(JsonFormatter().format(record))["message"].startswith("odd <object")
