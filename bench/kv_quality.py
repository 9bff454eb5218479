#!/usr/bin/env python
"""KV-cache quality benchmark: minutia's TieredCache vs the full cache vs kvpress presses, same bytes.

Usage (from the repository root)::

    python bench/kv_quality.py --limit 4 --max-tokens 4096 --needles 20 --out out/kv_quality
    python bench/kv_quality.py --quick --out /tmp/kvq          # smoke test (< 1 min)

For each QMSum meeting (``--data``, default ``../shared/data/qmsum/val``) the speaker-tagged transcript
(``Speaker: text`` lines, truncated to ``--max-tokens``, at most the model's context) is prefilled
once per method, then for every specific query (the cache is checkpointed / restored, so each query
sees the same meeting cache):

1. span retention: share of the tokens of the query's gold ``relevant_text_span`` turns that are still
   readable (L1 full precision or L2 quantized) in the full-attention layers when the query is asked;
2. answer NLL recovery: full-cache NLL of the gold answer (teacher-forced after the query prompt)
   divided by the method's NLL (reported as the ratio of the mean NLLs over all queries);
3. needle accuracy: synthetic facts (an access code, a budget, a contact name) inserted as extra turns
   at spread depths of the transcripts, asked back, exact match of the greedy answer.

Methods, side by side in one run: the full cache (transformers' DynamicCache), minutia at each budget
(``--budgets``, fractions of the full bf16 KV bytes of the full-attention layers; chunked prefill that
compresses as it goes), and kvpress presses (StreamingLLM, SnapKV, Knorm, TOVA, ExpectedAttention) at
``compression_ratio = 1 - budget``. Gemma 3 keeps a 512-token window in 5 of every 6 layers; minutia
leaves those windows alone and tiers the full-attention layers, and kvpress does the same for Gemma 3
(its own policy for Gemma3ForConditionalGeneration), so the sliding windows are identical across
methods and bytes are equalised on the full-attention layers. kvpress presses compress only the
prefill (one pass over the whole context), so they run on one shared full prefill: every press used
here is a ScorerPress whose choice depends only on that layer's uncompressed K/V and hidden states,
so the kept indices are computed in hooks during the full prefill and each press's cache is gathered
from the full cache; the bench checks once per run that this gives bitwise the same cache as kvpress's
own forward hook.

A second part measures peak process RSS and KV bytes while prefilling a long meeting (``--memory-tokens``,
16K by default) with a 25% budget vs the full cache, each in a fresh subprocess.

Writes ``kv_quality.md``, ``kv_quality.json`` and ``kv_quality.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import os
import platform
import random
import resource
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.qmsum_split import PARTS, kv_part_of  # noqa: E402
from bench.shared_data import qmsum_val  # noqa: E402

DEFAULT_DATA = qmsum_val()
PRESS_NAMES = ("StreamingLLM", "SnapKV", "Knorm", "TOVA", "ExpectedAttention")
QUERY_TEMPLATE = "\n\nQuestion: {question}\nAnswer:"
CONTEXT_HEADER = "Meeting transcript:\n"


def default_model_dir() -> Path:
    home = os.environ.get("MINUTIA_HOME")
    base = Path(home) / "models" if home else Path.home() / ".cache" / "minutia" / "models"
    return base / "gemma-3-270m"


def load_quietly(model_dir: Path, threads: int, dtype: str = "bf16"):
    """(tokenizer, model) of a local folder in ``dtype`` (bfloat16 unless told; "auto": the app's choice for this
    machine) with SDPA, on ``threads`` CPU threads, without the library's warnings and progress bars (a bench's own
    progress is what it prints)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=_dtype(dtype), attn_implementation="sdpa").eval()
    return tokenizer, model


# ------------------------------------------------------------------------------------------------
# Data: meetings, needles, token -> turn map
# ------------------------------------------------------------------------------------------------


@dataclass
class Turn:
    speaker: str
    text: str
    source_index: int | None  # index in meeting_transcripts; None for an inserted needle
    needle: int | None = None  # index into Meeting.needles


@dataclass
class Needle:
    kind: str
    fact: str
    question: str
    prefix: str
    answer: str
    depth: float = 0.0  # target depth in the (truncated) context
    token_start: int = -1
    token_end: int = -1


@dataclass
class Query:
    question: str
    answer: str
    spans: list[tuple[int, int]]  # inclusive source turn ranges


@dataclass
class Meeting:
    name: str
    turns: list[Turn]
    queries: list[Query]
    needles: list[Needle] = field(default_factory=list)
    # filled by encode():
    input_ids: Any = None
    token_turn: Any = None  # [T] index into turns (-1 for the header / BOS)
    full_tokens: int = 0  # length of the whole transcript before truncation
    entity_tokens: list[int] = field(default_factory=list)  # positions kvstore.annotations.EntityFinder marks
    line_index: Any = None  # (app.answering.retrieval.SentenceIndex over the turns in context, their turn indices); built once


SUBJECTS = ["Falcon", "Orchid", "Granite", "Nimbus", "Juniper", "Cobalt", "Saffron", "Tundra", "Meridian",
            "Quartz", "Lynx", "Harbor", "Ember", "Willow", "Atlas", "Vega", "Cedar", "Polaris", "Sierra",
            "Onyx", "Aurora", "Beacon", "Pelican", "Topaz", "Zephyr", "Mistral", "Basalt", "Condor", "Heron",
            "Indigo", "Jasper", "Kestrel"]
FIRST = ["Marta", "Oskar", "Ingrid", "Tomasz", "Aiko", "Rafael", "Leena", "Dmitri", "Sofia", "Kwame", "Helga",
         "Mateo", "Priya", "Jonas", "Elif", "Bruno"]
LAST = ["Kowalski", "Lindqvist", "Moreau", "Okafor", "Tanaka", "Brennan", "Vasquez", "Novak", "Haddad",
        "Schulz", "Ferreira", "Nakamura", "Petrov", "Delgado", "Andersen", "Rossi"]


VENDORS = ["Brightpath", "Stonegate", "Clearwater", "Greenfield", "Bluecrest", "Ironwood", "Silverline", "Northgate",
           "Redwood", "Kingsley", "Westbrook", "Ashford"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
NEEDLE_KINDS = ("code", "number", "name", "date", "email", "decision")
OLD_NEEDLE_KINDS = ("code", "number", "name")  # the figures of sessions 3-11 were measured with these


def make_needles(count: int, seed: int, kinds: tuple[str, ...] = OLD_NEEDLE_KINDS) -> list[Needle]:
    """``count`` distinct facts, the kinds in turn: access codes, budgets, contact names, dates, emails and
    decisions between vendors, each with its question. (With the default kinds the facts are those every
    earlier figure was measured with.)"""
    unknown = set(kinds) - set(NEEDLE_KINDS)
    if unknown or not kinds:
        raise ValueError(f"needle kinds are {', '.join(NEEDLE_KINDS)}, not {', '.join(sorted(unknown)) or 'none'}")
    rng = random.Random(seed)
    subjects = rng.sample(SUBJECTS, k=min(count, len(SUBJECTS)))
    while len(subjects) < count:
        subjects.append(f"{rng.choice(SUBJECTS)}-{len(subjects)}")
    needles = []
    for i, subject in enumerate(subjects):
        kind = kinds[i % len(kinds)]
        end = "."
        if kind == "code":
            value = str(rng.randint(1000, 9999))
            prefix = f"The access code for project {subject} is"
            question = f"What is the access code for project {subject}?"
        elif kind == "number":
            value = str(rng.randint(12, 98) * 500)
            prefix = f"The approved budget for the {subject} launch is"
            question = f"What is the approved budget for the {subject} launch, in euros?"
            end = " euros."
        elif kind == "name":
            value = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
            prefix = f"The contact person for the {subject} supplier is"
            question = f"Who is the contact person for the {subject} supplier?"
        elif kind == "date":
            value = f"{rng.choice(WEEKDAYS)}, {rng.choice(MONTHS)} {rng.randint(1, 28)}"
            prefix = f"The {subject} review is scheduled for"
            question = f"When is the {subject} review scheduled?"
        elif kind == "email":
            value = f"{rng.choice(FIRST).lower()}.{rng.choice(LAST).lower()}@{subject.lower()}.example"
            prefix = f"Questions about {subject} go to the email address"
            question = f"What is the email address for questions about {subject}?"
        else:
            value = rng.choice(VENDORS)
            prefix = f"For the {subject} contract, the team decided to go with"
            question = f"Which vendor did the team choose for the {subject} contract?"
        needles.append(Needle(kind=kind, fact=f"{prefix} {value}{end}", question=question, prefix=prefix,
                              answer=value))
    return needles


def load_meeting(path: Path) -> Meeting:
    data = json.loads(path.read_text())
    turns = [Turn(t.get("speaker") or "Speaker", " ".join(str(t.get("content", "")).split()), i)
             for i, t in enumerate(data["meeting_transcripts"])]
    queries = []
    for q in data.get("specific_query_list", []):
        spans = [(int(a), int(b)) for a, b in q.get("relevant_text_span", [])]
        if spans and q.get("answer"):
            queries.append(Query(q["query"], " ".join(q["answer"].split()), spans))
    return Meeting(path.stem, turns, queries)


def render(turns: list[Turn]) -> tuple[str, list[tuple[int, int]]]:
    """``Speaker: text`` lines; returns the text and each turn's character range."""
    parts, ranges, pos = [CONTEXT_HEADER], [], len(CONTEXT_HEADER)
    for turn in turns:
        line = f"{turn.speaker}: {turn.text}\n"
        ranges.append((pos, pos + len(line)))
        parts.append(line)
        pos += len(line)
    return "".join(parts), ranges


def encode(meeting: Meeting, tokenizer, max_tokens: int) -> None:
    """Tokenize (with BOS), truncate to ``max_tokens`` and build the token -> turn map."""
    import torch

    from kvstore.annotations import EntityFinder, tokens_in_spans

    text, ranges = render(meeting.turns)
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    starts = torch.tensor([a for a, _ in ranges], dtype=torch.long)
    char_start = torch.tensor([a if b > a else -1 for a, b in offsets], dtype=torch.long)
    turn = torch.searchsorted(starts, char_start, right=True) - 1
    turn[char_start < 0] = -1
    meeting.full_tokens = len(ids)
    meeting.entity_tokens = [i for i in tokens_in_spans(offsets, EntityFinder().find(text)) if i < max_tokens]
    meeting.input_ids = torch.tensor(ids[:max_tokens], dtype=torch.long).unsqueeze(0)
    meeting.token_turn = turn[:max_tokens]
    turn_of_needle = {t.needle: i for i, t in enumerate(meeting.turns) if t.needle is not None}
    for k, needle in enumerate(meeting.needles):
        where = torch.nonzero(meeting.token_turn == turn_of_needle[k]).flatten()
        # a needle counts only if its whole turn (fact + newline) is inside the truncated context
        complete = where.numel() and int(where.max()) + 1 < meeting.input_ids.shape[1]
        needle.token_start = int(where.min()) if complete else -1
        needle.token_end = int(where.max()) + 1 if complete else -1


def turns_in_context(meeting: Meeting, tokenizer, max_tokens: int) -> int:
    text, ranges = render(meeting.turns)
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=True)
    offsets = enc["offset_mapping"][:max_tokens]
    last_char = max((b for _, b in offsets), default=0)
    return sum(1 for _, end in ranges if end <= last_char)


