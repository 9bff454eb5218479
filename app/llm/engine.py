"""The LLM engine: a stock Hugging Face causal LM loaded from a local folder, and prompt sets.

Backend details (dtype, threads, chat template or completion prompts, stop strings) stay here so
the assistant code only asks for "complete this prompt".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from app.platform.config import CONFIG_DIR, KVSettings, LLMSettings, kv_cache
from encoders.errors import InputError
from encoders.fair_lock import FairLock
from kvstore.annotations import EntityFinder, TokenFlag, tokens_in_spans


@dataclass(frozen=True)
class PromptSet:
    style: str  # "completion" (base model) or "chat" (model's chat template)
    example: str
    answer: str
    summary_example: str
    summary: str
    summary_reduce: str
    summary_prefix: str  # the start of the summary that the template already wrote, kept in the output
    not_found: str

    def answer_from(self, generated: str) -> str | None:
        """The model's answer in what it generated; None when it said nothing or that the meeting does not say
        (batch and live read a generation the same way)."""
        text = generated.strip()
        return None if not text or self.not_found.lower() in text.lower() else text

    def summary_from(self, generated: str) -> str:
        """The summary: the prefix the template already wrote, then what the model generated."""
        return f"{self.summary_prefix} {generated}".strip() if self.summary_prefix else generated


def load_prompts(name_or_path: str) -> PromptSet:
    path = Path(name_or_path)
    if not path.is_file():
        path = CONFIG_DIR / "prompts" / f"{name_or_path}.yaml"
    if not path.is_file():
        raise InputError(f"prompt set '{name_or_path}' not found (configs/prompts/*.yaml or a path)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"prompt set {path} is not valid YAML ({getattr(exc, 'problem', None) or exc})") from exc
    try:
        # Templates end where the model continues ("Answer:"), so trailing newlines from YAML go.
        return PromptSet(**{key: str(data.get(key, "")).rstrip() for key in PromptSet.__dataclass_fields__})
    except AttributeError as exc:
        raise InputError(f"prompt set {path} must be a mapping") from exc


@dataclass(frozen=True)
class Completion:
    text: str
    mean_logprob: float  # average log-probability of the generated tokens: a cheap confidence
    prompt_tokens: int
    new_tokens: int
    kv_bytes: int = 0  # bytes the KV cache held at the end (all layers), measured from its tensors
    kv_full_bytes: int = 0  # what a full-precision cache of the same tokens would hold


@dataclass(frozen=True)
class LivePrompts:
    header: str  # before the meeting's lines (worked example, instructions, chat turn start)
    answer_tail: str  # after them, with {question}
    summary_tail: str


def native_dtype(cpuinfo: str | None = None) -> str:
    """The number format this machine computes the model fastest in without losing what bfloat16 keeps: bfloat16 on
    a GPU, or on a CPU with bfloat16 instructions (AVX512-BF16, AMX); float32 on any other CPU, where bfloat16 is
    emulated and about 5x slower (Gemma 3 270M over 1,500 tokens: 45 s against 8 s on an AVX2-only EPYC)."""
    import torch

    if torch.cuda.is_available():
        return "bfloat16"
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    flags = set(cpuinfo.split())
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def join_example(example: str, template: str) -> str:
    return f"{example}\n\n{template}" if example else template


class LLMEngine:
    """One loaded model. ``complete`` is serialised: a CPU has no spare cores for two decodes."""

    def __init__(self, folder: Path, settings: LLMSettings, kv: KVSettings | None = None):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        transformers.utils.logging.disable_progress_bar()
        transformers.logging.set_verbosity_error()
        if settings.threads:
            torch.set_num_threads(settings.threads)
        dtype = getattr(torch, native_dtype() if settings.dtype == "auto" else settings.dtype)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
            self.model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot load the LLM from {folder}: {exc}".splitlines()[0]) from exc
        if settings.adapter:
            self.model = _with_adapter(self.model, Path(settings.adapter).expanduser())
        self.model.eval()
        self.settings = settings
        self.kv = kv or KVSettings()
        if self.kv.enabled:
            from kvstore.attention import use_minutia_attention

            use_minutia_attention(self.model)
        self.prompts = load_prompts(settings.prompts)
        if self.prompts.style == "chat" and not getattr(self.tokenizer, "chat_template", None):
            raise InputError(f"prompt set '{settings.prompts}' needs a model with a chat template; {folder} has none")
        model_max = getattr(self.model.config, "max_position_embeddings", None) or settings.max_context_tokens
        self.context_tokens = min(settings.max_context_tokens, int(model_max))
        self.lock = FairLock(reentrant=True)  # one forward at a time, meetings served in turn: a CPU has no spare cores for two
        self._stops: dict[tuple[str, ...], object] = {}

    @classmethod
    def from_settings(cls, settings: LLMSettings, home: Path, kv: KVSettings | None = None) -> "LLMEngine":
        from app.platform.models import EMBEDDED_LLM, resolve_model

        folder = resolve_model(settings.model, home, "LLM", EMBEDDED_LLM, "config.json")
        return cls(folder, settings, kv)

    def full_kv_bytes_per_token(self) -> int:
        """KV bytes one token costs in the full-attention layers at the model's precision."""
        cfg = self.model.config.get_text_config(decoder=True)
        kinds = getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers
        full_layers = sum(1 for kind in kinds if kind not in ("sliding_attention", "chunked_attention"))
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return 2 * full_layers * cfg.num_key_value_heads * head_dim * self.model.dtype.itemsize

    def new_cache(self, expected_tokens: int):
        """A fresh KV cache for one prompt: minutia's TieredCache unless disabled in the config.

        The budget is a byte budget for the whole prompt (``budget_ratio`` of its full KV bytes), not a
        ratio of the tokens seen so far: a ratio enforced from the first prefill chunk on squeezes the
        early context against a tiny budget and drops it for good (bench/kv_quality.py, "ratio" rows).
        """
        # a short prompt is not squeezed: the budget never falls below budget_floor_tokens at full precision
        budget_tokens = max(self.kv.budget_ratio * expected_tokens, self.kv.budget_floor_tokens)
        budget_bytes = int(budget_tokens * self.full_kv_bytes_per_token())
        return kv_cache(self.kv, self.model.config, budget_bytes)

    def live_prompts(self) -> "LivePrompts":
        """The answer and summary templates cut at ``{transcript}``, for a meeting held in the KV cache.

        The meeting is prefilled once after the answer template's head (worked example, instructions,
        chat turn start); a question or a summary request then only appends its template's tail.
        """
        marker = "\x00TRANSCRIPT\x00"
        answer = join_example(self.prompts.example, self.prompts.answer)
        answer_head, answer_tail = self.render(answer.replace("{transcript}", marker)).split(marker, 1)
        summary_tail = self.render(self.prompts.summary.replace("{transcript}", marker)).split(marker, 1)[1]
        return LivePrompts(header=answer_head, answer_tail=answer_tail, summary_tail=summary_tail)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def render(self, body: str) -> str:
        """The final prompt text: completion style as-is, chat style through the model's template."""
        if self.prompts.style == "chat":
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": body}], tokenize=False, add_generation_prompt=True
            )
        return body

    def _stop_criteria(self, stop: tuple[str, ...]):
        """Stop-string criteria, built once per set of strings: building one scans the whole vocabulary
        (seconds for Gemma's 262k tokens), so it must not happen on every question."""
        from transformers import StoppingCriteriaList, StopStringCriteria

        if not stop:
            return None
        if stop not in self._stops:
            self._stops[stop] = StoppingCriteriaList([StopStringCriteria(self.tokenizer, list(stop))])
        return self._stops[stop]

    def entity_positions(self, prompt: str) -> list[int]:
        """Token positions of the prompt's numbers and names (kvstore.annotations.EntityFinder): the
        cache's structural bonus keeps their blocks sharper. Empty without a fast tokenizer (offsets)."""
        if not getattr(self.tokenizer, "is_fast", False):
            return []
        enc = self.tokenizer(prompt, add_special_tokens=self.prompts.style != "chat", return_offsets_mapping=True)
        return tokens_in_spans(enc.offset_mapping, EntityFinder().find(prompt))

    def complete(self, prompt: str, max_new_tokens: int | None = None, stop: tuple[str, ...] = ()) -> Completion:
        import torch
        from transformers import LogitsProcessorList

        from app.llm.repetition import NoRepeatInAnswer

        max_new = max_new_tokens or self.settings.max_new_tokens
        encoded = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=self.prompts.style != "chat")
        n_prompt = encoded.input_ids.shape[1]
        if n_prompt + max_new > self.context_tokens:
            raise InputError(
                f"prompt of {n_prompt} tokens plus {max_new} to generate does not fit the model's "
                f"context of {self.context_tokens} tokens"
            )
        with self.lock, torch.inference_mode():
            cache = self.new_cache(n_prompt + max_new)
            if hasattr(cache, "annotate"):
                cache.annotate(self.entity_positions(prompt), TokenFlag.ENTITY)
            out = self.model.generate(
                **encoded,
                past_key_values=cache,
                max_new_tokens=max_new,
                do_sample=False,
                # No phrase twice in the answer; the prompt's are not counted: answering from a transcript means
                # copying from it (app/llm/repetition.py).
                logits_processor=LogitsProcessorList([NoRepeatInAnswer(n_prompt)]),
                stopping_criteria=self._stop_criteria(stop),
                return_dict_in_generate=True,
                output_scores=True,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
        new_ids = out.sequences[0, n_prompt:]
        logprobs = [
            torch.log_softmax(score[0].float(), dim=-1)[tok].item() for score, tok in zip(out.scores, new_ids)
        ]
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        for s in stop:
            text = text.split(s)[0]
        kv_bytes, kv_full = _cache_bytes(cache)
        return Completion(
            text=text.strip(),
            mean_logprob=sum(logprobs) / max(1, len(logprobs)),
            prompt_tokens=n_prompt,
            new_tokens=len(new_ids),
            kv_bytes=kv_bytes,
            kv_full_bytes=kv_full,
        )


def _with_adapter(model, folder: Path):
    """``model`` with a LoRA adapter merged into its weights: the same architecture and speed as before, so the KV
    store's attention and kernels see an ordinary model."""
    if not (folder / "adapter_config.json").is_file():
        raise InputError(f"no LoRA adapter at {folder} (a folder with adapter_config.json, from bench/reader_lora.py)")
    from peft import PeftModel

    try:
        return PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise InputError(f"the adapter at {folder} does not fit this model: {exc}".splitlines()[0]) from exc


def _cache_bytes(cache: object) -> tuple[int, int]:
    """(bytes held, full-precision bytes) of the tiered (full-attention) layers; all layers of a DynamicCache."""
    if hasattr(cache, "kv_bytes"):
        return int(cache.kv_bytes(include_sliding=False)), int(cache.full_precision_bytes())  # type: ignore[attr-defined]
    held = sum(
        t.numel() * t.element_size()
        for layer in getattr(cache, "layers", [])
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
        if t is not None and hasattr(t, "numel")
    )
    return held, held
