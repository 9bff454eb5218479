"""bench/kv_formats.py: the codec pairs it takes, the bits it counts, and one small real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.shared_data_marks import mark, needs_shared
from bench.kv_formats import DEFAULT_CODEBOOKS, bits_per_element, parse_pairs, read_back

ROOT = Path(__file__).resolve().parent.parent


def test_pairs_name_codecs_only():
    assert parse_pairs("full:int2, int4:int2") == [("full", "int2"), ("int4", "int2")]
    assert parse_pairs("vq:int2") == [("vq", "int2")]  # the learned codebooks
    for bad in ("k4v2:int2", "int3:int2", ""):  # a split format is given as its two codecs
        with pytest.raises(ValueError):
            parse_pairs(bad)


def test_bits_count_the_group_scales():
    assert bits_per_element("full", 32) == 16
    assert bits_per_element("int2", 32) == 3 and bits_per_element("int4", 64) == 4.5
    assert bits_per_element("fp8", 32) == 8.5  # a scale, no zero point


def test_read_back_uses_the_cache_layout():
    x = torch.randn(1, 2, 64, 32)
    keys, values = read_back(x, "int2", True, 32), read_back(x, "int2", False, 32)
    # keys: a channel's 32 tokens share a scale (<= 4 levels); values: a token's 32 channels do
    assert max(len(torch.unique(keys[0, h, :32, d])) for h in range(2) for d in range(32)) <= 4
    assert max(len(torch.unique(values[0, h, t])) for h in range(2) for t in range(64)) <= 4
    assert max(len(torch.unique(keys[0, h, t])) for h in range(2) for t in range(64)) > 4
    assert read_back(x, "full", True, 32) is x


def test_vq_reads_back_each_token_through_the_layer_s_codebook():
    from kvstore.quant.codebook import calibrate

    x = torch.randn(1, 2, 64, 32)
    book = calibrate(x[0].transpose(0, 1), dims=4, bits=4, iters=5)  # [T, H, D] samples
    back = read_back(x, "vq", True, 32, book)
    assert back.shape == x.shape
    assert torch.equal(back[0].transpose(0, 1), book.dequantize(book.quantize(x[0].transpose(0, 1))))


def test_the_shipped_codebooks_were_learned_on_the_tuning_part_only():
    """The codebooks ship with the project (bench/kv_calibrate.py wrote them): every full-attention layer of Gemma 3
    270M, keys and values, 2 bits per element, and none of the meetings they were learned on is held out."""
    from bench.qmsum_split import kv_part_of
    from kvstore.quant.codebook import load_codebooks

    books, about = load_codebooks(DEFAULT_CODEBOOKS)
    assert about["part"] == "tuning" and about["meetings"]
    assert all(kv_part_of(f"{name}.json") == "tuning" for name in about["meetings"].split(","))
    layers = about["layers"].split(",")
    assert set(books) == {f"{i}.{kind}" for i in layers for kind in ("keys", "values")}
    assert all(b.bits_per_element == 2.0 and b.centroids.shape[-2:] == (256, 4) for b in books.values())


@mark(needs_shared("qmsum", "val"))
def test_a_small_run_ranks_int8_above_int2(tmp_path):
    from tests.test_kv_quality_bench import _model_dir

    if not (_model_dir() / "config.json").is_file():
        pytest.skip("needs the embedded Gemma 3 270M and QMSum validation (make setup)")
    out = tmp_path / "f.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "kv_formats.py"), "--limit", "1", "--max-tokens", "768",
                           "--recent", "128", "--pairs", "int8:int8,int2:int2,vq:int2", "--dtype", "auto", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["dtype"] in ("float32", "bfloat16")  # auto: the app's choice for this machine
    rows = {r["keys:values"]: r for r in report["rows"]}
    assert rows["int8:int8"]["nll_recovery"] > 0.995
    assert rows["int2:int2"]["nll_recovery"] < rows["int8:int8"]["nll_recovery"]
    assert rows["int2:int2"]["of_bf16"] == 0.188
    assert rows["vq:int2"]["of_bf16"] == 0.156 and rows["vq:int2"]["nll_recovery"] < rows["int8:int8"]["nll_recovery"]
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "kv_formats.py"), "--pairs", "vq:int2",
                          "--codebooks", str(tmp_path / "none.safetensors")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "no codebooks at" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "kv_formats.py"), "--pairs", "int3:int2"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "unknown codec 'int3'" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "kv_formats.py"), "--group-size", "0"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "--group-size must be positive" in bad.stderr and "Traceback" not in bad.stderr