def insert_needles(meeting: Meeting, needles: list[Needle], depths: list[float], n_fit: int) -> None:
    """Insert each needle as its own turn at ``depth`` of the turns that fit in the context."""
    positions = sorted(((max(1, min(n_fit - 1, round(d * n_fit))), i) for i, d in enumerate(depths)), reverse=True)
    for pos, i in positions:
        needles[i].depth = depths[i]
        speaker = meeting.turns[pos - 1].speaker if pos > 0 else "Speaker"
        meeting.turns.insert(pos, Turn(speaker, needles[i].fact, None, needle=i))
    meeting.needles = needles


def rank_meetings(files: list[Path], tokenizer, max_tokens: int) -> list[tuple[Meeting, int]]:
    """(meeting, turns in context) of the meetings with a query whose gold span fits the truncated context,
    those with the most such queries first (ties by file name): the meetings a ``--limit`` takes."""
    candidates = []
    for path in files:
        meeting = load_meeting(path)
        n_fit = turns_in_context(meeting, tokenizer, max_tokens)
        fits = sum(all(b < n_fit for _, b in q.spans) for q in meeting.queries)
        if fits:
            candidates.append((-fits, path.name, meeting, n_fit))
    return [(meeting, n_fit) for _, _, meeting, n_fit in sorted(candidates, key=lambda c: (c[0], c[1]))]


def usable_queries(meeting: Meeting, tokenizer) -> list[Query]:
    """The queries of an encoded meeting with at least half of their gold span's tokens in the context."""
    used = []
    for q in meeting.queries:
        span = query_span_tokens(meeting, q)
        if span.numel() and span.numel() >= 0.5 * query_span_total_tokens(meeting, q, tokenizer):
            used.append(q)
    return used


def query_span_tokens(meeting: Meeting, query: Query) -> Any:
    """Token positions (in the truncated context) of the query's gold turns."""
    import torch

    source = torch.tensor([-1 if t.source_index is None else t.source_index for t in meeting.turns], dtype=torch.long)
    in_span = torch.zeros(len(meeting.turns), dtype=torch.bool)
    for a, b in query.spans:
        in_span |= (source >= a) & (source <= b)
    valid = meeting.token_turn >= 0
    mask = torch.zeros_like(meeting.token_turn, dtype=torch.bool)
    mask[valid] = in_span[meeting.token_turn[valid]]
    return torch.nonzero(mask).flatten()


def query_span_total_tokens(meeting: Meeting, query: Query, tokenizer) -> int:
    """Tokens of the gold turns in the whole (untruncated) transcript, approximately (per turn)."""
    total = 0
    for turn in meeting.turns:
        if turn.source_index is not None and any(a <= turn.source_index <= b for a, b in query.spans):
            total += len(tokenizer(f"{turn.speaker}: {turn.text}\n", add_special_tokens=False)["input_ids"])
    return total


# ------------------------------------------------------------------------------------------------
# Caches: snapshot / restore, byte accounting, kvpress layers
# ------------------------------------------------------------------------------------------------


def _tensor_bytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _make_pressed_layer_class():
    from transformers.cache_utils import DynamicLayer

    class PressedLayer(DynamicLayer):
        """A full-attention DynamicLayer that kvpress compressed: ``kept`` rows of ``seen`` positions.

        kvpress leaves a plain DynamicLayer, whose mask size says "past = kept rows, offset 0". On
        Gemma 3 the cache's sequence length comes from layer 0 (a sliding layer, all positions), so the
        queries of the next forward start at position ``seen`` while the full-attention mask only spans
        ``kept + new`` columns: the new tokens would see each other non-causally (the teacher-forced
        answer would leak). This layer reports the offset, like TieredLayer does; RoPE positions and
        the kept K/V are unchanged.
        """

        def __init__(self, keys, values, seen: int) -> None:
            super().__init__()
            self.dtype, self.device = keys.dtype, keys.device
            self.keys, self.values = keys, values
            self.is_initialized = True
            self.seen = seen

        def update(self, key_states, value_states, cache_kwargs=None):
            out = super().update(key_states, value_states, cache_kwargs)
            self.seen += key_states.shape[-2]
            return out

        def get_seq_length(self) -> int:
            return self.seen

        def get_mask_sizes(self, cache_position):
            kept = self.keys.shape[-2]
            return kept + cache_position.shape[0], self.seen - kept

    return PressedLayer


def snapshot_dynamic(cache) -> list[dict]:
    """DynamicCache layers only ever replace their tensors (torch.cat), so a shallow copy is a snapshot."""
    return [dict(layer.__dict__) for layer in cache.layers]


def restore_dynamic(cache, snap: list[dict]) -> None:
    for layer, state in zip(cache.layers, snap):
        layer.__dict__.clear()
        layer.__dict__.update(state)


def dynamic_bytes(cache) -> tuple[int, int]:
    """(full-attention layers, sliding layers) KV bytes of a DynamicCache, from the tensors' sizes."""
    full = sliding = 0
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", False):
            continue
        n = _tensor_bytes(layer.keys, layer.values)
        if getattr(layer, "is_sliding", False):
            sliding += n
        else:
            full += n
    return full, sliding


def full_attention_layers(model) -> list[int]:
    return [i for i, t in enumerate(model.config.layer_types) if t == "full_attention"] if getattr(
        model.config, "layer_types", None) else list(range(model.config.num_hidden_layers))


# ------------------------------------------------------------------------------------------------
# kvpress: kept indices of every press from one shared prefill
# ------------------------------------------------------------------------------------------------


def make_presses(names: list[str], budgets: list[float], rotary_shim: bool) -> list[tuple[str, float, Any]]:
    import kvpress

    classes = {
        "StreamingLLM": kvpress.StreamingLLMPress,
        "SnapKV": kvpress.SnapKVPress,
        "Knorm": kvpress.KnormPress,
        "TOVA": kvpress.TOVAPress,
        "ExpectedAttention": kvpress.ExpectedAttentionPress,
    }
    out = []
    for name in names:
        for b in budgets:
            out.append((name, b, classes[name](compression_ratio=round(1.0 - b, 6))))
        if name == "ExpectedAttention" and rotary_shim:
            for b in budgets:
                out.append(("ExpectedAttention+shim", b, classes[name](compression_ratio=round(1.0 - b, 6))))
    return out


