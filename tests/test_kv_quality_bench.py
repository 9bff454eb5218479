"""Smoke test of bench/kv_quality.py --quick on the real embedded Gemma 3 270M and the QMSum data.

The full benchmark is not a test (it runs for tens of minutes on a CPU); this runs its --quick mode
(1 meeting, 1 query, budget 0.25, 512-token context, 2 needles, a 512-token memory part) as a
subprocess and checks that the table, JSON and plot exist and that the numbers are in range.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.shared_data import qmsum_val
from tests.shared_data_marks import needs_shared

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "kv_quality.py"
DATA = qmsum_val()


def _model_dir() -> Path:
    home = os.environ.get("MINUTIA_HOME")
    base = Path(home) / "models" if home else Path.home() / ".cache" / "minutia" / "models"
    return base / "gemma-3-270m"


pytestmark = [
    pytest.mark.skipif(not (_model_dir() / "config.json").is_file(),
                       reason=f"embedded Gemma 3 270M not provisioned at {_model_dir()}"),
    *needs_shared("qmsum", "val"),
]


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory) -> tuple[Path, dict]:
    pytest.importorskip("kvpress")
    out = tmp_path_factory.mktemp("kvq")
    # every core: inside the test suite the bench would see a busy machine and take one thread; the app's number
    # format for this machine (bfloat16 is emulated on a CPU without its instructions: 187 s against 83 s here)
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--threads", str(os.cpu_count() or 1),
                           "--dtype", "auto", "--focus-lines", "2", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, json.loads((out / "kv_quality.json").read_text())


def test_quick_outputs_exist(quick_report) -> None:
    out, report = quick_report
    for name in ("kv_quality.md", "kv_quality.json", "kv_quality.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "kv_quality.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "kv_quality.md").read_text()
    assert "| full cache (DynamicCache) |" in table and "| minutia TieredCache |" in table
    assert "kvpress SnapKV" in table and "kvpress ExpectedAttention" in table
    assert report["n_meetings"] == 1 and report["n_queries"] == 1 and report["n_needles"] >= 1
    assert report["max_tokens"] == 512 and report["budgets"] == [0.25]


def test_quick_numbers_in_range(quick_report) -> None:
    _, report = quick_report
    results = report["results"]
    full = results["full"]
    assert full["nll_recovery"] == pytest.approx(1.0)
    assert full["span_retention"] == pytest.approx(1.0)
    assert full["kv_fraction"] == pytest.approx(1.0)
    assert full["nll"] > 0
    rows = [key for key, _, _ in report["rows"]]
    assert "minutia@0.25" in rows and "SnapKV@0.25" in rows
    measured = 0
    for key in rows:
        row = results[key]
        if "error" in row:  # a press that cannot run on this model is reported, not hidden
            assert key.startswith("ExpectedAttention@"), row
            continue
        measured += 1
        assert 0.0 <= row["span_retention"] <= 1.0, key
        assert 0.0 <= row["needle_accuracy"] <= 1.0, key
        assert 0.0 <= row["needle_retention"] <= 1.0, key
        assert 0.0 < row["nll_recovery"] < 2.0, key
        assert 0.0 < row["kv_fraction"] <= 1.0, key
        # --focus-lines: minutia's answers went through the app's retrieval (pin + recall); a press has no such path
        assert ("needle_line_retrieved" in row) == key.startswith("minutia"), key
    assert results["minutia@0.25"]["needle_line_retrieved"] == pytest.approx(1.0)
    assert measured >= 5
    for key in ("SnapKV@0.25", "StreamingLLM@0.25", "Knorm@0.25", "TOVA@0.25"):
        assert results[key]["kv_fraction"] == pytest.approx(0.25, abs=0.01), key
    # kvpress caches are gathered from one shared prefill: checked against kvpress's own hook
    assert report["press_check"]["equal"] is True


def test_quick_memory_part(quick_report) -> None:
    _, report = quick_report
    modes = {m["mode"]: m for m in report["memory"]}
    assert set(modes) == {"full", "minutia"}, report["memory"]
    full, minutia = modes["full"], modes["minutia"]
    assert full["tokens"] == minutia["tokens"] == 512
    assert full["peak_rss_mb"] > 0 and minutia["peak_rss_mb"] > 0
    assert minutia["final_kv_bytes_full_attention"] < full["final_kv_bytes_full_attention"]
    assert minutia["final_kv_bytes_sliding"] == full["final_kv_bytes_sliding"]
