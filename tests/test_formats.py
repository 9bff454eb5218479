"""kernels.formats is the one table of block formats: everything that names formats follows it.

The codes below are the compatibility contract: checkpoints persist them and the kernels branch on
them, so they never change; a new format is a new row (and its kernel code), nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from app.platform.config import KVSettings, ModalitySettings
from kernels import cpu_decode, reference
from kvstore.config import ModalityPolicy, TieredCacheConfig
from kernels.formats import BY_NAME, CODEC_NAMES, CODECS, FORMATS, NAMES, QUANTIZED, QUANTIZED_NAMES, BlockFormat, Format
from kvstore.quant import QUANTIZERS, get_quantizer
from kvstore.quant.registry import quantizer_class

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
CODES = {"full": 0, "int8": 1, "int4": 2, "fp8": 3, "int2": 4, "k4v2": 5}
CPU_CODES = {"int8": 3, "int4": 4, "fp8": 5, "int2": 6}


def test_codes_are_unchanged_unique_and_dense():
    assert {f.name: f.code for f in FORMATS} == CODES
    assert {f.name: f.cpu_code for f in CODECS} == CPU_CODES
    # Page tables index per-format tensors by code (range(len(BlockFormat))).
    assert sorted(f.code for f in FORMATS) == list(range(len(FORMATS)))
    assert FORMATS[0].name == "full" and all(f.bits for f in CODECS)


def test_a_split_format_is_two_codecs_and_nothing_of_its_own():
    split = [f for f in QUANTIZED if f.parts]
    assert [f.name for f in split] == ["k4v2"] and BY_NAME["k4v2"].parts == ("int4", "int2")
    for f in split:
        assert f.bits is None and f.cpu_code is None and f.name not in CODEC_NAMES
        assert {f.key_codec, f.value_codec} <= set(CODEC_NAMES)
        # between its parts in what it keeps, so the planner's hull can use it between INT2 and INT4
        assert BY_NAME[f.value_codec].fidelity < f.fidelity < BY_NAME[f.key_codec].fidelity
    assert all((f.key_codec, f.value_codec) == (f.name, f.name) for f in CODECS)


def test_enum_follows_the_table():
    assert [(m.kind, int(m)) for m in BlockFormat] == [(f.name, f.code) for f in FORMATS]
    assert [int(BlockFormat.from_kind(f.name)) for f in FORMATS] == [f.code for f in FORMATS]


def test_every_codec_has_a_quantizer():
    assert tuple(QUANTIZERS) == CODEC_NAMES
    for f in CODECS:
        q = get_quantizer(f.name, group_size=16)
        assert (q.kind, q.bits) == (f.name, f.bits)
    # A new row needs no quantizer module.
    cls = quantizer_class(Format("int3", 9, 3, 0.8))
    assert (cls.__name__, cls.kind, cls.bits) == ("Int3Quantizer", "int3", 3)


def test_configs_accept_the_table_names_only():
    assert set(TieredCacheConfig().fidelity.items()) == {(f.name, f.fidelity) for f in FORMATS}
    TieredCacheConfig(warm_kinds=QUANTIZED_NAMES, modalities={"audio": ModalityPolicy(preferred="full")})
    with pytest.raises(ValueError, match="unknown warm formats"):
        TieredCacheConfig(warm_kinds=("int3",))
    with pytest.raises(ValueError, match="fidelity of unknown formats"):
        TieredCacheConfig(fidelity={"int3": 0.8})
    # a partial fidelity map (say, written before a format was added) keeps the table's value for the rest
    partial = TieredCacheConfig(fidelity={"int4": 0.95}).fidelity
    assert partial["int4"] == 0.95 and partial["k4v2"] == BY_NAME["k4v2"].fidelity and set(partial) == set(NAMES)
    warm = KVSettings.model_fields["warm_kinds"].annotation
    assert get_args(get_args(warm)[0]) == QUANTIZED_NAMES
    assert get_args(get_args(ModalitySettings.model_fields["preferred"].annotation)[0]) == NAMES
    assert get_args(reference.QuantKind) == CODEC_NAMES


def test_kernel_code_maps_follow_the_table():
    assert cpu_decode._QUANT_KINDS == CPU_CODES
    for f in FORMATS:
        if f.parts:  # two codecs' codes: no one packing to give
            with pytest.raises(ValueError, match="two codecs"):
                reference.codes_per_byte(f.name)
        else:
            assert reference.codes_per_byte(f.name) == 8 // (f.bits or 8)


def test_codes_hard_coded_in_kernel_sources_agree():
    cpp = (KERNELS / "csrc" / "cpu_decode.cpp").read_text()
    kinds = dict(re.findall(r"K_(\w+) = (\d+)", re.search(r"enum Kind \{([^}]*)\}", cpp).group(1)))
    for f in CODECS:
        assert int(kinds[f.name.upper()]) == f.cpu_code, f.name
    # Triton device code branches on literals, each marked with its format's name.
    for name in ("triton_decode.py", "triton_quant.py"):
        source = (KERNELS / name).read_text()
        branches = re.findall(r"KIND == (\d+):  # (\w+)", source)
        assert branches and all(BY_NAME[fmt].code == int(code) for code, fmt in branches), name
        assert not re.search(r"KIND == \d+:(?!  # \w)", source), f"{name}: a KIND branch without its format's name"
