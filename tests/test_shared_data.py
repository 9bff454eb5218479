"""A user's clone has no ../shared (issue 49): every test that reads the development data is marked, follows the
one setting, and skips with its reason where the data is absent, instead of failing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from bench.shared_data import elitr, qmsum_val, shared_data

ROOT = Path(__file__).resolve().parent.parent


def test_the_setting_moves_every_data_set(monkeypatch, tmp_path):
    monkeypatch.setenv("MINUTIA_SHARED_DATA", str(tmp_path))
    assert shared_data("x") == tmp_path / "x"
    assert qmsum_val() == tmp_path / "qmsum" / "val" and elitr() == tmp_path / "elitr"
    monkeypatch.delenv("MINUTIA_SHARED_DATA")
    assert qmsum_val() == ROOT.parent / "shared" / "data" / "qmsum" / "val"


def test_with_the_data_absent_its_tests_skip_and_none_fails(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "shared_data", "-p", "no:cacheprovider", "tests"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "MINUTIA_SHARED_DATA": str(tmp_path / "empty")},
    )
    tail = done.stdout[-3000:]
    assert done.returncode == 0, tail
    skipped = re.search(r"(\d+) skipped", tail)
    assert skipped and int(skipped.group(1)) >= 5, tail  # the QMSum and ELITR tests
    assert not re.search(r"\d+ (passed|failed|error)", tail), tail
