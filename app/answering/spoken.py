"""A spoken line as an answer: without its hesitations, stutters and cut-off words, and words the recogniser may
have heard as others ("webinar" as "where we are"), for the answer finder (app/answering/answers.py)."""

from __future__ import annotations

import re

# Hesitations and stutters of speech, which a quoted line need not keep ("So uh, I I said, that ...").
_FILLER = re.compile(r"(?:^|(?<=\s))(?:[Uu]h|[Uu]m|[Uu]hm|[Ee]hm|[Ee]h|[Ee]rm|[Hh]mm|[Mm]m-hmm|[Mm]hm)(?:[,.]|(?=\s)|$)\s*")
# Words said twice only as a stutter ("I I said", "the the plan"); "that that" and "had had" can be meant.
_STUTTER = re.compile(r"\b(I|we|you|they|he|she|it|the|a|an|to|of|in|and|so|is|this|my|our)(?:\s+\1\b)+",
                      re.IGNORECASE)
# A word broken off and said again: "alr- already" (not "short- and long-term", "10- 20").
_RESTART = re.compile(r"\b([A-Za-z]+)-\s+(?=\1)", re.IGNORECASE)


def tidy(text: str) -> str:
    """A spoken line as an answer: without hesitations, stutters and cut-off words ("alr-")."""
    text = _FILLER.sub("", text)
    text = _RESTART.sub("", text)
    text = _STUTTER.sub(r"\1", text)
    text = re.sub(r"\s+([,.?!])", r"\1", re.sub(r"\s{2,}", " ", text)).strip(" ,")
    return text[:1].upper() + text[1:] if text else text


def uncapitalise(text: str) -> str:
    """A clause put inside a sentence: "Send the link" -> "send the link" (not "NASA", "I")."""
    return text if text[:2].isupper() or text[:2] in ("I", "I ") else text[:1].lower() + text[1:]


def capitalise(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] if text else text


def heard_alike(stem: str, said: list[str], threshold: float) -> bool:
    """Is ``stem`` close in spelling to a word said, or to two said words run together ("webinar" ~ "where we
    are")? Short stems never match: "bus" and "mass" are different things; nor do figures ("12000" and "15000"
    are spelled alike and say different things)."""
    if not threshold or len(stem) < 4 or any(c.isdigit() for c in stem):
        return False
    from rapidfuzz import fuzz

    candidates = said + [a + b for a, b in zip(said, said[1:])]
    return any(len(w) >= 4 and fuzz.ratio(stem, w) >= threshold for w in candidates)


def no_repeats(text: str) -> str:
    """Drop a sentence that repeats an earlier one (small models loop)."""
    kept: list[str] = []
    for piece in re.split(r"(?<=[.?!])\s+", text.strip()):
        if piece and piece.lower() not in {k.lower() for k in kept}:
            kept.append(piece)
    return " ".join(kept)
