"""Which figure or date answers a question: the kinds of entity each question type wants, and of those a line
gives, the one nearest what the question is about, current rather than past, money for a price (for the answer
finder, app/answering/answers.py)."""

from __future__ import annotations

import re
from typing import Callable, Sequence

from app.answering.questions import Question, QuestionType
from app.text.entities import Entity, find_entities
from app.text.textnorm import NUMBER_WORDS, normalize

# What a question of each type wants, in order of preference.
WANTED: dict[QuestionType, tuple[str, ...]] = {
    QuestionType.HOW_MUCH: ("money", "count", "percent"),
    QuestionType.WHEN: ("date", "time"),
    QuestionType.METRIC: ("percent", "count", "money", "duration"),
    QuestionType.HOW_MANY: ("count", "duration", "money", "percent"),
}
_TIME_UNITS = re.compile(r"^(?:weeks?|days?|months?|hours?|minutes?|years?|quarters?|sprints?)$", re.IGNORECASE)


def wanted_kinds(q: Question) -> tuple[str, ...]:
    """The entity kinds that answer ``q``: "how many pages" is not a duration. (A cost question keeps counts:
    the recogniser may drop the currency of "forty thousand euros".)"""
    wanted = WANTED[q.type]
    if q.type is QuestionType.HOW_MANY:
        noun = re.search(r"\bhow many\s+(?:(?:more|extra|additional|further)\s+)?(\w+)", q.text, re.IGNORECASE)
        if noun and not _TIME_UNITS.match(noun.group(1)):
            return tuple(k for k in wanted if k != "duration")
    return wanted


def pick(text: str, entities: list[Entity], focus: Sequence[str], words: Sequence[str], asks_past: bool) -> Entity:
    """The entity nearest (in characters) a focus word of the question within one clause, else any of its
    ``words`` when the text says no focus word: a slide's lines joined by ";" ("Total budget: $50,000; Pilot
    cost: $12,000") give "the budget for the pilot" the pilot's cost, not the figure after the frame word
    "budget". Of two figures in one clause ("89 percent, a change from 43 percent before"), the one not
    marked as past unless the question asks for the past."""
    lowered = text.lower()

    def spots_of(said: Sequence[str]) -> list[int]:
        return [m.start() for word in said for m in re.finditer(rf"\b{re.escape(word.lower()[:5])}", lowered)]

    spots = spots_of(focus) or spots_of(words)
    past = {id(e) for e in entities if PAST.search(text[e.end:e.end + 12]) or PAST.search(text[max(0, e.start - 25):e.start])}
    pool = [e for e in entities if (id(e) in past) == asks_past] or entities
    if not spots:
        return pool[0]

    def distance(e: Entity, spot: int) -> tuple[int, int]:
        between = text[spot:e.start] if spot < e.start else text[e.end:spot]
        return len(_CLAUSE_BREAK.findall(between)), e.start - spot if spot < e.start else spot - e.end + 1

    return min(pool, key=lambda e: min(distance(e, s) for s in spots))


def price_check(q: Question) -> Callable[[Entity], bool]:
    """Which entities can answer ``q``: for a question about what something costs, money, a bare number, or a
    percentage when it asks for a share; for any other question, all of them."""
    if q.type is not QuestionType.HOW_MUCH or not ASKS_COST.search(q.text):
        return lambda e: True
    share = bool(_ASKS_SHARE.search(q.text))

    def ok(e: Entity) -> bool:
        if e.kind == "percent":
            return share
        if e.kind == "count":
            return all(w in _NUMBER_WORDS for w in re.findall(r"[a-z]+", e.text.lower()))
        return True

    return ok


_CLAUSE_BREAK = re.compile(r"[;\n•]|[.!?](?:\s|$)")


ONLY_A_FIGURE = (QuestionType.HOW_MUCH, QuestionType.HOW_MANY)
# Asks for a figure, not about a topic ("the budget for the rehearsal", not "the news about the budget").
ASKS_A_FIGURE = re.compile(r"\bhow (?:much|many)\b|\b(?:cost|price|budget|fee)s? (?:of|for|to)\b|\bspend(?:ing)? on\b|"
                            r"\bset aside\b|\bpay(?:ing)? for\b", re.IGNORECASE)
# Asks what something costs: a count with a unit that is not money ("4.5 points", "465 boxes") or a
# percentage is no price (a bare number is: the recogniser may drop the currency of "forty thousand euros").
ASKS_COST = re.compile(r"\b(?:cost|costs|price|prices|budget|budgeted|spend|spending|spent|pay|paid|fee|fees|money|"
                        r"dollars|euros|expensive)\b", re.IGNORECASE)
_ASKS_SHARE = re.compile(r"\b(?:percent|percentage|share|portion|fraction|proportion|how much of)\b|%", re.IGNORECASE)
_NUMBER_WORDS = NUMBER_WORDS | frozenset("billion point and a k m bn grand".split())
PAST = re.compile(r"\b(?:used to|originally|previously|before|last (?:month|week|year|quarter|time)|earlier|"
                   r"was at|were at|had been|we had|it was|initially|at first|old)\b", re.IGNORECASE)
ASKS_LATEST = re.compile(r"\b(?:now|new|current|currently|latest|moved|changed|anymore|this time)\b", re.IGNORECASE)

def contradicts(question: str, evidence: str) -> bool:
    """The question names an amount/date/number the evidence gives differently."""
    asked = {(e.kind, normalize(e.text)) for e in find_entities(question)}
    said = {(e.kind, normalize(e.text)) for e in find_entities(evidence)}
    return any(kind in {k for k, _ in said} and (kind, value) not in said for kind, value in asked)