def _rotary_for_layer_type(rotary, layer_type: str):
    """Gemma 3's rotary embedding needs the layer type; kvpress's ExpectedAttention calls it without."""
    import torch

    class RotaryForLayerType(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            object.__setattr__(self, "rotary", rotary)  # not a submodule (no double registration)

        def forward(self, x, position_ids):
            return self.rotary(x, position_ids, layer_type=layer_type)

    return RotaryForLayerType()


class PressRecorder:
    """Forward hooks on the full-attention layers that run each press's scorer on the full prefill and
    record the indices it would keep (ScorerPress.compress: ``scores.topk(n_kept)``), without
    touching the cache. Errors are recorded per press (shown as n/a)."""

    def __init__(self, model, presses: list[tuple[str, float, Any]]) -> None:
        self.model = model
        self.presses = presses
        self.indices: dict[tuple[str, float], dict[int, Any]] = {}
        self.errors: dict[str, str] = {}

    def __enter__(self) -> "PressRecorder":
        lm = self.model.model.language_model if hasattr(self.model.model, "language_model") else self.model.model
        self.hooks = []
        self._saved_rotary = []
        for _, _, press in self.presses:
            press.post_init_from_model(self.model)
        for layer in lm.layers:
            attn = layer.self_attn
            if getattr(attn, "is_sliding", False):
                continue  # kvpress's Gemma 3 policy: sliding-window layers keep their window
            self.hooks.append(attn.register_forward_hook(self._hook, with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for hook in self.hooks:
            hook.remove()
        lm = self.model.model.language_model if hasattr(self.model.model, "language_model") else self.model.model
        for layer in lm.layers:
            layer.self_attn._modules.pop("rotary_emb", None)

    def _hook(self, module, args, kwargs, output):
        import torch
        from kvpress.utils import compute_n_kept, extract_keys_and_values

        hidden_states = kwargs["hidden_states"]
        cache = kwargs["past_key_values"]
        keys, values = extract_keys_and_values(cache, module.layer_idx)
        lm = self.model.model.language_model if hasattr(self.model.model, "language_model") else self.model.model
        for name, budget, press in self.presses:
            if name in self.errors:
                continue
            # what BasePress.__call__ does before registering its hook
            if name.endswith("+shim"):
                module.rotary_emb = _rotary_for_layer_type(lm.rotary_emb, "full_attention")
            else:
                module.rotary_emb = lm.rotary_emb
            try:
                with torch.no_grad():
                    scores = press.score(module, hidden_states, keys, values, output[1], kwargs)
                n_kept = compute_n_kept(keys.shape[2], press.compression_ratio)
                idx = scores.topk(n_kept, dim=-1).indices  # [B, H, kept], kvpress's order
                self.indices.setdefault((name, budget), {})[module.layer_idx] = idx
            except Exception as exc:  # noqa: BLE001 - recorded and reported as n/a
                self.errors[name] = f"{type(exc).__name__}: {exc}"
        return output


def pressed_cache(full_cache, indices: dict[int, Any], seen: int):
    """A copy of ``full_cache`` whose full-attention layers keep only ``indices`` (sliding ones shared)."""
    PressedLayer = _make_pressed_layer_class()
    cache = copy.copy(full_cache)
    cache.layers = [copy.copy(layer) for layer in full_cache.layers]
    for layer_idx, idx in indices.items():
        src = full_cache.layers[layer_idx]
        gather = idx.unsqueeze(-1).expand(-1, -1, -1, src.keys.shape[-1])
        cache.layers[layer_idx] = PressedLayer(src.keys.gather(2, gather).contiguous(),
                                               src.values.gather(2, gather).contiguous(), seen)
    return cache


def verify_press_equivalence(model, ids, press_name: str, budget: float, recorded: dict[int, Any],
                             full_cache) -> dict[str, Any]:
    """Run kvpress's own forward hook (press.forward_hook) on the same prefill and compare the caches."""
    import torch
    from transformers import DynamicCache

    _, _, press = make_presses([press_name], [budget], rotary_shim=False)[0]
    lm = model.model
    cache = DynamicCache(config=model.config)
    hooks = []
    press.post_init_from_model(model)
    try:
        for layer in lm.layers:
            if getattr(layer.self_attn, "is_sliding", False):
                continue
            layer.self_attn.rotary_emb = lm.rotary_emb
            hooks.append(layer.self_attn.register_forward_hook(press.forward_hook, with_kwargs=True))
        with torch.no_grad():
            model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    finally:
        for h in hooks:
            h.remove()
        for layer in lm.layers:
            layer.self_attn._modules.pop("rotary_emb", None)
    ours = pressed_cache(full_cache, recorded, ids.shape[1])
    diffs = []
    for layer_idx in recorded:
        a, b = cache.layers[layer_idx], ours.layers[layer_idx]
        if a.keys.shape != b.keys.shape:
            return {"press": press_name, "budget": budget, "equal": False, "reason": "shape mismatch"}
        diffs.append(max((a.keys.float() - b.keys.float()).abs().max().item(),
                         (a.values.float() - b.values.float()).abs().max().item()))
    return {"press": press_name, "budget": budget, "equal": max(diffs) == 0.0, "max_abs_diff": max(diffs)}


# ------------------------------------------------------------------------------------------------
# Evaluation of one prepared cache
# ------------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    """A prefilled cache plus how to return to it and what it holds."""

    cache: Any
    attn: str
    save: Callable[[], Any]
    restore: Callable[[Any], None]
    kept_positions: Callable[[], list[Any]]  # per full-attention layer: positions readable (L1/L2)
    full_bytes: int  # KV bytes of the full-attention layers at question time
    sliding_bytes: int
    prefill_s: float
    extra: dict[str, Any] = field(default_factory=dict)  # reported with the method's results
    manager: Any = None  # minutia's KVCacheManager: the app's answer path (--focus-lines)


def answer_nll(model, cache, tokenizer, question: str, answer: str, max_answer_tokens: int) -> float:
    import torch

    prompt = tokenizer(QUERY_TEMPLATE.format(question=question), add_special_tokens=False)["input_ids"]
    ans = tokenizer(" " + answer, add_special_tokens=False)["input_ids"][:max_answer_tokens]
    ids = torch.tensor([prompt + ans], dtype=torch.long)
    with torch.no_grad():
        logits = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=len(ans) + 1).logits
    logits = logits[0, :-1].float()
    return float(torch.nn.functional.cross_entropy(logits, torch.tensor(ans), reduction="mean"))


def answer_nll_stepwise(model, cache, tokenizer, question: str, answer: str, max_answer_tokens: int,
                        step_seconds: list[float] | None = None) -> float:
    """:func:`answer_nll` with the answer fed one token at a time, as a decoder reads it.

    The same logits for a full or pressed cache; a cache with a cold tier recalls blocks at each
    step (the question's prefill only stages them), so it is scored the way it answers.
    """
    import torch

    prompt = tokenizer(QUERY_TEMPLATE.format(question=question), add_special_tokens=False)["input_ids"]
    ans = tokenizer(" " + answer, add_special_tokens=False)["input_ids"][:max_answer_tokens]
    losses = []
    with torch.no_grad():
        # The question's last token runs as a decode step, as MeetingContext does: the cold blocks its
        # other tokens staged are recalled before the first answer token is predicted.
        model(torch.tensor([prompt[:-1]]), past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = model(torch.tensor([prompt[-1:]]), past_key_values=cache, use_cache=True, logits_to_keep=1).logits
        for i, token in enumerate(ans):
            losses.append(float(torch.nn.functional.cross_entropy(logits[0, -1:].float(), torch.tensor([token]))))
            if i + 1 == len(ans):
                break
            start = time.perf_counter()
            logits = model(torch.tensor([[token]]), past_key_values=cache, use_cache=True, logits_to_keep=1).logits
            if step_seconds is not None:
                step_seconds.append(time.perf_counter() - start)
            if hasattr(cache, "kv_bytes"):  # recalled blocks add to the device bytes while the answer runs
                peak = getattr(cache, "peak_answer_bytes", 0)
                cache.peak_answer_bytes = max(peak, cache.kv_bytes(include_sliding=False))
    return sum(losses) / max(len(losses), 1)


def needle_answer(model, cache, tokenizer, needle: Needle, max_new: int) -> str:
    import torch

    prompt = QUERY_TEMPLATE.format(question=needle.question) + " " + needle.prefix
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]], dtype=torch.long)
    stop = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("\n")}
    out: list[int] = []
    with torch.no_grad():
        model(ids[:, :-1], past_key_values=cache, use_cache=True, logits_to_keep=1)  # see answer_nll_stepwise
        ids = ids[:, -1:]
        for _ in range(max_new):
            nxt = int(model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[0, -1].argmax())
            if nxt in stop:
                break
            out.append(nxt)
            ids = torch.tensor([[nxt]], dtype=torch.long)
    return tokenizer.decode(out, skip_special_tokens=True)


def exact_match(generated: str, gold: str) -> bool:
    text = generated.strip()
    if not text.startswith(gold):
        return False
    rest = text[len(gold):]
    return not rest or not rest[0].isalnum()


def focus_turns(meeting: Meeting, question: str, k: int) -> list[int]:
    """The turns holding the ``k`` sentences the app's retrieval ranks highest for ``question``
    (app.answering.retrieval.SentenceIndex: BM25 + MiniLM over sentences, as ``minutia ask`` picks its evidence lines)."""
    import torch

    from app.answering.retrieval import SentenceIndex, default_embedder
    from app.text.sentences import split_sentences
    from app.text.transcript import Transcript, Turn as LineTurn

    if meeting.line_index is None:
        in_context = sorted({int(t) for t in torch.unique(meeting.token_turn).tolist() if t >= 0})
        lines = Transcript(turns=[LineTurn(meeting.turns[i].speaker, meeting.turns[i].text) for i in in_context])
        meeting.line_index = (SentenceIndex(split_sentences(lines), default_embedder()), in_context)
    index, in_context = meeting.line_index
    found: list[int] = []
    for hit in index.search(question, k):
        sentence = index.sentences[hit.index]
        # a sentence runs on into the next turn when its turn ends without a stop ("{vocalsound}"): all the turns
        # it spans, as the app's focus takes the sentence's whole time window
        first = last = sentence.turn_index
        said = " ".join(sentence.text.split())
        while last + 1 < min(len(in_context), first + 4) and said not in " ".join(
                " ".join(meeting.turns[in_context[i]].text.split()) for i in range(first, last + 1)):
            last += 1
        found += [in_context[i] for i in range(first, last + 1)]
    return list(dict.fromkeys(found))


def turn_token_ranges(meeting: Meeting, turns: list[int]) -> list[tuple[int, int]]:
    import torch

    ranges = []
    for i in turns:
        where = torch.nonzero(meeting.token_turn == i).flatten()
        if where.numel():
            ranges.append((int(where.min()), int(where.max()) + 1))
    return ranges


@contextlib.contextmanager
def answering(prepared: Prepared, meeting: Meeting, question: str, k: int) -> Iterator[list[int]]:
    """One question on the prepared cache, rolled back afterwards. With ``k`` (``--focus-lines``) and a minutia
    cache, the app's answer path (app/llm/context.py): the blocks of the lines retrieval found are pinned
    (``KVCacheManager.focus``) and, inside the question's checkpoint, recalled from the cold tier / read from their
    exact copies (``recall_tokens``). Yields the turns retrieval found ([] without focus)."""
    manager = prepared.manager
    turns = focus_turns(meeting, question, k) if k and manager is not None else []
    ranges = turn_token_ranges(meeting, turns)
    with manager.focus(ranges) if ranges else contextlib.nullcontext():
        state = prepared.save()
        try:
            if ranges:
                manager.recall_tokens(ranges)
            yield turns
        finally:
            prepared.restore(state)


def evaluate(model, prepared: Prepared, meeting: Meeting, queries: list[Query], tokenizer, args,
             progress=None, task=None) -> dict[str, Any]:
    import torch

    model.set_attn_implementation(prepared.attn)
    kept = prepared.kept_positions()
    result: dict[str, Any] = {"queries": [], "needles": []}
    for q in queries:
        span = query_span_tokens(meeting, q)
        retention = (sum(float(torch.isin(span, k).float().mean()) for k in kept) / len(kept)) if span.numel() else None
        with answering(prepared, meeting, q.question, args.focus_lines):
            if prepared.extra.get("stepwise"):
                nll = answer_nll_stepwise(model, prepared.cache, tokenizer, q.question, q.answer,
                                          args.max_answer_tokens, prepared.extra.setdefault("step_seconds", []))
            else:
                nll = answer_nll(model, prepared.cache, tokenizer, q.question, q.answer, args.max_answer_tokens)
        result["queries"].append({"retention": retention, "nll": nll, "span_tokens": int(span.numel())})
        if progress is not None:
            progress.advance(task)
    for needle in meeting.needles:
        if needle.token_start < 0:
            continue
        span = torch.arange(needle.token_start, needle.token_end)
        retention = sum(float(torch.isin(span, k).float().mean()) for k in kept) / len(kept)
        max_new = len(tokenizer(" " + needle.answer, add_special_tokens=False)["input_ids"]) + 3
        with answering(prepared, meeting, needle.question, args.focus_lines) as turns:
            generated = needle_answer(model, prepared.cache, tokenizer, needle, max_new)
        found = int(meeting.token_turn[needle.token_start]) in turns
        result["needles"].append({"answer": needle.answer, "generated": generated, "kind": needle.kind,
                                  "depth": needle.depth, "correct": exact_match(generated, needle.answer),
                                  "retention": retention, **({"retrieved": found} if turns else {})})
        if progress is not None:
            progress.advance(task)
    return result


