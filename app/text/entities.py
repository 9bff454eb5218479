"""Amounts, percentages, dates, times and counts in transcript text, as spans with a kind.

One table of patterns for the whole app: action items take their due dates from here, key facts
their amounts, and answers the entity a question asks for. Speech is transcribed with digits
("$12,000", "March 10th") or in words ("twelve thousand dollars", "March tenth"); both are found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
# A month's name, or its written short form before a day ("Feb 21", "Sept. 3rd").
MONTH = r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
_MONTH_OR_SHORT = rf"(?:{MONTH}|(?:jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec)\.?)"
_ORDINAL_WORD = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth"
                 r"|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|thirtieth)")
DAY = rf"(?:\d{{1,2}}(?:st|nd|rd|th)?|(?:(?:twenty|thirty)[\s-])?{_ORDINAL_WORD})"
_HESITATION = r"(?:(?:uh|um|uhm|ehm|erm),?\s)?"  # said inside a date: "the 1st of uh, June"
# A month after a bare day ("the 17th February"): "may" and "march" only as names ("the first may be", "5 march").
_DAY_MONTH = (r"(?:january|february|april|june|july|august|september|october|november|december|(?-i:May|March))")
DATE = (
    rf"(?:(?:next |this |last )?{WEEKDAY}(?:,? (?:the )?{_MONTH_OR_SHORT} {DAY}|,? (?:the )?{DAY} of {MONTH})?"
    rf"|(?:{_MONTH_OR_SHORT} {_HESITATION}{DAY}(?!\d)|(?:the )?{DAY} of {_HESITATION}{MONTH}|(?:the )?{DAY} {_DAY_MONTH}"
    rf"|(?:in|by|until|till|before|since) (?:early |late |mid-?)?{MONTH}(?! {DAY}\b))(?:,? \d{{4}}\b)?"
    r"|tomorrow|tonight|today|yesterday"
    r"|(?:the )?(?:end|start|beginning|middle) of (?:the |this |next )?(?:day|week|month|quarter|year|"
    r"january|february|march|april|may|june|july|august|september|october|november|december)"
    r"|next (?:week|month|quarter|year)|\d{4}-\d{2}-\d{2})"
)
NUMBER_WORD = (
    r"(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen"
    r"|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million"
    r"|billion|half|a hundred|a thousand|a million)\b"  # \b: "sixty" is not "six" + "ty"
)
# A number in digits ("12,000", "4.2") or words ("twelve thousand", "four point two").
NUMBER = rf"(?:\d[\d,]*(?:\.\d+)?|\b{NUMBER_WORD}(?:[\s-]+(?:and\s+|point\s+)?{NUMBER_WORD})*(?:\s+point\s+{NUMBER_WORD})?)"
_SCALE = r"(?:\s?(?:k|thousand|million|billion|m|bn)\b)?"
_CURRENCY = r"(?:dollars?|euros?|pounds?|bucks|usd|eur|gbp|rupees|yen|francs)"
TIME_OF_DAY = (
    rf"(?:(?:at |around |by )?(?:\d{{1,2}}(?::\d{{2}})?|{NUMBER_WORD}(?:[\s-]{NUMBER_WORD})?)\s?"
    r"(?:a\.?\s?m\.?|p\.?\s?m\.?|o'clock|in the morning|in the afternoon|in the evening|at night)|noon|midday|midnight)"
)

KINDS: dict[str, re.Pattern[str]] = {
    "money": re.compile(
        rf"(?:[$€£]\s?\d[\d,]*(?:\.\d+)?{_SCALE}|{NUMBER}{_SCALE}\s+{_CURRENCY}\b)", re.IGNORECASE
    ),
    "percent": re.compile(rf"{NUMBER}\s?(?:%|percent\b|per cent\b|percentage points?\b)", re.IGNORECASE),
    "date": re.compile(rf"\b{DATE}\b", re.IGNORECASE),
    "time": re.compile(rf"\b{TIME_OF_DAY}", re.IGNORECASE),
    "duration": re.compile(rf"{NUMBER}\s+(?:(?:more|extra|additional|further)\s+)?(?:weeks?|days?|months?|hours?|minutes?|years?|quarters?|sprints?)\b", re.IGNORECASE),
    "count": re.compile(rf"{NUMBER}(?:\s+[a-z]+){{0,2}}", re.IGNORECASE),
}


@dataclass(frozen=True)
class Entity:
    kind: str
    text: str
    start: int  # character offsets in the text it was found in
    end: int


def find_entities(text: str, kinds: tuple[str, ...] = ("money", "percent", "date", "time", "duration", "count")) -> list[Entity]:
    """Non-overlapping spans of the given kinds, the earlier kind in ``kinds`` winning an overlap."""
    taken: list[tuple[int, int]] = []
    found: list[Entity] = []
    for kind in kinds:
        for m in KINDS[kind].finditer(text):
            span = m.group(0).strip(" ,.")
            if not span or (kind == "count" and not re.search(r"\d|" + NUMBER_WORD, span, re.IGNORECASE)):
                continue
            start = m.start() + m.group(0).index(span)
            end = start + len(span)
            if any(start < e and s < end for s, e in taken):
                continue
            if kind == "count":  # a bare number: keep its unit word only when it is not a stopword
                span = re.sub(r"\s+(?:and|or|but|so|to|of|the|a|in|on|for|by|at|with|is|are|was|were|last|next|this|that|"
                              r"these|those|per|each|every|ago|now|then|today|yesterday|tomorrow)\b.*$", "", span,
                              flags=re.IGNORECASE)
                end = start + len(span)
            taken.append((start, end))
            found.append(Entity(kind, span, start, end))
    return sorted(found, key=lambda e: e.start)


def merge_date_time(text: str, entities: list[Entity]) -> list[Entity]:
    """A date followed closely by a time ("next Tuesday at ten in the morning") is one 'when'."""
    out: list[Entity] = []
    for ent in entities:
        if out and {out[-1].kind, ent.kind} <= {"date", "time"} and out[-1].kind != ent.kind \
                and len(text[out[-1].end:ent.start].split()) <= 2:
            prev = out.pop()
            ent = Entity("date", text[prev.start:ent.end], prev.start, ent.end)
        out.append(ent)
    return out
