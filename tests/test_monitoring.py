"""The shipped monitoring files (configs/monitoring): Prometheus alert rules that promtool accepts and whose unit
tests pass, and a Grafana dashboard whose every query reads a series that minutia's /metrics really exposes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.platform.config import load_settings
from app.platform.metrics import Metrics
from app.live.runtime import Runtime
from test_metrics import session_with_kv

MONITORING = Path(__file__).resolve().parent.parent / "configs" / "monitoring"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",), "unknown": ("",)}
SELECTOR = re.compile(r"\b(minutia_[a-z0-9_]+)(?:\{([^}]*)\})?")


def _promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: `make sysdeps` installs Debian's prometheus package, which ships it"
    return found


def test_the_alert_rules_pass_promtool_and_their_unit_tests():
    check = subprocess.run([_promtool(), "check", "rules", str(MONITORING / "alerts.yml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 9 rules found" in check.stdout
    # The unit tests feed series and expect each alert to fire (or stay quiet) at given times, labels and texts.
    unit = subprocess.run([_promtool(), "test", "rules", "alerts_test.yml"], cwd=MONITORING, capture_output=True, text=True)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    tested = {t["alertname"] for t in yaml.safe_load((MONITORING / "alerts_test.yml").read_text())["tests"][0]["alert_rule_test"]}
    rules = {r["alert"] for g in yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"] for r in g["rules"]}
    assert rules - tested == {"MinutiaQuestionsSlow"}  # a histogram quantile: checked by promtool's syntax pass only


def test_a_broken_rule_is_refused_by_promtool(tmp_path):
    broken = tmp_path / "alerts.yml"
    broken.write_text((MONITORING / "alerts.yml").read_text().replace("minutia_kv_fallback == 1", "minutia_kv_fallback == ("))
    check = subprocess.run([_promtool(), "check", "rules", str(broken)], capture_output=True, text=True)
    assert check.returncode != 0


@pytest.fixture(scope="module")
def exposed(tiny_llm_dir) -> dict[str, set[str]]:
    """Series names on /metrics of a real session (with the bot's counters touched once, and one answer decoded
    with a sparse read, so the drift gauges have samples), each with the label names its samples carry."""
    sparse = {"decode_top_k_blocks": 1, "block_size": 8, "recent_tokens": 8, "drift_sample_rate": 1.0,
              "shadow_question_rate": 1.0, "shadow_exact": True, "device_cap_mib": 64, "controller": {"sparsity_arms": [1, 2]}}
    runtime = Runtime(load_settings(overrides={"llm": {"model": str(tiny_llm_dir)}, "kv": sparse}))
    try:
        session = session_with_kv(runtime, "monitoring")
        session._context.generate("\nQuestion: What was said?\nAnswer:", max_new_tokens=2, stop=())
        assert session._context.shadow.wait(60)
        metrics = Metrics(lambda: [(s.session_id, s) for s in runtime.sessions()], lambda: {"room-a": 1})
        metrics.record_transfer("L1", "L2", 4096, 0.002)
        metrics.question_ttft.observe(0.4)
        metrics.questions.labels("answered").inc()
        metrics.dropped_frames.labels("room-a", "video").inc()
        metrics.late_audio_frames.labels("room-a").inc()
        text = metrics.render()[0].decode()
    finally:
        runtime.close()
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for suffix in SUFFIXES.get(family.type, ("",)):
            series.setdefault(family.name + suffix, set())
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


def _queries() -> list[tuple[str, str]]:
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    found = [(f"alert {r['alert']}", r["expr"]) for g in rules["groups"] for r in g["rules"]]
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    found += [(f"panel {p['title']}", t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
    return found


def test_every_query_reads_a_series_that_minutia_exposes(exposed):
    queries = _queries()
    assert len(queries) >= 20
    read = set()
    for where, expr in queries:
        selectors = SELECTOR.findall(expr)
        assert selectors, f"{where}: no minutia series in {expr!r}"
        for name, matchers in selectors:
            assert name in exposed, f"{where}: {name} is not on /metrics"
            read.add(name)
            for label in re.findall(r"([a-z_]+)\s*[!=]~?", matchers):
                assert label in exposed[name] or not exposed[name], f"{where}: {name} has no label {label!r}"
    # The signals the issue names are on the dashboard.
    for signal in ("minutia_kv_prefetch_hit_rate", "minutia_kv_fallback", "minutia_asr_commit_lag_seconds",
                   "minutia_kv_budget_bytes", "minutia_question_ttft_seconds_bucket", "minutia_kv_tier_transfer_bytes_total",
                   "minutia_kv_quality_drift", "minutia_kv_shadow_top1_agreement", "minutia_kv_shadow_answer_agreement",
                   "minutia_decode_tokens_per_second", "minutia_asr_commit_latency_seconds_bucket",
                   "minutia_kv_memory_pressure", "minutia_kv_controller_share", "minutia_kv_decode_top_k"):
        assert signal in read


def test_the_dashboard_is_a_grafana_dashboard_whose_panels_do_not_overlap():
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert dashboard["uid"] and isinstance(dashboard["schemaVersion"], int) and dashboard["panels"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    cells = set()
    for panel in dashboard["panels"]:
        box = panel["gridPos"]
        assert panel["type"] in {"timeseries", "stat"} and panel["targets"] and box["x"] + box["w"] <= 24
        for x in range(box["x"], box["x"] + box["w"]):
            for y in range(box["y"], box["y"] + box["h"]):
                assert (x, y) not in cells, f"panel {panel['title']!r} overlaps another"
                cells.add((x, y))
