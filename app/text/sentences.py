"""A transcript as sentences: the unit that rules, retrieval, answers and summaries read.

A sentence cut at a turn edge is joined again, so readers see whole sentences, not fragments: ASR turns
break at pauses and live lines at a word limit. A turn that ends without . ? ! goes on into the next turn
when that turn is the same speaker's. (Across speakers it does not: a lower-case start after a speaker
change is as often the next speaker's "and I will ...". Nor across slides: each is a screen of its own, whose last
bullet rarely ends with a full stop.) Each sentence carries the one before it as
context: "It starts on Monday" is about the pilot named just before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from app.text.transcript import SLIDE_SPEAKER, Transcript

_SPLIT = re.compile(r"(?<=[.?!])\s+")
_ENDS = (".", "?", "!")


@dataclass(frozen=True)
class Sentence:
    text: str
    speaker: str
    turn_index: int  # the turn it starts in
    start: float | None
    end: float | None = None
    context: str = ""  # the sentence before it (often what "it" or a reply refers to)


def split_text(text: str) -> list[str]:
    return [s.strip() for s in _SPLIT.split(text) if s.strip()]


def split_sentences(transcript: Transcript) -> list[Sentence]:
    """Every turn cut into sentences, each with its speaker, its span (from word times when the turn has
    them, else the turn's), and the sentence before it."""
    out: list[Sentence] = []
    previous_speaker: str | None = None
    for index, turn in enumerate(transcript.turns):
        words, cursor = turn.words, 0
        for k, piece in enumerate(split_text(turn.text)):
            n = len(piece.split())
            start, end = turn.start, turn.end
            if words and cursor < len(words):
                start, end = words[cursor].start, words[min(cursor + n, len(words)) - 1].end
            cursor += n
            last = out[-1] if out else None
            if (k == 0 and last is not None and not last.text.endswith(_ENDS) and turn.speaker == previous_speaker
                    and turn.speaker != SLIDE_SPEAKER):
                out[-1] = replace(last, text=f"{last.text} {piece}", end=end)
            else:
                out.append(Sentence(piece, turn.speaker, index, start, end, last.text if last else ""))
        if turn.text.strip():
            previous_speaker = turn.speaker
    return out
