"""Two texts that say the same thing, one with a "not" and one without: the sign that a recogniser dropped a negation.

Whisper drops a short "not" now and then, and nothing in the words it keeps shows it (issue 49: "so we can test real
payments", said as "cannot"). What can show it is another text about the same thing: a slide on screen ("Contract not
signed yet") or the question itself ("Why can't they test real payments?"). Texts are compared clause by clause:
two clauses are about the same thing when they share most of their content words (stems), and they disagree when
one is negated and the other is not.
"""

from __future__ import annotations

import functools
import re

from app.answering.retrieval import stems

NEGATION = re.compile(r"\b(?:not|no|never|n't|cannot|won't|don't|didn't|isn't|aren't|wasn't|no longer|instead of)\b"
                      r"|n't\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[,;:.!?\n]+|\s(?:so|but|and|because|while|although|though|whereas)\s", re.IGNORECASE)
# Words any two remarks may share without being about the same thing (a general English list)
_LIGHT_WORDS = ("say said tell told time times thing things way think know want make made like need yet now today well "
                "really lot kind sort mean right good great little much many")
MIN_SHARED = 2  # content words two clauses share at least...
MIN_SHARE = 0.6  # ...and this part of the shorter clause's content words, to be about the same thing


@functools.lru_cache(maxsize=1)
def _light() -> frozenset[str]:
    return frozenset(stems(_LIGHT_WORDS))


def _content(clause: str) -> set[str]:
    return set(stems(clause)) - _light()


def clauses(text: str) -> list[str]:
    return [part.strip() for part in _CLAUSE_END.split(text) if part and part.strip()]


def negated(clause: str) -> bool:
    return bool(NEGATION.search(clause))


def disagreement(said: str, other: str) -> tuple[str, str] | None:
    """The first clause of ``said`` whose closest clause in ``other`` is about the same thing with the opposite
    polarity, and that clause; or None. ``other`` is a question, or a slide's bullets (its title names a topic and
    says nothing either way).

    Closest: the largest part of the shorter clause's words shared, then the most words, and agreement before
    disagreement on a tie. "The company did not sign the contract" shares its subject with "Keep the payment
    company" and its whole predicate with "Contract not signed yet": it is checked against the second, which agrees."""
    theirs = [(clause, _content(clause), negated(clause)) for clause in clauses(other)]
    for clause in clauses(said):
        mine, negation = _content(clause), negated(clause)
        about: list[tuple[float, int, bool, str]] = []  # (share, shared, agrees, their clause)
        for their_clause, their_stems, their_negation in theirs:
            shared = len(mine & their_stems)
            shorter = min(len(mine), len(their_stems))
            if shared >= MIN_SHARED and shared >= MIN_SHARE * shorter:
                about.append((shared / shorter, shared, negation == their_negation, their_clause))
        if about:
            *_, agrees, their_clause = max(about)
            if not agrees:
                return clause, their_clause
    return None
