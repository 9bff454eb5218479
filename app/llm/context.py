"""The meeting held in the LLM's KV cache, grown line by line while the meeting runs.

Committed transcript lines (and slide text) are tokenized and prefilled in chunks into one
TieredCache as they arrive (incremental prefill), so a question at minute 90 only pays for its own
tokens. A question or summary request is appended after a checkpoint, decoded greedily, and rolled
back afterwards: the cache holds the meeting and nothing else (seed 11; DESIGN "Data flow").
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Iterator

import torch

from app.platform.config import KVSettings, controller_for, kv_cache
from app.llm.comparisons import AnswerComparer
from app.llm.drift import AnswerTrace, DriftMonitor, ShadowQuestions
from app.llm.engine import LLMEngine
from app.text.pii import PIIDetector, cut_text, mask_text
from app.llm.repetition import banned_tokens
from app.text.transcript import SLIDE_SPEAKER, format_time
from encoders.errors import InputError
from kvstore.annotations import EntityFinder, TokenFlag, tokens_in_spans

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContextLine:
    """One line of the meeting as the model reads it: ``[mm:ss] Speaker: text``."""

    modality: str  # "audio" (speech), "video" (slide text) or "text"
    start: float
    end: float
    speaker: str | None
    text: str
    speaker_change: bool = False
    slide_change: bool = False

    def render(self) -> str:
        who = SLIDE_SPEAKER if self.modality == "video" else (self.speaker or "Speaker")
        return f"[{format_time(self.start)}] {who}: {self.text}\n"


@dataclass(frozen=True)
class Generation:
    text: str
    mean_logprob: float
    prompt_tokens: int  # tokens of the suffix (question) prefilled on top of the meeting
    new_tokens: int
    time_to_first_token: float  # seconds from the request to the first generated token (incl. pending prefill)
    total_seconds: float
    tokens_per_second: float | None = None  # after the first token (None: fewer than 2 tokens)
    token_ids: tuple[int, ...] = ()  # the generated tokens


@dataclass(frozen=True)
class EncodedLine:
    """A line tokenized: ids, and the offsets (into them) of its entities."""

    line: ContextLine
    ids: list[int]
    entities: list[int]


@dataclass(frozen=True)
class PlacedLine:
    """Where a line landed: its token range in the cache (for the timeline index)."""

    line: ContextLine
    token_start: int
    token_end: int


class MeetingContext:
    """A TieredCache holding the meeting so far; thread-safe (one lock for the cache, the engine's for the model)."""

    def __init__(self, engine: LLMEngine, kv: KVSettings, header: str, prefill_chunk_tokens: int = 192,
                 restored: Any = None, restored_lines: int = 0, cold_tier: Any = None,
                 erase_pii: PIIDetector | None = None) -> None:
        """``restored``: a cache loaded from a saved session (kvstore.persist), continued instead of a new one.
        ``cold_tier``: a kvstore.cold.ColdTier that blocks the budget cannot hold are evicted to.
        ``erase_pii``: the personal data it finds in a line never reaches the cache (the pii policy
        ``zero-in-kv``): the model reads the line without it, the timeline shows a mask ([EMAIL])."""
        self.erase_pii = erase_pii
        self.engine = engine
        self.kv = kv
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self._lock = threading.RLock()
        self._pending: list[ContextLine] = []
        self._placed_listeners: list[Any] = []
        self.max_positions = int(getattr(engine.model.config, "max_position_embeddings", 0) or 8192)
        self.full = False  # the model's position limit was reached: no further lines are prefilled
        self._entities = EntityFinder()  # learns the meeting's lower-case words as lines arrive
        self.drift = DriftMonitor(kv.drift_sample_rate)  # sparse vs dense reads on sampled decode steps...
        self.shadow = ShadowQuestions(kv.shadow_question_rate)  # ...and whole answers, both after the answer
        self.comparer = AnswerComparer(self)  # runs both
        self._decode_rates: deque[float] = deque(maxlen=32)  # tokens/s after the first token, recent answers
        self._closed = False
        self.controller = None  # kvstore.control.KVController: memory PID and decode-sparsity bandit (_manage)
        if restored is not None:
            self.cache, self.tokens, self.lines = restored, int(restored.get_seq_length()), restored_lines
            if cold_tier is not None and hasattr(restored, "attach_cold_tier"):  # (a resumed one comes with its own)
                restored.attach_cold_tier(cold_tier)
            self._manage()
            return
        self.cache = kv_cache(kv, engine.model.config, cold_tier=cold_tier if kv.enabled else None)
        self._manage()
        self.tokens = 0  # tokens in the cache (== cache.get_seq_length())
        self.lines = 0
        tokenizer = engine.tokenizer
        # A chat template writes the BOS token into the header text itself.
        needs_bos = tokenizer.bos_token_id is not None and not header.startswith(str(tokenizer.bos_token))
        bos = [tokenizer.bos_token_id] if needs_bos else []
        header_ids = bos + self._encode(header)
        self._prefill(header_ids, [(0, len(header_ids), "text", 0, [])])

    # ------------------------------------------------------------------ cache set-up
    def _manage(self) -> None:
        """The block manager every promotion, recall and report goes through, and the controller (None for a
        DynamicCache, which has no blocks)."""
        from kvstore.cache import TieredCache
        from kvstore.manager import KVCacheManager

        self.blocks = KVCacheManager(self.cache) if isinstance(self.cache, TieredCache) else None
        self.controller = controller_for(self.cache, self.kv) if isinstance(self.cache, TieredCache) else None

    def compact(self) -> int:
        """Shrink the cache's block pools to their used blocks; returns the bytes given back."""
        with self._lock, self.engine.lock, torch.inference_mode():
            if not hasattr(self.cache, "compact_storage"):
                return 0
            before = self.cache.reserved_bytes()
            self.cache.compact_storage()
            cold = getattr(self.cache, "cold_tier", None)
            if cold is not None:  # and re-sort the cold blocks by priority: the best on host, the rest lower
                cold.placement.rebalance()
            return before - self.cache.reserved_bytes()

    def _control(self, step: str, *args: Any) -> Any:
        """One step of the controller, if any, and what it returned; it only tunes the cache, so a failure is
        logged, not raised (the prefill or answer it follows stands)."""
        if self.controller is None:
            return None
        try:
            return getattr(self.controller, step)(*args)
        except Exception:
            log.exception("KV controller: %s failed", step)
            return None

    def set_device_cap(self, cap_bytes: int) -> None:
        """A new hard cap on the KV's device memory (a squeeze when other meetings need the device, or a release):
        the controller (or, without one, the watermark) moves the budget under it and compression runs now."""
        if not hasattr(self.cache, "device_bytes"):
            raise InputError("a device cap needs minutia's TieredCache (kv.enabled)")
        if cap_bytes <= 0:
            raise InputError("the device cap must be positive")
        with self._lock, self.engine.lock, torch.inference_mode():
            self.cache.settings.device_cap_bytes = cap_bytes
            if self.controller is None:  # a first cap: the controller has something to hold now
                self.controller = controller_for(self.cache, self.kv)
            if self.controller is not None:
                self.controller.set_cap(cap_bytes)
            else:
                self.cache.compress()

    def close(self) -> None:
        """Let go of the cold tier's blocks (host memory, store entries), after the last answer's comparison (up to
        a minute: one forward; the session's last signals, which a canary reads, include it)."""
        self.shadow.wait(60.0)
        with self._lock:
            self._closed = True
            if getattr(self.cache, "cold_tier", None) is not None:
                self.cache.attach_cold_tier(None)
        self.shadow.wait(60.0)

    def _encode(self, text: str) -> list[int]:
        return self.engine.tokenizer(text, add_special_tokens=False).input_ids

    def _encode_line(self, line: ContextLine) -> EncodedLine:
        """The line's token ids and the positions (in them) of its entities (numbers, names): the
        importance score's structural bonus keeps those blocks sharper (kvstore.annotations).

        Under ``erase_pii`` the ids are of the line without its personal data. Zero K/V rows in their
        place (kvstore.cache.TieredCache.erase_tokens, the first design) kept the tokens' positions and
        a zero key still took softmax mass: on development meetings 29 of 30 other needles were
        answered, 30 of 30 with the data left out (bench/pii.py, docs/benchmarks.md)."""
        said = line
        if self.erase_pii is not None and (spans := self.erase_pii.find(line.text)):
            said = replace(line, text=cut_text(line.text, spans))
            line = replace(line, text=mask_text(line.text, spans))  # what the timeline shows
        text = said.render()
        tokenizer = self.engine.tokenizer
        if not getattr(tokenizer, "is_fast", False):  # offsets need a fast tokenizer
            return EncodedLine(line, self._encode(text), [])
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return EncodedLine(line, enc.input_ids, tokens_in_spans(enc.offset_mapping, self._entities.find(text)))

    def on_placed(self, callback) -> None:
        """``callback(PlacedLine)`` after each line is in the cache (the session puts it on the timeline)."""
        self._placed_listeners.append(callback)

    # ------------------------------------------------------------------ growing
    def append(self, line: ContextLine) -> None:
        """Queue a committed line; it is prefilled with the next chunk (or before the next question)."""
        if line.text.strip():
            with self._lock:
                self._pending.append(line)

    @property
    def pending_lines(self) -> int:
        with self._lock:
            return len(self._pending)

    def flush(self, min_tokens: int = 0, max_chunk_tokens: int = 256) -> int:
        """Prefill queued lines (all of them, or nothing if fewer than ``min_tokens`` are waiting).

        Lines are packed into forwards of up to ``max_chunk_tokens`` tokens: one forward per line
        would pay the per-call overhead of every layer dozens of times per minute of meeting. A chunked flush
        (``min_tokens`` > 0, the live loop's) waits its next turn while the last answer's comparison runs: once
        new lines are in, that answer's prefix is gone and the comparison would be skipped.
        """
        if min_tokens > 0 and self.shadow.running():
            return 0
        with self._lock:
            if not self._pending:
                return 0
            encoded = [self._encode_line(line) for line in self._pending]
            total = sum(len(e.ids) for e in encoded)
            if total < min_tokens:
                return 0
            self._pending.clear()
            chunk: list[EncodedLine] = []
            added = 0
            for item in encoded:
                if self.tokens + added + len(item.ids) + 512 > self.max_positions:
                    self.full = True  # answers fall back to reading the transcript; said in stats()
                    break
                chunk.append(item)
                added += len(item.ids)
                if sum(len(e.ids) for e in chunk) >= max_chunk_tokens:
                    self._prefill_lines(chunk)
                    chunk = []
            if chunk:
                self._prefill_lines(chunk)
            return added

    def _prefill_lines(self, chunk: list[EncodedLine]) -> None:
        start = self.tokens
        placed: list[PlacedLine] = []
        marks: list[tuple[int, int, str, int, list[int]]] = []
        ids: list[int] = []
        for item in chunk:
            line, begin = item.line, start + len(ids)
            ids.extend(item.ids)
            marks.append((begin, begin + len(item.ids), line.modality, _line_flags(line), [begin + i for i in item.entities]))
            placed.append(PlacedLine(line, begin, begin + len(item.ids)))
        self._prefill(ids, marks)
        self.lines += len(chunk)
        for item in placed:
            for callback in self._placed_listeners:
                callback(item)

    def _prefill(self, ids: list[int], marks: list[tuple[int, int, str, int, list[int]]]) -> None:
        """One forward of ``ids`` after the cache; ``marks``: (start, end, modality, flags, entity
        positions) per line."""
        if not ids:
            return
        # Everything that touches the cache runs in inference mode: tensors the model created there
        # cannot be updated in place outside it.
        with self.engine.lock, torch.inference_mode():
            if hasattr(self.cache, "mark_modality"):
                for begin, end, modality, flags, entities in marks:
                    self.cache.mark_modality((begin, end), modality)
                    if flags:
                        self.cache.annotate(list(range(begin, min(begin + 4, end))), flags)
                    if entities:
                        self.cache.annotate(entities, TokenFlag.ENTITY)
            self._forward(ids)
            self.tokens += len(ids)
            self._control("after_prefill", len(ids))

    def _forward(self, ids: list[int]) -> torch.Tensor:
        """Run ``ids`` after the cache's tokens (caller holds the engine lock, in inference mode);
        returns the last position's logits. ``self.tokens`` is advanced by the caller."""
        out = self.engine.model(
            input_ids=torch.tensor([ids]),
            past_key_values=self.cache,
            use_cache=True,
            cache_position=torch.arange(self.tokens, self.tokens + len(ids)),
            logits_to_keep=1,
        )
        return out.logits[0, -1]

    # ------------------------------------------------------------------ asking
    def generate(
        self,
        suffix: str,
        max_new_tokens: int,
        stop: tuple[str, ...] = ("\n",),
        focus: list[tuple[int, int]] | None = None,
    ) -> Generation:
        """Continue the meeting with ``suffix`` and decode greedily; the cache is rolled back afterwards.

        ``focus``: token ranges of the meeting the question is about (query-aware promotion: their
        blocks keep their format and are always read while this answer is decoded).
        """
        started = time.perf_counter()
        ids = self._encode(suffix)
        with self._lock:
            self.flush()
            choice = self._control("before_answer")
            references = self.comparer.references()
            trace = AnswerTrace(steps=[] if references and self.shadow.due() else None)
            with contextlib.ExitStack() as stack:
                if focus and self.blocks is not None:
                    stack.enter_context(self.blocks.focus(focus))
                generation = self._generate_locked(ids, max_new_tokens, stop, started, focus, trace)
            self.comparer.later(ids, trace, references, choice, generation.tokens_per_second)
            return generation

    def next_token_logits(self, suffix: str) -> torch.Tensor:
        """fp32 logits of the token after the meeting + ``suffix`` (rolled back; for checks after a resume)."""
        ids = self._encode(suffix)
        with self._lock:
            self.flush()
            with self._rolled_back(), self.engine.lock, torch.inference_mode():
                return self._forward(ids).float().clone()

    @contextmanager
    def _rolled_back(self) -> Iterator[None]:
        """Whatever is added to the cache inside leaves it afterwards (a question, an answer)."""
        with torch.inference_mode():
            if hasattr(self.cache, "checkpoint"):
                checkpoint, saved = self.cache.checkpoint(), None
            else:  # DynamicCache: its sliding-window layers cannot be cropped, so keep a copy
                checkpoint, saved = None, copy.deepcopy(self.cache)
        before = self.tokens
        try:
            yield
        finally:
            with torch.inference_mode():
                if checkpoint is not None:
                    self.cache.rollback(checkpoint)
                else:
                    self.cache = saved
            self.tokens = before

    def _generate_locked(self, ids: list[int], max_new_tokens: int, stop: tuple[str, ...], started: float,
                         focus: list[tuple[int, int]] | None = None, trace: AnswerTrace | None = None) -> Generation:
        if self.tokens + len(ids) + max_new_tokens > self.max_positions:
            raise InputError(f"the meeting fills the model's context ({self.tokens} of {self.max_positions} tokens)")
        with self._rolled_back():
            if focus and self.blocks is not None and self.cache.cold_tier is not None:
                with self.engine.lock, torch.inference_mode():
                    self.blocks.recall_tokens(focus)  # the rollback sends them back to the cold tier
            return self._decode(ids, max_new_tokens, stop, started, trace or AnswerTrace())

    def _decode(self, ids: list[int], max_new: int, stop: tuple[str, ...], started: float,
                trace: AnswerTrace) -> Generation:
        """Greedy decoding; ``trace`` keeps each step's token and what the comparisons after the answer need."""
        tokenizer = self.engine.tokenizer
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        generated: list[int] = []
        logprobs: list[float] = []
        first_token_at = None
        text = ""
        with self.engine.lock, torch.inference_mode():
            feed = ids
            if len(ids) > 1 and getattr(self.cache, "cold_tier", None) is not None:
                # The question's last token runs as a decode step: the cold blocks the others staged
                # (kvstore.cold) are recalled before the first answer token is predicted.
                self._forward(ids[:-1])
                self.tokens += len(ids) - 1
                feed = ids[-1:]
            for _ in range(max_new):
                logits = self._forward(feed)
                self.tokens += len(feed)
                scores = torch.log_softmax(logits.float(), dim=-1)
                banned = banned_tokens(generated)  # no phrase twice (app/llm/repetition.py)
                if banned:
                    scores[list(banned)] = float("-inf")
                token = int(scores.argmax())
                trace.keep(token, logits, self._drift_sampled())
                if first_token_at is None:
                    first_token_at = time.perf_counter()
                if token in eos:
                    break
                generated.append(token)
                logprobs.append(float(scores[token]))
                text = tokenizer.decode(generated, skip_special_tokens=True)
                if any(s in text for s in stop):
                    break
                feed = [token]
        for s in stop:
            text = text.split(s)[0]
        now = time.perf_counter()
        rate = None
        if first_token_at is not None and len(generated) > 1 and now > first_token_at:
            rate = (len(generated) - 1) / (now - first_token_at)
            self._decode_rates.append(rate)
        return Generation(
            text=text.strip(),
            mean_logprob=sum(logprobs) / max(1, len(logprobs)),
            prompt_tokens=len(ids),
            new_tokens=len(generated),
            time_to_first_token=(first_token_at or now) - started,
            total_seconds=now - started,
            tokens_per_second=rate,
            token_ids=tuple(generated),
        )

    def _drift_sampled(self) -> bool:
        return getattr(self.cache, "reads_sparsely", False) and self.drift.due()

    # ------------------------------------------------------------------ accounting
    def stats(self) -> dict[str, Any]:
        """KV figures for dashboards and metrics, measured from the cache's tensors."""
        with self._lock, torch.inference_mode():
            stats: dict[str, Any] = {"tokens": self.tokens, "lines": self.lines, "full": self.full,
                                     **self.drift.report(), **self.shadow.report(),
                                     **(self.controller.report() if self.controller is not None else {}),
                                     "decode_tokens_per_second": (sum(self._decode_rates) / len(self._decode_rates)
                                                                  if self._decode_rates else None)}
            cache = self.cache
            if self.blocks is not None:
                report = self.blocks.report().as_dict()
                stats.update({key: report[key] for key in (
                    "kv_bytes", "tiered_kv_bytes", "full_precision_bytes", "budget_bytes", "bytes_by_tier",
                    "bytes_by_modality", "prefetch_hit_rate", "mode")})
                stats["compression_ratio"] = round(report["compression_ratio"], 3)
            else:
                held = sum(
                    t.numel() * t.element_size()
                    for layer in cache.layers
                    for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                    if isinstance(t, torch.Tensor)
                )
                stats.update(kv_bytes=held, tiered_kv_bytes=held, full_precision_bytes=held, budget_bytes=0,
                             compression_ratio=1.0, bytes_by_tier={"device": held}, bytes_by_modality={},
                             prefetch_hit_rate=None, mode="normal")
            return stats


def _line_flags(line: ContextLine) -> int:
    flags = 0
    if line.speaker_change:
        flags |= TokenFlag.SPEAKER_CHANGE
    if line.slide_change:
        flags |= TokenFlag.SLIDE_CHANGE
    return int(flags)


def confidence(generation: Generation) -> float:
    return round(math.exp(generation.mean_logprob), 3)
