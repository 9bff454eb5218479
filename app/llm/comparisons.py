"""What an answer is compared with after it is returned: a shadowed question's whole answer against the dense and
exact reads of the meeting, and the drift's sampled decode steps against the dense read (app/llm/drift.py). The
comparisons run in one background job that waits for the context's lock, so the answer is never held for them.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from app.llm.drift import AnswerTrace


class AnswerComparer:
    """One meeting context's comparisons; it reads the context's cache, lock and controller."""

    def __init__(self, context: Any) -> None:
        self.context = context  # the app.llm.context.MeetingContext it belongs to (not imported: that imports this)

    def later(self, ids: list[int], trace: AnswerTrace, references: tuple[str, ...], choice: Any,
              rate: float | None) -> None:
        """An answer's comparisons, in one background job that waits for this context's lock (the answer is
        returned first and never held for them): a shadowed question against each reference, the drift's sampled
        steps against the dense read of every resident block. The controller is rewarded for the answer when its
        steps' JS is known (at once when nothing was sampled, or a comparison is still running)."""
        ctx = self.context
        shadowed = trace.steps is not None
        if not shadowed and not trace.sampled:
            ctx._control("after_answer", choice, rate, [])
            return
        at = ctx.tokens

        def compare() -> None:
            divergences: list[float] = []
            compared = False
            for name in references if shadowed else ("resident",):
                wanted = set(range(len(trace.steps))) if shadowed else set()
                if name == "resident":
                    wanted |= set(trace.sampled)
                dense = self.dense_answer(ids, trace.tokens, sorted(wanted), at, exact=(name == "exact"))
                if dense is None:  # the meeting moved on (or closed) first
                    continue
                compared = True
                if shadowed:
                    ctx.shadow.record(trace.steps, [dense[i] for i in range(len(trace.steps))], name)
                if name == "resident":
                    divergences = [ctx.drift.record(logits, dense[i]) for i, logits in sorted(trace.sampled.items())]
            self._count(trace, shadowed, compared)
            with ctx._lock:
                ctx._control("after_answer", choice, rate, divergences)

        if not ctx.shadow.start(compare):  # the last answer's comparison still runs
            self._count(trace, shadowed, False)
            ctx._control("after_answer", choice, rate, [])

    def _count(self, trace: AnswerTrace, shadowed: bool, compared: bool) -> None:
        ctx = self.context
        if shadowed:
            if compared:
                ctx.shadow.compared += 1
            else:
                ctx.shadow.skipped += 1
        if not compared:
            ctx.drift.skipped += len(trace.sampled)

    def references(self) -> tuple[str, ...]:
        """What a shadowed answer is compared with: ``resident`` (every resident block, with a sparse decode read)
        and ``exact`` (with exact copies in a cold tier: the meeting's blocks recalled and read from their
        full-precision copies as the device cap allows, the uncompressed prefix as far as it is kept)."""
        ctx = self.context
        references = ("resident",) if getattr(ctx.cache, "reads_sparsely", False) else ()
        cold = getattr(ctx.cache, "cold_tier", None)
        if not (ctx.kv.shadow_exact and cold is not None and cold.exact_copies):
            return references
        # Without a device cap on a GPU the whole meeting at full precision could take the device's memory.
        bounded = ctx.cache.settings.device_cap_bytes is not None or ctx.engine.model.device.type == "cpu"
        return (*references, "exact") if bounded else references

    def dense_answer(self, ids: list[int], answer: list[int], steps: list[int], at_tokens: int,
                      exact: bool = False) -> dict[int, torch.Tensor] | None:
        """The question and the answer's tokens in one forward reading every resident block (``exact``: after
        recalling the meeting's blocks from the cold tier and their exact copies): the logits of each of the answer's
        decode ``steps`` (0: the step that chose its first token), leaving the cache as it was; None when the meeting
        moved on since the answer (or closed)."""
        ctx = self.context
        with ctx._lock:
            if ctx._closed or ctx.tokens != at_tokens or not steps:
                return None
            feed = ids + answer[:steps[-1]]
            checkpoint = ctx.cache.checkpoint()
            try:
                cold = ctx.cache.cold_tier
                with ctx.engine.lock, torch.inference_mode(), ctx.cache.dense_reads(), \
                        (cold.shadow_reads() if cold is not None else contextlib.nullcontext()):
                    if exact:
                        ctx.blocks.read_everything()
                    out = ctx.engine.model(input_ids=torch.tensor([feed]), past_key_values=ctx.cache, use_cache=True,
                                            cache_position=torch.arange(ctx.tokens, ctx.tokens + len(feed)),
                                            logits_to_keep=torch.tensor([len(ids) - 1 + step for step in steps]))
                    logits = out.logits[0].float()
                    return {step: logits[row].clone() for row, step in enumerate(steps)}
            finally:
                with torch.inference_mode():
                    ctx.cache.rollback(checkpoint)