# ------------------------------------------------------------------------------------------------
# Preparing each method's cache
# ------------------------------------------------------------------------------------------------


def prepare_full(model, ids, recorder: "PressRecorder | None") -> Prepared:
    import torch
    from transformers import DynamicCache

    model.set_attn_implementation("sdpa")
    cache = DynamicCache(config=model.config)
    t0 = time.perf_counter()
    with torch.no_grad():
        if recorder is not None:
            with recorder:
                model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        else:
            model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    elapsed = time.perf_counter() - t0
    full_b, sliding_b = dynamic_bytes(cache)
    n = ids.shape[1]
    everything = torch.arange(n)
    return Prepared(cache, "sdpa", lambda: snapshot_dynamic(cache), lambda s: restore_dynamic(cache, s),
                    lambda: [everything for _ in full_attention_layers(model)], full_b, sliding_b, elapsed)


def prepare_pressed(model, full: Prepared, indices: dict[int, Any], n_tokens: int) -> Prepared:
    cache = pressed_cache(full.cache, indices, n_tokens)
    full_b, sliding_b = dynamic_bytes(cache)
    kept = [indices[i][0, 0] for i in sorted(indices)]  # 1 KV head on Gemma 3 270M; batch 1
    if any(idx.shape[1] > 1 for idx in indices.values()):
        kept = [indices[i][0].flatten() for i in sorted(indices)]  # union over KV heads (upper bound)
    return Prepared(cache, "sdpa", lambda: snapshot_dynamic(cache), lambda s: restore_dynamic(cache, s),
                    lambda: kept, full_b, sliding_b, full.prefill_s)


def full_kv_bytes(model, n_tokens: int) -> int:
    """bf16 bytes DynamicCache holds for ``n_tokens`` in the full-attention layers (K and V)."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return len(full_attention_layers(model)) * n_tokens * cfg.num_key_value_heads * head_dim * 2 * 2


def turn_start_annotations(meeting: Meeting) -> tuple[list[int], list[int]]:
    """Token positions of the first token of each turn, and of the turns where the speaker changes."""
    import torch

    tt = meeting.token_turn
    first = torch.ones_like(tt, dtype=torch.bool)
    first[1:] = tt[1:] != tt[:-1]
    first &= tt >= 0
    starts = torch.nonzero(first).flatten().tolist()
    changes = []
    prev = None
    for pos in starts:
        speaker = meeting.turns[int(tt[pos])].speaker
        if speaker != prev:
            changes.append(pos)
        prev = speaker
    return starts, changes


def minutia_settings(args, **overrides: Any):
    """minutia's cache settings for this run: the command line's knobs, then ``overrides``."""
    from kvstore.config import TieredCacheConfig

    from kvstore.scoring import ScoreWeights

    options = dict(compress=True, block_size=args.block_size, recent_tokens=args.recent_tokens,
                   warm_kinds=tuple(k.strip() for k in args.warm_kinds.split(",") if k.strip()),
                   drop_last_resort=args.drop_last_resort)
    if args.weights:  # a,b,c,d of the four built-in terms, or name=weight pairs (any registered scorer)
        pairs = [item.split("=") for item in args.weights.split(",")]
        named = all(len(pair) == 2 for pair in pairs)
        options["weights"] = ({name.strip(): float(w) for name, w in pairs} if named
                              else ScoreWeights(*(float(pair[0]) for pair in pairs)))
    return TieredCacheConfig(**{**options, **overrides})


def prepare_minutia(model, ids, meeting: Meeting, budget: float, args, mode: str = "bytes") -> Prepared:
    import torch

    from kvstore.annotations import TokenFlag
    from kvstore.attention import MINUTIA_ATTENTION, use_minutia_attention
    from kvstore.factory import build_cache
    from kvstore.manager import KVCacheManager

    use_minutia_attention(model)
    if mode in ("bytes", "cold", "exact"):
        # A fixed byte budget (the deployment case: a meeting must fit N bytes): the fraction of the full
        # bf16 KV bytes of this context's full-attention layers. Compression starts once the cache outgrows it.
        settings = minutia_settings(args, budget_ratio=None, budget_bytes=int(budget * full_kv_bytes(model, ids.shape[1])))
    elif mode == "ratio":  # the ratio applies to the tokens seen so far, at every step of the prefill
        settings = minutia_settings(args, budget_ratio=budget)
    else:  # "live": open-ended prefill in small chunks, as words arrive (issue 6)
        settings = minutia_settings(args, budget_ratio=budget, budget_floor_tokens=args.live_floor,
                                    drop_last_resort=True, hysteresis=args.live_hysteresis)
    cold = None
    if mode in ("cold", "exact"):
        from kvstore.cold import ColdTier
        from kvstore.placement import Tier, TierPlacement
        from kvstore.tier_guards import WatermarkController
        from kvstore.stores.memory import MemoryStore

        staging = args.cold_staging_mib << 20
        tiers = {Tier.DEVICE: MemoryStore(tier="device"), Tier.HOST: MemoryStore(tier="host")}
        cold = ColdTier(TierPlacement(tiers, meeting.name, WatermarkController(staging)),
                        recall_top_k=args.cold_top_k, exact_copies=mode == "exact", exact_max_blocks=args.exact_max_blocks)
    cache = build_cache(model.config, settings, cold)
    if args.annotations:
        starts, changes = turn_start_annotations(meeting)
        cache.annotate(starts, TokenFlag.TURN_START)
        cache.annotate(changes, TokenFlag.SPEAKER_CHANGE)
    if args.entities:
        cache.annotate(meeting.entity_tokens, TokenFlag.ENTITY)
    chunk = args.live_chunk if mode == "live" else args.chunk
    t0 = time.perf_counter()
    with torch.no_grad():
        for start in range(0, ids.shape[1], chunk):
            model(ids[:, start:start + chunk], past_key_values=cache, use_cache=True, logits_to_keep=1)
    elapsed = time.perf_counter() - t0

    def kept_positions() -> list[Any]:
        out = []
        for layer in cache.tiered_layers:
            starts = layer.table.block_index * layer.block_size
            pos = [torch.arange(int(s), int(s) + int(f)) for s, f in zip(starts, layer.table.fill)]
            out.append(torch.cat(pos) if pos else torch.zeros(0, dtype=torch.long))
        return out

    formats: dict[str, int] = {}
    for entry in cache.stats()["layers"]:
        for kind, info in entry.get("formats", {}).items():
            formats[kind] = formats.get(kind, 0) + info["blocks"]
    tokens_kept = sum(layer.kept_tokens() for layer in cache.tiered_layers) / max(cache.num_tiered_layers, 1)
    sliding = cache.kv_bytes() - cache.kv_bytes(include_sliding=False)
    return Prepared(cache, MINUTIA_ATTENTION, cache.checkpoint, cache.rollback, kept_positions,
                    cache.kv_bytes(include_sliding=False), sliding, elapsed,
                    extra={"blocks_per_format": formats, "tokens_kept_per_layer": tokens_kept,
                           "budget_bytes": cache.budget_bytes(), "full_precision_bytes": cache.full_precision_bytes(),
                           **({"stepwise": True} if mode in ("cold", "exact") or args.stepwise else {})},
                    manager=KVCacheManager(cache))


# ------------------------------------------------------------------------------------------------
# Peak memory part (each mode in its own process)
# ------------------------------------------------------------------------------------------------


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _proc_status_mb(field_name: str) -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def _current_rss_mb() -> float:
    return _proc_status_mb("VmRSS")


def _malloc_trim() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak_rss() -> bool:
    """Reset the address space's RSS high-water mark (``echo 5 > /proc/self/clear_refs``, Linux >= 4.0),
    so that VmHWM afterwards is the prefill's peak, not the model load's. getrusage's ru_maxrss cannot
    be reset: it also keeps the peak recorded when a thread exits (transformers loads weights on a
    thread pool), so it stays the whole process's peak, load included; both are reported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _warm_up(model) -> None:
    """One short forward: pages the memory-mapped weights in and initialises kernels before timing."""
    import torch
    from transformers import DynamicCache

    with torch.no_grad():
        model(torch.tensor([[2, 107, 108, 109] * 8]), past_key_values=DynamicCache(config=model.config),
              use_cache=True, logits_to_keep=1)


