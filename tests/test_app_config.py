"""Settings: preset < environment < explicit overrides; bad config is one InputError."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.platform.config import CONFIG_DIR, DEFAULT_PRESET, load_settings
from encoders.errors import InputError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("MINUTIA_"):
            monkeypatch.delenv(key)


def test_default_preset_is_cpu_small():
    s = load_settings()
    assert DEFAULT_PRESET == "cpu-small"
    assert s.preset == "cpu-small"
    assert s.llm.model == "gemma-3-270m" and s.llm.answer_context_turns == 3
    assert s.asr.device == "cpu" and s.asr.compute_type == "int8"


def test_gpu_8b_preset_loads():
    s = load_settings("gpu-8b")
    assert s.preset == "gpu-8b"
    assert s.asr.device == "cuda"
    assert s.llm.prompts == "chat"
    assert s.llm.answer_context_turns is None
    assert s.llm.max_context_tokens == 32768
    assert s.diarization.max_speakers == 12


def test_preset_by_path_and_by_env(monkeypatch, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("llm:\n  max_new_tokens: 7\n")
    s = load_settings(str(path))
    assert s.preset == "mine" and s.llm.max_new_tokens == 7
    assert s.asr.model == "whisper-base"  # unspecified fields keep their defaults
    monkeypatch.setenv("MINUTIA_CONFIG", "gpu-8b")
    assert load_settings().preset == "gpu-8b"
    assert load_settings("cpu-small").preset == "cpu-small"  # an explicit preset beats MINUTIA_CONFIG


def test_env_overrides_preset(monkeypatch, tmp_path):
    monkeypatch.setenv("MINUTIA_ASR__BEAM_SIZE", "1")
    monkeypatch.setenv("MINUTIA_HOME", str(tmp_path))
    s = load_settings()
    assert s.asr.beam_size == 1
    assert s.asr.compute_type == "int8"  # the rest of the nested preset section survives
    assert s.home == tmp_path


def test_explicit_overrides_beat_env(monkeypatch):
    monkeypatch.setenv("MINUTIA_ASR__BEAM_SIZE", "1")
    monkeypatch.setenv("MINUTIA_LLM__MODEL", "/from/env")
    s = load_settings(None, {"asr": {"beam_size": 3}, "llm": {"model": "/from/flag"}})
    assert s.asr.beam_size == 3
    assert s.llm.model == "/from/flag"
    # None means "flag not given": the environment value stays.
    s = load_settings(None, {"asr": {"beam_size": None}, "llm": {"model": None}})
    assert s.asr.beam_size == 1 and s.llm.model == "/from/env"


def test_unknown_preset_lists_known_ones():
    with pytest.raises(InputError) as info:
        load_settings("no-such-preset")
    message = str(info.value)
    assert "no-such-preset" in message
    for preset in CONFIG_DIR.glob("*.yaml"):
        assert preset.stem in message
    with pytest.raises(InputError):
        load_settings("/does/not/exist.yaml")


def test_invalid_yaml_is_one_line_input_error(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("llm: [unclosed\n  model: x\n")
    with pytest.raises(InputError) as info:
        load_settings(str(path))
    assert "not valid YAML" in str(info.value)
    assert "\n" not in str(info.value)  # the CLI prints it as one `error:` line


def test_yaml_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(InputError, match="mapping"):
        load_settings(str(path))


@pytest.mark.parametrize(
    "yaml_text, where",
    [
        ("llm:\n  max_context_token: 4096\n", "llm.max_context_token"),  # typo in a nested key
        ("asr:\n  beam_size: many\n", "asr.beam_size"),
        ("diarization:\n  backend: magic\n", "diarization.backend"),
        ("lmm:\n  model: x\n", "lmm"),
    ],
)
def test_invalid_preset_values(tmp_path, yaml_text, where):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(InputError, match=f"invalid setting {where}"):
        load_settings(str(path))


def test_invalid_env_value(monkeypatch):
    monkeypatch.setenv("MINUTIA_LLM__DTYPE", "int3")
    with pytest.raises(InputError, match="llm.dtype"):
        load_settings()


def test_invalid_override_value():
    with pytest.raises(InputError, match="diarization.num_speakers"):
        load_settings(None, {"diarization": {"num_speakers": "three"}})


@pytest.mark.parametrize("diarization", [{"num_speakers": 1000}, {"num_speakers": 0}, {"num_speakers": -1},
                                         {"min_speakers": 5, "max_speakers": 2}, {"max_speakers": 500}])
def test_impossible_speaker_counts_are_refused_when_the_settings_load(diarization):
    """Issue 49 F10: 1000 was accepted (117 speakers came out); 0 and -1 were refused only after 19 s of work."""
    with pytest.raises(InputError, match="invalid setting diarization"):
        load_settings(None, {"diarization": diarization})


def test_presets_are_valid():
    for preset in sorted(CONFIG_DIR.glob("*.yaml")):
        assert load_settings(preset.stem).preset == preset.stem
        assert load_settings(str(preset)).preset == preset.stem


def test_empty_preset_file_gives_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    s = load_settings(str(path))
    assert s.llm.model == "gemma-3-270m" and s.asr.beam_size == 5
    assert isinstance(s.home, Path)


def test_one_conversion_to_cache_settings_for_batch_and_live():
    """Batch prompts (a byte budget) and live meetings (a ratio) get every knob from the same conversion."""
    from app.platform.config import tiered_cache_config

    kv = load_settings(overrides={"kv": {"device_cap_mib": 64, "watermark": 0.7, "modalities": {"audio": {"preferred": "int8"}},
                                          "warm_kinds": ["int8", "int4"]}}).kv
    live, batch = tiered_cache_config(kv), tiered_cache_config(kv, budget_bytes=1 << 20)
    assert live.budget_ratio == kv.budget_ratio and live.budget_bytes is None
    assert batch.budget_ratio is None and batch.budget_bytes == 1 << 20
    for cfg in (live, batch):
        assert cfg.device_cap_bytes == 64 << 20 and cfg.watermark == 0.7
        assert cfg.modalities["audio"].preferred == "int8" and cfg.warm_kinds == ("int8", "int4")
        assert cfg.budget_floor_tokens == kv.budget_floor_tokens and cfg.recent_tokens == kv.recent_tokens


def test_modality_names_come_from_the_one_enum(tmp_path):
    from kvstore.modality import MODALITY_NAMES, Modality

    assert MODALITY_NAMES == tuple(m.name.lower() for m in Modality) == ("text", "audio", "video")
    with pytest.raises(InputError, match="modalities"):
        load_settings(overrides={"kv": {"modalities": {"smell": {"preferred": "int8"}}}})


def test_scorer_weights_default_to_kvstore_and_change_by_entry(monkeypatch):
    """No ``kv.scorers``: the cache gets kvstore's ScoreWeights, in order; an entry changes, adds or (at 0)
    removes one term, from the config or the environment."""
    from app.platform.config import tiered_cache_config
    from kvstore.scoring import ScoreWeights

    assert list(tiered_cache_config(load_settings().kv).weights.items()) == list(ScoreWeights().items())
    monkeypatch.setenv("MINUTIA_KV__SCORERS__STRUCTURAL", "0.6")
    kv = load_settings(overrides={"kv": {"scorers": {"query": 0}}}).kv
    assert tiered_cache_config(kv).weights == {"accumulated": 1.0, "position": 0.5, "structural": 0.6}
    monkeypatch.setenv("MINUTIA_KV__SCORERS", '{"position": 2}')
    monkeypatch.delenv("MINUTIA_KV__SCORERS__STRUCTURAL")
    assert tiered_cache_config(load_settings().kv).weights["position"] == 2.0


def test_unknown_or_negative_scorer_weights_are_one_clear_error():
    with pytest.raises(InputError, match=r"kv.scorers: .*unknown scorers \['recency'\] \(registered: accumulated, "
                                         r".*query, structural"):
        load_settings(overrides={"kv": {"scorers": {"recency": 1.0}}})
    with pytest.raises(InputError, match="kv.scorers.query: Input should be greater than or equal to 0"):
        load_settings(overrides={"kv": {"scorers": {"query": -1}}})
