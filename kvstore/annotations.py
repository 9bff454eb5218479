"""Structural annotations attached to token positions (speaker turns, slide changes, entities).

The app knows where a speaker turn starts or a slide changes when it builds the transcript text; it
marks those token positions here and the importance score gives their blocks a bonus (seed 2.2),
because the first words of a turn and the moments around a slide change are what questions point at.
"""

from __future__ import annotations

import enum
import re
from typing import Callable, Iterable, Sequence

import torch

from kvstore.modality import Modality  # noqa: F401  (re-exported: token annotations carry it)


class TokenFlag(enum.IntFlag):
    NONE = 0
    TURN_START = 1  # first tokens of a speaker turn
    SPEAKER_CHANGE = 2  # the turn starts with a different speaker than the previous one
    SLIDE_CHANGE = 4  # a slide / scene change happened at this time
    ENTITY = 8  # a named entity, number, code, ...
    TIMESTAMP = 16  # an explicit time marker in the transcript
    # 32 was PII (zero K/V rows for personal data, the first design); the app now leaves personal data out of the
    # text the model reads (app/llm/context.py). Never reuse it: flags are saved with a meeting.


def _grown(length: int, *columns: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-index columns of one length, zero-extended (at least doubling) to hold ``length`` entries."""
    if columns[0].numel() >= length:
        return columns
    size = max(length, 2 * columns[0].numel())
    grown = tuple(torch.zeros(size, dtype=c.dtype) for c in columns)
    for new, old in zip(grown, columns):
        new[: old.numel()] = old
    return grown


def _indices(indices: torch.Tensor | list[int], grow: Callable[[int], None]) -> torch.Tensor | None:
    """``indices`` as a flat long tensor, ``grow`` given the length that holds them; None when empty."""
    indices = torch.as_tensor(indices, dtype=torch.long).flatten()
    if indices.numel() == 0:
        return None
    grow(int(indices.max()) + 1)
    return indices


class TokenAnnotations:
    """Per-position flag bits and modality, growable, shared by every layer of a cache (2 bytes per token)."""

    def __init__(self) -> None:
        self.flags = torch.zeros(0, dtype=torch.uint8)
        self.modality = torch.zeros(0, dtype=torch.uint8)

    def set_modality(self, positions: torch.Tensor | list[int], modality: Modality | int) -> None:
        """Tag token positions (may lie ahead of the cache) with the stream they come from."""
        positions = _indices(positions, self._grow)
        if positions is not None:
            self.modality[positions] = int(modality)

    def tokens_by_modality(self, length: int) -> torch.Tensor:
        """Token count per modality code among positions ``[0, length)``: ``[len(Modality)]``."""
        self._grow(length)
        return torch.bincount(self.modality[:length].long(), minlength=len(Modality))[: len(Modality)]

    def block_modality(self, block_index: torch.Tensor, block_size: int) -> torch.Tensor:
        """Modality of each block: that of its first token (blocks rarely straddle streams)."""
        if block_index.numel() == 0:
            return torch.zeros(0, dtype=torch.long)
        self._grow((int(block_index.max()) + 1) * block_size)
        return self.modality[block_index.cpu() * block_size].long()

    def mark(self, positions: torch.Tensor | list[int], flags: int | torch.Tensor) -> None:
        """OR ``flags`` into the given absolute token positions (may lie ahead of the cache)."""
        positions = _indices(positions, self._grow)
        if positions is not None:
            self.flags[positions] |= torch.as_tensor(flags, dtype=torch.uint8).expand(positions.shape)

    def flagged(self, start: int, end: int, flag: int) -> torch.Tensor:
        """Offsets (from ``start``) of the positions in ``[start, end)`` that carry ``flag``."""
        self._grow(end)
        return torch.nonzero(self.flags[start:end] & int(flag)).flatten()

    def truncate(self, length: int) -> None:
        """Forget annotations at positions >= ``length`` (after a rollback)."""
        if self.flags.numel() > length:
            self.flags[length:] = 0
            self.modality[length:] = 0

    def block_flags(self, block_index: torch.Tensor, block_size: int) -> torch.Tensor:
        """OR of the flags of each block's tokens: ``[N]`` int64."""
        if block_index.numel() == 0:
            return torch.zeros(0, dtype=torch.long)
        needed = (int(block_index.max()) + 1) * block_size
        self._grow(needed)
        per_block = self.flags[: needed].view(-1, block_size).long()
        ored = torch.zeros(per_block.shape[0], dtype=torch.long)
        for bit in range(8):  # OR-reduce bit by bit (vectorised over blocks)
            ored |= ((per_block >> bit) & 1).amax(dim=1) << bit
        return ored[block_index.cpu()]

    def _grow(self, length: int) -> None:
        self.flags, self.modality = _grown(length, self.flags, self.modality)


class BlockPriorities:
    """Query-aware promotion state per logical block: a score boost and a pin (seed 4).

    A question about a time window raises the importance of that window's blocks (the boost stays:
    the meeting showed interest in that moment) and pins them while the answer is produced: pinned
    blocks keep their current format and are always read at decode.
    """

    def __init__(self) -> None:
        self.boost = torch.zeros(0, dtype=torch.float32)
        self.pinned = torch.zeros(0, dtype=torch.bool)

    def promote(self, blocks: torch.Tensor, boost: float, pin: bool) -> None:
        blocks = _indices(blocks, self._grow)
        if blocks is None:
            return
        self.boost[blocks] = torch.clamp(self.boost[blocks], min=float(boost))
        if pin:
            self.pinned[blocks] = True

    def unpin(self) -> None:
        self.pinned.zero_()

    def for_blocks(self, block_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(boost [N] float, pinned [N] bool)`` of the given logical blocks."""
        block_index = block_index.cpu().long()
        if block_index.numel() == 0:
            return torch.zeros(0), torch.zeros(0, dtype=torch.bool)
        self._grow(int(block_index.max()) + 1)
        return self.boost[block_index], self.pinned[block_index]

    @property
    def any_pinned(self) -> bool:
        return bool(self.pinned.any())

    def truncate(self, first_block: int) -> None:
        """Forget blocks from ``first_block`` on (after a rollback)."""
        self.boost[first_block:] = 0
        self.pinned[first_block:] = False

    def _grow(self, length: int) -> None:
        self.boost, self.pinned = _grown(length, self.boost, self.pinned)


_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*")
_CAPITALISED = re.compile(r"\b[A-Z][A-Za-z0-9'&-]*[A-Za-z0-9]")
_WORD = re.compile(r"\b[a-z][a-z0-9'&-]*")
# "[00:12] Speaker name: " at the start of a transcript line (the time stamp is optional)
_LABEL = re.compile(r"(?m)^(?:\[[^\]\n]{0,24}\]\s*)?[^:\n\[]{1,48}:\s")
_FILLERS = frozenset({"I", "I'm", "I'll", "I've", "I'd", "OK", "Okay", "Yeah", "Yes", "No", "Uh", "Um", "Mm", "Hmm", "Oh"})


class EntityFinder:
    """Character spans of likely entities in transcript text: numbers and codes, and capitalised words
    that are not sentence-initial and never seen in lower case (names, products, acronyms).

    Why: what people ask a meeting assistant back is mostly such facts (a budget, a code, who), and
    nothing else in the importance score singles out their blocks before the question is asked. The
    lower-case vocabulary grows with the meeting (:meth:`learn`), so "Smart" stops counting once
    someone says "smart"; a heuristic, not a tagger, kept cheap enough for every transcript line.
    """

    def __init__(self) -> None:
        self.lowercase: set[str] = set()

    def learn(self, text: str) -> None:
        """Remember the words ``text`` uses in lower case."""
        self.lowercase.update(_WORD.findall(text))

    def find(self, text: str) -> list[tuple[int, int]]:
        """Entity spans ``(start, end)`` of ``text`` (learning its lower-case words first); speaker
        labels at the start of a line are not entities (every turn has one)."""
        self.learn(text)
        labels = [m.span() for m in _LABEL.finditer(text)]
        spans = []
        label = 0
        for m in sorted([*_NUMBER.finditer(text), *_CAPITALISED.finditer(text)], key=lambda m: m.start()):
            while label < len(labels) and labels[label][1] <= m.start():
                label += 1
            if label < len(labels) and labels[label][0] <= m.start():
                continue  # inside a speaker label
            word = m.group()
            if word[0].isupper() and (word in _FILLERS or word.lower() in self.lowercase
                                      or _sentence_initial(text, m.start())):
                continue
            spans.append(m.span())
        return spans


def _sentence_initial(text: str, at: int) -> bool:
    """Whether ``text[at]`` starts a sentence, a line or a labelled turn."""
    i = at - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    return i < 0 or text[i] in ".!?:;\n\"'("


def tokens_in_spans(offsets: Sequence[tuple[int, int]], spans: Iterable[tuple[int, int]]) -> list[int]:
    """Indices of the tokens whose character ``offsets`` overlap any of ``spans``."""
    ordered = sorted(spans)
    out: list[int] = []
    j = 0
    for i, (a, b) in enumerate(offsets):
        if b <= a:
            continue
        while j < len(ordered) and ordered[j][1] <= a:
            j += 1
        if j < len(ordered) and ordered[j][0] < b:
            out.append(i)
    return out