def memory_probe(args) -> dict[str, Any]:
    """Prefill ``--memory-tokens`` tokens of concatenated meetings in chunks; print a JSON line."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=_dtype(args.dtype), attn_implementation="sdpa").eval()
    files = sorted(Path(args.data).glob("*.json"))
    text_parts, n = [], 0
    for path in files:
        meeting = load_meeting(path)
        text, _ = render(meeting.turns)
        text_parts.append(text)
        n += len(tokenizer(text, add_special_tokens=False)["input_ids"])
        if n >= args.memory_tokens:
            break
    ids = tokenizer("".join(text_parts), return_tensors="pt")["input_ids"][:, : args.memory_tokens]
    with torch.no_grad():  # warm-up, so lazily allocated kernels/buffers are in the baseline
        model(ids[:, :64], past_key_values=DynamicCache(config=model.config), use_cache=True, logits_to_keep=1)
    load_peak = _rss_mb()
    _malloc_trim()  # hand the loader's freed heap back, or the prefill reuses it without raising RSS
    peak_reset = _reset_peak_rss()
    baseline = _current_rss_mb() if peak_reset else load_peak
    peak_kv = {"full_attention": 0, "sliding": 0}
    if args.memory_probe == "full":
        cache = DynamicCache(config=model.config)

        def measure() -> tuple[int, int]:
            return dynamic_bytes(cache)
    else:
        from kvstore.attention import use_minutia_attention
        from kvstore.factory import build_cache
        from kvstore.layers import TieredLayer

        use_minutia_attention(model)
        cache = build_cache(model.config, minutia_settings(
            args, budget_ratio=None, budget_bytes=int(args.memory_budget * full_kv_bytes(model, ids.shape[1]))))
        per_layer_peak: dict[int, int] = {}
        original = TieredLayer.compress

        def compress_and_record(layer, *a, **kw):  # KV peaks right before a compression pass
            per_layer_peak[layer.layer_idx] = max(per_layer_peak.get(layer.layer_idx, 0), layer.kv_bytes())
            return original(layer, *a, **kw)

        TieredLayer.compress = compress_and_record

        def measure() -> tuple[int, int]:
            tiered = cache.kv_bytes(include_sliding=False)
            return max(tiered, sum(per_layer_peak.values())), cache.kv_bytes() - tiered

    t0 = time.perf_counter()
    with torch.no_grad():
        for start in range(0, ids.shape[1], args.chunk):
            model(ids[:, start:start + args.chunk], past_key_values=cache, use_cache=True, logits_to_keep=1)
            full_b, sliding_b = measure()
            peak_kv["full_attention"] = max(peak_kv["full_attention"], full_b)
            peak_kv["sliding"] = max(peak_kv["sliding"], sliding_b)
    elapsed = time.perf_counter() - t0
    if args.memory_probe == "full":
        final_full, final_sliding = dynamic_bytes(cache)
        reserved = final_full + final_sliding
    else:
        final_full, final_sliding = cache.kv_bytes(include_sliding=False), cache.kv_bytes() - cache.kv_bytes(include_sliding=False)
        reserved = cache.reserved_bytes()
    result = {
        "mode": args.memory_probe,
        "budget": args.memory_budget if args.memory_probe != "full" else 1.0,
        "tokens": int(ids.shape[1]),
        "chunk": args.chunk,
        "rss_baseline_mb": round(baseline, 1),
        "peak_rss_during_load_mb": round(load_peak, 1),
        "peak_reset": peak_reset,
        "peak_rss_mb": round(_proc_status_mb("VmHWM") if peak_reset else _rss_mb(), 1),  # prefill peak
        "peak_rss_over_baseline_mb": round((_proc_status_mb("VmHWM") if peak_reset else _rss_mb()) - baseline, 1),
        "getrusage_maxrss_mb": round(_rss_mb(), 1),  # whole process, model load included
        "final_kv_bytes_full_attention": final_full,
        "final_kv_bytes_sliding": final_sliding,
        "peak_kv_bytes_full_attention": peak_kv["full_attention"],
        "reserved_kv_bytes": reserved,
        "prefill_s": round(elapsed, 1),
        "tokens_per_s": round(ids.shape[1] / elapsed, 1),
    }
    print("MEMORY_RESULT " + json.dumps(result), flush=True)
    return result


MEMORY_NOTE = ("Memory part: a fresh process per mode; after loading the model and a 64-token warm-up the RSS "
                     "high-water mark is reset (/proc/self/clear_refs) and the prefill's peak is read from VmHWM; "
                     "getrusage(RUSAGE_SELF).ru_maxrss is the whole process's peak, model load included (it cannot "
                     "be reset). The baseline is the RSS after the warm-up and malloc_trim(0) (so freed loader memory is not "
                     "silently reused). On Gemma 3 270M (1 KV head, 3 "
                     "full-attention layers) the KV cache is small next to the weights and prefill activations, so "
                     "peak RSS mostly reflects activations (minutia's reference attention materialises fp32 "
                     "logits per chunk); the KV columns are the cache itself. Peak KV for minutia is measured "
                     "right before each compression pass (budget + one chunk).")


def run_memory_part(args, console) -> list[dict[str, Any]]:
    """One fresh process per mode (clean peak RSS); sequential, except in --quick where they overlap."""
    commands = []
    for mode in ("full", "minutia"):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-probe", mode, "--model", str(args.model),
               "--data", str(args.data), "--memory-tokens", str(args.memory_tokens), "--chunk", str(args.chunk),
               "--memory-budget", str(args.memory_budget), "--dtype", args.dtype, "--block-size", str(args.block_size),
               "--recent-tokens", str(args.recent_tokens)]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        commands.append((mode, cmd))
    results = []
    running = []
    for mode, cmd in commands:
        console.log(f"memory probe ({mode}, {args.memory_tokens} tokens) in a subprocess")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
        running.append((mode, proc))
        if not args.quick:
            running[-1] = (mode, proc, *proc.communicate())
    for item in running:
        mode, proc = item[0], item[1]
        out, err = item[2:] if len(item) > 2 else proc.communicate()
        line = next((ln for ln in out.splitlines() if ln.startswith("MEMORY_RESULT ")), None)
        if proc.returncode != 0 or line is None:
            results.append({"mode": mode, "error": (err or out)[-2000:]})
        else:
            results.append(json.loads(line[len("MEMORY_RESULT "):]))
    return results


# ------------------------------------------------------------------------------------------------
# Reporting
# ------------------------------------------------------------------------------------------------


def _dtype(name: str):
    """The torch dtype a --dtype name means; "auto" is the app's choice for this machine (app.llm.engine)."""
    import torch

    if name == "auto":
        from app.llm.engine import native_dtype

        name = native_dtype()
    return {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32,
            "fp16": torch.float16}[name]


def aggregate(per_meeting: list[dict[str, Any]], full_key: str = "full") -> dict[str, dict[str, Any]]:
    """Per method: mean retention, mean NLL, NLL recovery (mean full NLL / mean NLL), needle accuracy."""
    methods: dict[str, dict[str, Any]] = {}
    for meeting in per_meeting:
        for key, res in meeting["methods"].items():
            m = methods.setdefault(key, {"retention": [], "nll": [], "full_nll": [], "needles": [],
                                         "needle_retention": [], "full_bytes": [], "full_ref_bytes": [],
                                         "sliding_bytes": [], "prefill_s": [], "cold": [], "error": res.get("error")})
            if res.get("error"):
                continue
            full = meeting["methods"][full_key]
            for q, fq in zip(res["queries"], full["queries"]):
                if q["retention"] is not None:
                    m["retention"].append(q["retention"])
                m["nll"].append(q["nll"])
                m["full_nll"].append(fq["nll"])
            m["needles"] += [n["correct"] for n in res["needles"]]
            for n in res["needles"]:
                m.setdefault("by_kind", {}).setdefault(n["kind"], []).append(n["correct"])
            m["needle_retention"] += [n["retention"] for n in res["needles"]]
            m.setdefault("retrieved", []).extend(n["retrieved"] for n in res["needles"] if "retrieved" in n)
            m["full_bytes"].append(res["full_bytes"])
            m["full_ref_bytes"].append(full["full_bytes"])
            m["sliding_bytes"].append(res["sliding_bytes"])
            m["prefill_s"].append(res["prefill_s"])
            if res.get("cold"):
                m["cold"].append(res["cold"])
    out = {}
    for key, m in methods.items():
        if m["error"] or not m["nll"]:
            out[key] = {"error": m["error"] or "no results"}
            continue
        mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
        out[key] = {
            "span_retention": mean(m["retention"]),
            "nll": mean(m["nll"]),
            "nll_recovery": mean(m["full_nll"]) / mean(m["nll"]),
            "needle_accuracy": mean([float(x) for x in m["needles"]]),
            "needles": len(m["needles"]),
            "needle_accuracy_by_kind": {k: mean([float(x) for x in v]) for k, v in sorted(m.get("by_kind", {}).items())},
            "needle_retention": mean(m["needle_retention"]),
            "queries": len(m["nll"]),
            "kv_bytes_full_attention": sum(m["full_bytes"]),
            "kv_fraction": sum(m["full_bytes"]) / max(sum(m["full_ref_bytes"]), 1),
            "kv_bytes_sliding": sum(m["sliding_bytes"]),
            "prefill_s": sum(m["prefill_s"]),
        }
        if m.get("retrieved"):  # --focus-lines: how often retrieval found the needle's line
            out[key]["needle_line_retrieved"] = mean([float(x) for x in m["retrieved"]])
        if m["cold"]:
            out[key]["cold"] = {
                # a meeting whose cold tier was never read has no hit rate (None), not a rate of 1
                "prefetch_hit_rate": mean([c["prefetch_hit_rate"] for c in m["cold"] if c["prefetch_hit_rate"] is not None]),
                "recalled": sum(c["recalled"] for c in m["cold"]),
                "evicted": sum(c["evicted"] for c in m["cold"]),
                "decode_step_ms_median": mean([c["decode_step_ms"]["median"] for c in m["cold"] if "decode_step_ms" in c]),
                "decode_step_ms_p95": mean([c["decode_step_ms"]["p95"] for c in m["cold"] if "decode_step_ms" in c]),
                "peak_answer_fraction": max(c["peak_answer_fraction"] for c in m["cold"]),
                "exact_reads": sum(c.get("exact_reads", 0) for c in m["cold"]),
                "copies": sum(c.get("copies", 0) for c in m["cold"]),
            }
    full = out.get(full_key, {})
    for key, row in out.items():
        if "error" not in row and full.get("needle_accuracy"):
            row["needle_vs_full"] = row["needle_accuracy"] / full["needle_accuracy"]
    return out


MODE_LABELS = {
    "bytes": "minutia TieredCache",
    "ratio": "minutia TieredCache (ratio budget from chunk 1)",
    "live": "minutia TieredCache (live: ratio budget + floor, quantize before drop, small chunks)",
    "cold": "minutia TieredCache + cold tier (evicted blocks on host memory, recalled per decode step)",
    "exact": "minutia TieredCache + cold tier + exact copies (quantized blocks a question wants read at full precision)",
}


def minutia_key(mode: str, budget: float) -> str:
    return f"minutia@{budget:g}" if mode == "bytes" else f"minutia-{mode}@{budget:g}"


def method_order(budgets: list[float], press_names: list[str], modes: tuple[str, ...] = ("bytes",)
                 ) -> list[tuple[str, str, float]]:
    rows = [("full", "full cache (DynamicCache)", 1.0)]
    for b in budgets:
        for mode in modes:
            rows.append((minutia_key(mode, b), MODE_LABELS[mode], b))
        for name in press_names:
            rows.append((f"{name}@{b:g}", f"kvpress {name}", b))
    return rows


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def write_markdown(path: Path, report: dict[str, Any]) -> None:
    agg = report["results"]
    lines = [
        "# KV-cache quality: minutia vs full cache vs kvpress",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Model: {report['model']} ({report['dtype']}); data: {report['data']} "
        f"(part: {report['args'].get('part', 'all')}, bench/qmsum_split.py); "
        f"{report['n_meetings']} meetings, {report['n_queries']} specific queries, {report['n_needles']} needles; "
        f"context truncated to {report['max_tokens']} tokens per meeting "
        f"(the model's context is {report['model_context']} tokens; this CPU run uses {report['max_tokens']} "
        f"to finish in reasonable time).",
        f"Machine: {report['machine']['cpu']} ({report['machine']['nproc']} CPUs, torch threads "
        f"{report['machine']['torch_threads']}); wall time {report['wall_s']:.0f} s.",
        "",
        "Budget = KV bytes of the full-attention layers as a fraction of the full bf16 cache. Sliding-window "
        "layers (15 of 18 on Gemma 3 270M) keep their 512-token window in every method and are not counted.",
        "",
        "| method | budget | KV bytes (full-attn) | of full | span retention | answer NLL | NLL recovery | "
        "needle acc. | needle vs full |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, label, budget in report["rows"]:
        row = agg.get(key)
        if row is None:
            continue
        if "error" in row:
            lines.append(f"| {label} | {budget:g} | n/a | | n/a: {row['error'][:160]} | | | | |")
            continue
        over = " (over budget: the protected sinks + recent window exceed it at this length)" if (
            key != "full" and row["kv_fraction"] > budget * 1.02) else ""
        lines.append(
            f"| {label} | {budget:g} | {row['kv_bytes_full_attention'] / 2**20:.2f} MiB | {row['kv_fraction']:.3f}{over} | "
            f"{_fmt(row['span_retention'])} | {_fmt(row['nll'])} | {_fmt(row['nll_recovery'])} | "
            f"{_fmt(row['needle_accuracy'])} ({row['needles']}) | {_fmt(row.get('needle_vs_full'))} |"
        )
    kinds = sorted({k for row in agg.values() if isinstance(row, dict) for k in row.get("needle_accuracy_by_kind", {})})
    if len(kinds) > 1:
        lines += ["", "## Needle accuracy by kind", "", "| method | " + " | ".join(kinds) + " |",
                  "|---|" + "---|" * len(kinds)]
        for key, label, budget in report["rows"]:
            row = agg.get(key)
            if row is None or "error" in row:
                continue
            by_kind = row.get("needle_accuracy_by_kind", {})
            lines.append(f"| {label} | " + " | ".join(_fmt(by_kind.get(k)) for k in kinds) + " |")
    cold_rows = [(key, row["cold"]) for key, row in agg.items() if isinstance(row, dict) and row.get("cold")]
    if cold_rows:
        lines += ["", "## Cold tier (issue 5): blocks evicted to host memory, recalled at decode", "",
                  "| method | prefetch hit rate | blocks recalled | blocks evicted | decode step ms (median / p95) | "
                  "peak KV while answering (of full) | exact copies kept / read |",
                  "|---|---|---|---|---|---|---|"]
        for key, cold in cold_rows:
            lines.append(f"| {key} | {_fmt(cold['prefetch_hit_rate'])} | {cold['recalled']} | {cold['evicted']} | "
                         f"{_fmt(cold['decode_step_ms_median'], 1)} / {_fmt(cold['decode_step_ms_p95'], 1)} | "
                         f"{_fmt(cold['peak_answer_fraction'])} | {cold.get('copies', 0)} / {cold.get('exact_reads', 0)} |")
    lines += ["", "## Targets at 25% (issue 3)", ""]
    for line in report["targets"]:
        lines.append(f"- {line}")
    if report.get("memory"):
        lines += ["", "## Peak memory while prefilling a long meeting (chunked prefill, one subprocess each)", ""]
        if report.get("memory_command"):
            lines += [f"Command: `{report['memory_command']}`", ""]
        lines += [
                  "| mode | tokens | peak RSS in prefill (MiB) | over baseline (MiB) | getrusage maxrss (MiB) | "
                  "KV full-attn at end | peak KV full-attn | KV sliding | prefill tok/s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for m in report["memory"]:
            if "error" in m:
                lines.append(f"| {m['mode']} | error: {m['error'][-200:]!r} | | | | | | | |")
                continue
            mode = m["mode"] if m["mode"] == "full" else f"{m['mode']} @{m['budget']:g}"
            lines.append(
                f"| {mode} | {m['tokens']} | "
                f"{m['peak_rss_mb']:.0f} | {m['peak_rss_over_baseline_mb']:.0f} | {m.get('getrusage_maxrss_mb', 0):.0f} | "
                f"{m['final_kv_bytes_full_attention'] / 2**20:.2f} MiB | {m['peak_kv_bytes_full_attention'] / 2**20:.2f} MiB"
                f" | {m['final_kv_bytes_sliding'] / 2**20:.2f} MiB | {m['tokens_per_s']} |")
    lines += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    lines += ["", "## Meetings", "", "| meeting | tokens used / total | queries used (skipped) | needles |",
              "|---|---|---|---|"]
    for m in report["meetings"]:
        lines.append(f"| {m['name']} | {m['tokens']} / {m['full_tokens']} | {m['queries_used']} ({m['queries_skipped']})"
                     f" | {m['needles']} |")
    path.write_text("\n".join(lines) + "\n")


def write_plot(path: Path, report: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = report["results"]
    families: dict[str, list[tuple[float, dict]]] = {}
    for key, label, budget in report["rows"]:
        row = agg.get(key)
        if row is None or "error" in row or key == "full":
            continue
        families.setdefault(label, []).append((row["kv_fraction"], row))
    metrics = [("span_retention", "span retention"), ("nll_recovery", "answer NLL recovery"),
               ("needle_accuracy", "needle accuracy")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for ax, (metric, title) in zip(axes, metrics):
        for label, pts in families.items():
            pts = sorted(pts, key=lambda p: p[0])
            if label == "minutia TieredCache":
                style = dict(lw=2.5, color="black", marker="o")
            elif label.startswith("minutia"):
                style = dict(lw=1.8, color="gray", ls="--", marker="o")
            else:
                style = dict(lw=1.2, marker=".")
            ax.plot([p[0] for p in pts], [p[1][metric] for p in pts], label=label, **style)
        if "full" in agg and "error" not in agg["full"]:
            ax.scatter([1.0], [agg["full"][metric]], marker="*", s=160, color="red", label="full cache", zorder=5)
        ax.set_xlabel("KV bytes of the full-attention layers (fraction of full bf16)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8, frameon=False)
    fig.suptitle(f"{Path(report['model']).name}: {report['n_meetings']} QMSum meetings, {report['n_queries']} queries, "
                 f"{report['n_needles']} needles, {report['max_tokens']} tokens max")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def target_lines(agg: dict[str, Any], press_names: list[str], budgets: list[float], mode: str = "bytes") -> list[str]:
    lines = []
    for b in budgets:
        if abs(b - 0.25) > 1e-9 and abs(b - 0.125) > 1e-9:
            continue
        mk = minutia_key(mode, b)
        row = agg.get(mk)
        if not row or "error" in row:
            lines.append(f"{mk}: no result")
            continue
        checks = []
        if abs(b - 0.25) < 1e-9:
            nv = row.get("needle_vs_full")
            checks.append(f"needle accuracy vs full {_fmt(nv)} (target >= 0.98): {'met' if nv is not None and nv >= 0.98 else 'NOT met'}")
            checks.append(f"NLL recovery {_fmt(row['nll_recovery'])} (target >= 0.99): {'met' if row['nll_recovery'] >= 0.99 else 'NOT met'}")
            sr = row["span_retention"]
            checks.append(f"span retention {_fmt(sr)} (target >= 0.9): {'met' if sr is not None and sr >= 0.9 else 'NOT met'}")
        beaten, lost = [], []
        for name in press_names + ["ExpectedAttention+shim"]:
            other = agg.get(f"{name}@{b:g}")
            if not other or "error" in other:
                continue
            wins = [row["span_retention"] > other["span_retention"], row["nll_recovery"] > other["nll_recovery"],
                    row["needle_accuracy"] >= other["needle_accuracy"]]
            (beaten if all(wins) else lost).append(
                name + ("" if all(wins) else " (" + ", ".join(
                    m for m, w in zip(("retention", "NLL", "needles"), wins) if not w) + ")"))
        if not beaten and not lost:
            checks.append("better than every press on all three: n/a (no press was run)")
        else:
            checks.append(f"better than every press on all three: {'yes' if not lost else 'no'}"
                          f" (beats {', '.join(beaten) or 'none'}; not better than {', '.join(lost) or 'none'})")
        lines.append(f"at {b:g}: " + "; ".join(checks))
    return lines


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------


# The smallest value each numeric option takes: a wrong one is a one-line usage error, not a traceback
# minutes into the run.
_LEAST = {"limit": 1, "max_tokens": 1, "max_queries": 1, "needles": 0, "chunk": 1, "block_size": 1,
          "recent_tokens": 0, "live_chunk": 1, "live_floor": 0, "live_hysteresis": 0.0, "max_answer_tokens": 1,
          "cold_top_k": 0, "exact_max_blocks": 0, "focus_lines": 0, "cold_staging_mib": 1, "memory_tokens": 1, "memory_budget": 0.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of QMSum-format JSON meetings")
    p.add_argument("--model", type=Path, default=default_model_dir(), help="local HF causal LM folder")
    p.add_argument("--budgets", default="0.5,0.25,0.125", help="fractions of the full bf16 KV bytes")
    p.add_argument("--out", type=Path, default=REPO / "out" / "kv_quality")
    p.add_argument("--limit", type=int, default=None, help="meetings to use (those with most answerable queries first)")
    p.add_argument("--max-tokens", type=int, default=4096,
                   help="truncate each transcript to this many tokens (capped at the model's context; default 4096 "
                        "so a CPU run finishes; the issue asks for up to 32K)")
    p.add_argument("--max-queries", type=int, default=None, help="specific queries per meeting (default all)")
    p.add_argument("--needles", type=int, default=20, help="synthetic facts per run (spread over the meetings)")
    p.add_argument("--needle-kinds", default=",".join(OLD_NEEDLE_KINDS),
                   help=f"comma list of {', '.join(NEEDLE_KINDS)} (the default: the kinds of the earlier figures)")
    p.add_argument("--part", choices=("all", *PARTS), default="all",
                   help="QMSum meetings by bench/qmsum_split.py: tuning (may be tuned on) or held-out (only scored)")
    p.add_argument("--presses", default=",".join(PRESS_NAMES), help="kvpress presses to compare")
    p.add_argument("--no-rotary-shim", action="store_true",
                   help="do not add the 'ExpectedAttention+shim' rows (ExpectedAttention with Gemma 3's rotary "
                        "embedding bound to the full-attention layer type)")
    p.add_argument("--chunk", type=int, default=512, help="chunk size of minutia's prefill (and the memory part)")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--drop-last-resort", action=argparse.BooleanOptionalAction, default=True,
                   help="drop only the fewest blocks the budget forces out, after quantizing every block (the app's "
                        "setting; --no-drop-last-resort: blocks compete for bytes by score x fidelity, drops included)")
    p.add_argument("--warm-kinds", default="int8,int4,int2",
                   help="minutia's quantized formats, most precise first (int8, int4, int2, fp8)")
    p.add_argument("--recent-tokens", type=int, default=256)
    p.add_argument("--annotations", action="store_true",
                   help="mark turn starts / speaker changes for minutia's structural bonus (off by default: on "
                        "meeting transcripts nearly every 64-token block holds a turn start)")
    p.add_argument("--weights", default=None,
                   help="minutia's score weights a,b,c,d (accumulated, query, position, structural) or name=weight "
                        "pairs of registered scorers (kvstore.scoring; default: the library's)")
    p.add_argument("--entities", action=argparse.BooleanOptionalAction, default=True,
                   help="mark numbers and names (kvstore.annotations.EntityFinder, as the app does) for minutia's "
                        "structural bonus")
    p.add_argument("--budget-mode", default="bytes",
                   help="minutia's budget, 'bytes', 'ratio' or 'bytes,ratio' (both, as separate rows): 'bytes' = a "
                        "fixed byte budget equal to the fraction of the context's full bf16 KV (the deployment case; "
                        "compression starts when the cache outgrows it); 'ratio' = TieredCacheConfig.budget_ratio, the "
                        "fraction of the tokens seen so far, enforced from the first chunk on")
    p.add_argument("--incremental", action="store_true",
                   help="live-meeting comparison: --budget-mode bytes,ratio,live (chunks of --live-chunk tokens)")
    p.add_argument("--live-chunk", type=int, default=128, help="prefill chunk of the 'live' budget mode")
    p.add_argument("--live-floor", type=int, default=2048,
                   help="budget_floor_tokens of the 'live' budget mode (it must cover the protected window: "
                        "a 512 floor still drops early context at 50%%, docs/benchmarks.md)")
    p.add_argument("--live-hysteresis", type=float, default=0.05, help="hysteresis of the 'live' budget mode")
    p.add_argument("--max-answer-tokens", type=int, default=96)
    p.add_argument("--stepwise", action="store_true",
                   help="feed every minutia row's answers one token at a time (the 'cold' rows always are), so "
                        "decode-step times can be compared side by side")
    p.add_argument("--cold-top-k", type=int, default=8, help="'cold' mode: cold blocks per layer a step may recall")
    p.add_argument("--exact-max-blocks", type=int, default=None,
                   help="'exact' mode: blocks per layer a question may read from their copies (default: --cold-top-k)")
    p.add_argument("--focus-lines", type=int, default=0,
                   help="answer as the app does: pin the blocks of the N sentences its retrieval ranks highest for "
                        "the question and, with a cold tier, recall / read them exactly (0: the KV alone)")
    p.add_argument("--cold-staging-mib", type=int, default=16, help="'cold' mode: device staging for prefetched blocks")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "bfloat16", "fp32", "float32", "fp16", "auto"],
                   help="the model's number format; auto: the app's choice for this machine (float32 on a CPU "
                        "without bfloat16 instructions, where bfloat16 is emulated and several times slower)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads; 0 = auto: 1 when the machine is already busy (1-min load average >= 1; "
                        "two threads fighting other processes for 2 cores are several times slower), else torch's default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memory-tokens", type=int, default=16384, help="length of the memory part's meeting")
    p.add_argument("--memory-budget", type=float, default=0.25)
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--memory-only", action="store_true",
                   help="rerun only the memory part and merge it into the report already in --out")
    p.add_argument("--skip-press-check", action="store_true",
                   help="skip the check that gathered kvpress caches equal kvpress's own hook")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: 1 meeting, 1 query, budget 0.25, 512-token context, 2 needles, 1K memory part")
    p.add_argument("--memory-probe", choices=("full", "minutia"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dtype == "auto":
        from app.llm.engine import native_dtype

        args.dtype = native_dtype()
    for name, least in _LEAST.items():
        value = getattr(args, name)
        if value is not None and value < least:
            p.error(f"--{name.replace('_', '-')} must be >= {least} (got {value})")
    if args.quick:
        args.limit = 1
        args.max_queries = 1
        args.budgets = "0.25"
        args.max_tokens = min(args.max_tokens, 512)
        args.needles = 2
        args.memory_tokens = min(args.memory_tokens, 512)
        args.max_answer_tokens = min(args.max_answer_tokens, 32)
    if not args.data.is_absolute():
        args.data = (Path.cwd() / args.data).resolve()
    if args.threads <= 0:
        try:
            busy = os.getloadavg()[0] >= 1.0
        except OSError:
            busy = False
        args.threads = 1 if busy else 0
    return args


def _machine(torch_threads: int) -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {"cpu": cpu, "nproc": os.cpu_count(), "torch_threads": torch_threads, "loadavg_at_start": load,
            "python": platform.python_version()}


def memory_only(args) -> int:
    """Rerun only the memory part and merge it into the report already in ``--out``."""
    from rich.console import Console

    console = Console(stderr=True)
    path = args.out / "kv_quality.json"
    if not path.is_file():
        console.print(f"[red]--memory-only needs an existing report at {path}")
        return 2
    report = json.loads(path.read_text())
    report["memory"] = run_memory_part(args, console)
    report["notes"] = [n for n in report["notes"] if not n.startswith("Memory part:")] + [MEMORY_NOTE]
    report["memory_command"] = "python bench/kv_quality.py " + " ".join(sys.argv[1:])
    report["rows"] = [tuple(r) for r in report["rows"]]
    path.write_text(json.dumps(report, indent=1, default=_json_default))
    write_markdown(args.out / "kv_quality.md", report)
    write_plot(args.out / "kv_quality.png", report)
    console.print((args.out / "kv_quality.md").read_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.memory_probe:
        logging.disable(logging.WARNING)
        warnings.filterwarnings("ignore")
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        memory_probe(args)
        return 0
    if args.memory_only:
        return memory_only(args)

    import torch
    import transformers
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from transformers import AutoModelForCausalLM, AutoTokenizer

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("kvpress").setLevel(logging.ERROR)
    console = Console(stderr=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.perf_counter()
    try:
        needle_kinds = tuple(k.strip() for k in args.needle_kinds.split(",") if k.strip())
        make_needles(1, 0, needle_kinds)
    except ValueError as exc:
        console.print(f"[red]{exc}")
        return 2
    try:
        budgets = [float(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError:
        budgets = []
    if not budgets or not all(0.0 < b <= 1.0 for b in budgets):
        console.print(f"[red]--budgets must be fractions in (0, 1], comma-separated (got {args.budgets!r})")
        return 2
    try:  # --weights / --warm-kinds / --block-size as the cache will take them, before minutes of loading
        minutia_settings(args, budget_ratio=budgets[0])
    except (ValueError, TypeError, KeyError) as exc:
        console.print(f"[red]bad minutia settings: {exc}")
        return 2
    press_names = [p.strip() for p in args.presses.split(",") if p.strip()]
    unknown = set(press_names) - set(PRESS_NAMES)
    if unknown:
        console.print(f"[red]unknown presses {sorted(unknown)}")
        return 2
    # the arguments first, the model and data after: a bad argument is said even where they are absent
    if not (args.model / "config.json").is_file():
        console.print(f"[red]model folder {args.model} not found (set --model or MINUTIA_HOME)")
        return 2
    files = [f for f in sorted(Path(args.data).glob("*.json")) if args.part == "all" or kv_part_of(f.name) == args.part]
    if not files:
        console.print(f"[red]no meetings in {args.data}" + ("" if args.part == "all" else f" (part {args.part})"))
        return 2
    args.out.mkdir(parents=True, exist_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=_dtype(args.dtype), attn_implementation="sdpa").eval()
    context = int(getattr(model.config, "max_position_embeddings", 32768))
    max_tokens = min(args.max_tokens, context)
    _warm_up(model)
    console.log(f"model loaded and warmed up ({time.perf_counter() - t_start:.1f} s)")

    chosen = rank_meetings(files, tokenizer, max_tokens)[: args.limit or None]
    if not chosen:
        console.print("[red]no meeting has a query whose span fits in the context")
        return 2

    needles = make_needles(max(args.needles, 0), args.seed, needle_kinds)
    per_meeting_needles = [needles[i::len(chosen)] for i in range(len(chosen))]
    rng = random.Random(args.seed + 1)
    meetings: list[Meeting] = []
    meeting_queries: list[list[Query]] = []
    meeting_info = []
    for (meeting, n_fit), own in zip(chosen, per_meeting_needles):
        k = len(own)
        depths = [min(0.95, max(0.05, (i + rng.uniform(0.15, 0.85)) / k)) for i in range(k)]
        insert_needles(meeting, own, depths, n_fit)
        encode(meeting, tokenizer, max_tokens)
        used = usable_queries(meeting, tokenizer)
        skipped = len(meeting.queries) - len(used)
        if args.max_queries is not None:
            skipped += max(0, len(used) - args.max_queries)
            used = used[: args.max_queries]
        meetings.append(meeting)
        meeting_queries.append(used)
        meeting_info.append({"name": meeting.name, "tokens": int(meeting.input_ids.shape[1]),
                             "full_tokens": meeting.full_tokens, "queries_used": len(used), "queries_skipped": skipped,
                             "needles": sum(1 for n in meeting.needles if n.token_start >= 0)})

    presses = make_presses(press_names, budgets, rotary_shim=("ExpectedAttention" in press_names
                                                              and not args.no_rotary_shim))
    press_keys = sorted({name for name, _, _ in presses}, key=lambda n: (PRESS_NAMES + ("ExpectedAttention+shim",)).index(n))
    if args.incremental:
        args.budget_mode = "bytes,ratio,live"
    modes = tuple(m.strip() for m in args.budget_mode.split(",") if m.strip())
    if not modes or set(modes) - set(MODE_LABELS):
        console.print(f"[red]--budget-mode takes a comma list of {', '.join(MODE_LABELS)}, not {args.budget_mode!r}")
        return 2
    rows = method_order(budgets, press_keys, modes)
    n_methods = len(rows)
    per_meeting: list[dict[str, Any]] = []
    press_errors: dict[str, str] = {}
    press_check = None

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, transient=False)
    with progress:
        t_meet = progress.add_task("meetings", total=len(meetings))
        t_eval = progress.add_task("method x (queries + needles)", total=sum(
            n_methods * (len(q) + len(m.needles)) for m, q in zip(meetings, meeting_queries)))
        for mi, (meeting, queries) in enumerate(zip(meetings, meeting_queries)):
            ids = meeting.input_ids
            n_tok = ids.shape[1]
            progress.update(t_meet, description=f"meetings ({meeting.name}, {n_tok} tokens)")
            results: dict[str, Any] = {}
            recorder = PressRecorder(model, [(n, b, p) for n, b, p in presses if n not in press_errors])
            t_phase = time.perf_counter()
            full = prepare_full(model, ids, recorder)
            press_errors.update(recorder.errors)
            console.log(f"{meeting.name}: full prefill of {n_tok} tokens (+ press scoring) {full.prefill_s:.1f} s")
            results["full"] = {**evaluate(model, full, meeting, queries, tokenizer, args, progress, t_eval),
                               "full_bytes": full.full_bytes, "sliding_bytes": full.sliding_bytes,
                               "prefill_s": full.prefill_s}
            if mi == 0 and not args.skip_press_check:
                ok = [(n, b) for n, b, _ in presses if (n, b) in recorder.indices and n == "SnapKV"]
                if ok:
                    press_check = verify_press_equivalence(model, ids, ok[0][0], ok[0][1], recorder.indices[ok[0]],
                                                           full.cache)
                    console.log(f"kvpress equivalence check: {press_check}")
            for name, budget, _ in presses:
                key = f"{name}@{budget:g}"
                if name in press_errors:
                    results[key] = {"error": press_errors[name]}
                    progress.advance(t_eval, len(queries) + len(meeting.needles))
                    continue
                prepared = prepare_pressed(model, full, recorder.indices[(name, budget)], n_tok)
                results[key] = {**evaluate(model, prepared, meeting, queries, tokenizer, args, progress, t_eval),
                                "full_bytes": prepared.full_bytes, "sliding_bytes": prepared.sliding_bytes,
                                "prefill_s": prepared.prefill_s}
                del prepared
            console.log(f"{meeting.name}: full cache + kvpress evaluated in {time.perf_counter() - t_phase:.1f} s")
            del full, recorder
            for budget, mode in [(b, m) for b in budgets for m in modes]:
                key = minutia_key(mode, budget)
                prepared = prepare_minutia(model, ids, meeting, budget, args, mode)
                results[key] = {
                    **evaluate(model, prepared, meeting, queries, tokenizer, args, progress, t_eval),
                    "full_bytes": prepared.full_bytes, "sliding_bytes": prepared.sliding_bytes,
                    "prefill_s": prepared.prefill_s, **prepared.extra}
                console.log(f"{meeting.name}: {key} prefill {prepared.prefill_s:.1f} s, "
                            f"{prepared.full_bytes / max(results['full']['full_bytes'], 1):.3f} of full bytes, "
                            f"{prepared.extra['tokens_kept_per_layer']:.0f}/{n_tok} tokens kept per layer")
                steps = sorted(results[key].pop("step_seconds", []))
                if steps:
                    results[key]["decode_step_ms"] = {"median": 1e3 * steps[len(steps) // 2],
                                                      "p95": 1e3 * steps[int(0.95 * (len(steps) - 1))]}
                cold = getattr(prepared.cache, "cold_tier", None)
                if cold is not None:
                    stats = cold.stats()
                    results[key]["cold"] = {name: stats[name] for name in (
                        "prefetch_hit_rate", "evicted", "recalled", "requested", "cold_blocks", "bytes_per_tier",
                        "copies", "exact_reads")}
                    results[key]["cold"]["peak_answer_fraction"] = (
                        getattr(prepared.cache, "peak_answer_bytes", 0) / max(results["full"]["full_bytes"], 1))
                    if steps:
                        results[key]["cold"]["decode_step_ms"] = results[key]["decode_step_ms"]
                    console.log(f"{meeting.name}: {key} cold tier: {results[key]['cold']}")
                    cold.close()
                del prepared
            model.set_attn_implementation("sdpa")
            per_meeting.append({"meeting": meeting.name, "tokens": n_tok, "methods": results})
            progress.advance(t_meet)

    memory = []
    if not args.skip_memory:
        memory = run_memory_part(args, console)

    agg = aggregate(per_meeting)
    n_queries = sum(len(q) for q in meeting_queries)
    n_needles = sum(m["needles"] for m in meeting_info)
    notes = [
        f"Each transcript is truncated to {max_tokens} tokens (model context {context}); queries whose gold "
        "span has less than half of its tokens inside the truncated context are skipped (counts below). "
        f"{sum(1 for m in meeting_info if m['full_tokens'] > max_tokens)} of {len(meeting_info)} meetings were truncated.",
        "minutia: TieredCache(compress=True, budget_bytes=b x the context's full bf16 KV bytes of the full-attention "
        "layers) - a fixed byte budget, compression starts when the cache outgrows it"
        + ("; 'ratio budget from chunk 1' rows use budget_ratio=b instead (b of the tokens seen so far, enforced at "
           "every chunk, as configs/cpu-small.yaml does)" if "ratio" in modes else "")
        + (f"; 'live' rows use budget_ratio=b with budget_floor_tokens={args.live_floor}, drop_last_resort=True, "
           f"hysteresis={args.live_hysteresis}, prefilled in chunks of {args.live_chunk} tokens as a live meeting "
           "would (the final budget equals the bytes rows' when b x tokens >= the floor)" if "live" in modes else "")
        + " - under the minutia_sparse attention, chunked prefill of "
        f"{args.chunk} tokens that compresses as it goes (peak = budget + one chunk); its bytes include its metadata "
        "(block key bounds, scores, recent queries, summary). Turn starts and speaker changes are annotated "
        f"({'on' if args.annotations else 'off'}). Each query runs after checkpoint() and is rolled back.",
        "kvpress: compression_ratio = 1 - b on the full-attention layers, applied once after a single full "
        "prefill (kvpress compresses only the prefill; it needs the whole uncompressed cache first). Kept "
        "indices come from each press's own score() and ScorerPress's topk, recorded in hooks on one shared full "
        "prefill; the pressed layers report the mask offset so the question tokens stay causal on Gemma 3.",
        "Equal bytes: Gemma 3's sliding layers keep their 512-token window in every method (kvpress skips them on "
        "Gemma 3 too), so budgets compare the full-attention layers' bytes. kvpress's kept tokens are bf16 with no "
        "metadata; minutia's bytes include its metadata and quantization scales, so at the same budget minutia "
        "stores fewer KV bytes of payload.",
        "NLL recovery = mean full-cache answer NLL / mean method NLL over all used queries (answers capped at "
        f"{args.max_answer_tokens} tokens); needle accuracy = exact match of the greedy answer after "
        "'Question: ...\\nAnswer: <fact prefix>'.",
        "Span retention counts a token readable when it is kept (L1 full precision or L2 INT8/INT4) in a "
        "full-attention layer, averaged over the full-attention layers; for the full cache it is 1 by definition.",
    ]
    if press_errors:
        for name, err in press_errors.items():
            notes.append(f"kvpress {name} fails on {type(model).__name__}: {err}. No other real checkpoint is "
                         "available offline to rerun it on an architecture kvpress supports (a tiny random Llama "
                         "would run, but its quality numbers would be meaningless, so none are reported).")
        if "ExpectedAttention" in press_errors and any(n == "ExpectedAttention+shim" for n, _, _ in presses):
            notes.append("ExpectedAttention+shim: the same press with Gemma 3's rotary embedding bound to the "
                         "full-attention layer type (the bench's adapter, not kvpress code), to still compare it.")
    if press_check is not None:
        notes.append(f"Check: gathered kvpress cache vs kvpress's own forward_hook ({press_check['press']} @ "
                     f"{press_check['budget']:g}, first meeting): max abs diff {press_check.get('max_abs_diff')}.")
    if memory:
        notes.append(MEMORY_NOTE)
    report = {
        "command": "python bench/kv_quality.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "model": str(args.model), "dtype": args.dtype, "data": str(args.data), "max_tokens": max_tokens,
        "model_context": context, "budgets": budgets, "presses": press_keys,
        "n_meetings": len(meetings), "n_queries": n_queries, "n_needles": n_needles,
        "machine": _machine(torch.get_num_threads()),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "kvpress": _version("kvpress")},
        "args": {k: str(v) for k, v in vars(args).items()},
        "rows": rows, "results": agg, "targets": target_lines(agg, press_names, budgets, modes[0]),
        "press_errors": press_errors, "press_check": press_check, "memory": memory,
        "meetings": meeting_info, "per_meeting": per_meeting, "notes": notes,
        "wall_s": time.perf_counter() - t_start,
    }
    (args.out / "kv_quality.json").write_text(json.dumps(report, indent=1, default=_json_default))
    write_markdown(args.out / "kv_quality.md", report)
    write_plot(args.out / "kv_quality.png", report)
    console.print((args.out / "kv_quality.md").read_text())
    return 0


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return None


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return str(obj)


if __name__ == "__main__":
    sys.exit(main())
