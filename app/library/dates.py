"""When a question across meetings asks about: "last month", "two weeks ago", "in March", "on Monday", "since
October", "yesterday".

People ask the library by time as often as by topic ("what did we decide about the venue last month?"). A period
said in the question becomes the range of days whose meetings are asked, and leaves the question the reader gets
("what did we decide about the venue?"). The forms are English's closed set of calendar words; dateparser and its
kin resolve a phrase to one moment, not to the range of days it covers, so the ranges are reckoned here. A period
relative to an event ("before the launch") is not read (a plan: the library would first have to find when it was).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from app.text.textnorm import numbers_as_digits
from app.text.transcript import format_day
from encoders.errors import InputError

_MONTHS = ("january february march april may june july august september october november december").split()
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_UNIT = r"(?P<unit>day|week|month|year)s?"
_NUMBER = r"(?P<n>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_MONTH = rf"(?P<month>{'|'.join(_MONTHS)})(?:,?\s+(?P<year>\d{{4}}))?"
_WEEKDAY = rf"(?P<weekday>{'|'.join(_WEEKDAYS)})"

# Each form, its pattern (matched ignoring case) and how it is reckoned; the first that matches wins. "The last day
# of the conference" and "the last week of June" are parts of something else, not a period back from today.
_NOT_OF = r"(?!\s+of\b)"
_FORMS = [
    ("ago", rf"\b{_NUMBER}\s+{_UNIT}\s+ago\b"),
    ("within", rf"\b(?:in|over|during|within)\s+the\s+(?:last|past)\s+{_NUMBER}\s+{_UNIT}\b"),
    ("within", rf"\b(?:in|over|during)\s+the\s+(?:last|past)\s+{_UNIT}\b{_NOT_OF}"),
    ("last", rf"\b(?:last|the\s+previous|the\s+past|previous)\s+{_UNIT}(?:'s)?\b{_NOT_OF}"),
    ("this", rf"\b(?:this|the\s+current)\s+{_UNIT}(?:'s)?\b{_NOT_OF}"),
    ("weekday", rf"\b(?P<lead>on\s+|last\s+)?{_WEEKDAY}(?P<poss>'s)?\b"),  # said as a day, not "the Monday seminar"
    ("month", rf"\b(?:in|during|from|of|since|before|after|until|till)\s+{_MONTH}\b"),
    ("iso", r"\b(?:on\s+)?(?P<iso>\d{4}-\d{2}-\d{2})\b"),
    ("yesterday", r"\byesterday(?:'s)?\b"),
    ("today", r"\btoday(?:'s)?\b"),
]
# A word before the period that turns its days into a bound: "since last week" is from then on, "before March"
# up to it. "By Friday" is a deadline said in the meeting, not when the meeting was: no period. "From" stays a
# plain period ("what is open from last week's stand-up" is that week's), as does a possessive one.
_FROM, _UNTIL, _AFTER = ("since",), ("before", "until", "till"), ("after",)
_RELATION = re.compile(r"\b(since|before|until|till|after|by)\s+$", re.IGNORECASE)
_WORDS = {"a": 1, "an": 1}


@dataclass(frozen=True)
class Period:
    """Days a question asks about: [start, end) in epoch seconds (UTC); either end open (None)."""

    start: float | None
    end: float | None
    said: str  # the words that said it, as in the question

    def describe(self) -> str:
        if self.end is None:
            return f"from {format_day(self.start)} on"
        last = format_day(self.end - 1)
        if self.start is None:
            return f"until {last}"
        first = format_day(self.start)
        return f"on {last}" if first == last else f"from {first} to {last}"


def _epoch(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp()


def _month_start(day: date, back: int = 0) -> date:
    months = day.year * 12 + day.month - 1 - back
    return date(months // 12, months % 12 + 1, 1)


def _unit_range(today: date, unit: str, back: int) -> tuple[date, date]:
    """The calendar day, week (Monday on), month or year ``back`` units before the one ``today`` is in."""
    if unit == "day":
        start = today - timedelta(days=back)
        return start, start + timedelta(days=1)
    if unit == "week":
        start = today - timedelta(days=today.weekday() + 7 * back)
        return start, start + timedelta(days=7)
    if unit == "month":
        start = _month_start(today, back)
        return start, _month_start(start, -1)
    start = date(today.year - back, 1, 1)
    return start, date(start.year + 1, 1, 1)


def _number(said: str) -> int:
    said = _WORDS.get(said, said)
    return int(said if isinstance(said, int) or said.isdigit() else numbers_as_digits([said])[0])


def period_in(question: str, now: float | None = None) -> Period | None:
    """The period ``question`` asks about, reckoned from ``now`` (epoch seconds; the present by default), or None
    when it names none. A month without a year is its latest one not after today ("in March", asked in December,
    is this year's). "since"/"from" and "after" make it open at the end, "before"/"until" at the start."""
    today = datetime.fromtimestamp(now if now is not None else datetime.now(timezone.utc).timestamp(),
                                   timezone.utc).date()
    for form, pattern in _FORMS:
        for m in re.finditer(pattern, question, re.IGNORECASE):
            if form == "weekday" and not (m["lead"] or m["poss"]):
                continue
            words = re.match(r"\s*(\w+)", m.group(0))
            lead = words.group(1).lower() if words else ""
            before = _RELATION.search(question[:m.start()])
            relation = lead if lead in (*_FROM, *_UNTIL, *_AFTER) else (before.group(1).lower() if before else "")
            if m.group(0).endswith("'s"):
                relation, before = "", None  # "since last week's review": the review's week
            if relation == "by":
                continue  # a deadline
            at = before.start() if before and relation != lead else m.start()
            said = question[at:m.end()]
            try:
                start, end = (_epoch(d) for d in _days(form, m, today))
            except (ValueError, OverflowError):
                raise InputError(f"no such period: {m.group(0).strip()!r}") from None
            if relation in _FROM:
                return Period(start, None, said)
            if relation in _UNTIL:
                return Period(None, start, said)
            if relation in _AFTER:
                return Period(end, None, said)
            return Period(start, end, said)
    return None


def _days(form: str, m: re.Match, today: date) -> tuple[date, date]:
    """The days [start, end) a matched form covers."""
    if form == "ago":
        return _unit_range(today, m["unit"].lower(), _number(m["n"].lower()))
    if form == "within":
        n = _number(m["n"].lower()) if m.groupdict().get("n") else 1
        return today - _span(m["unit"].lower(), n), today + timedelta(days=1)
    if form == "last":
        return _unit_range(today, m["unit"].lower(), 1)
    if form == "this":
        return _unit_range(today, m["unit"].lower(), 0)
    if form == "weekday":
        back = (today.weekday() - _WEEKDAYS.index(m["weekday"].lower())) % 7 or (7 if m["lead"] and
                                                                                  m["lead"].lower().startswith("last") else 0)
        return _unit_range(today, "day", back)
    if form == "month":
        month = _MONTHS.index(m["month"].lower()) + 1
        year = int(m["year"]) if m["year"] else today.year - (month > today.month)
        start = date(year, month, 1)
        return start, _month_start(start, -1)
    if form == "iso":
        try:
            day = date.fromisoformat(m["iso"])
        except ValueError:
            raise InputError(f"not a date: {m['iso']!r}") from None
        return day, day + timedelta(days=1)
    return _unit_range(today, "day", 1 if form == "yesterday" else 0)


def _span(unit: str, n: int) -> timedelta:
    return timedelta(days={"day": 1, "week": 7, "month": 30, "year": 365}[unit] * n)


def without_period(question: str, period: Period) -> str:
    """The question as a meeting's reader gets it: the period's words taken out ("What did we decide about the
    venue last month?" -> "What did we decide about the venue?"); a possessive period keeps its noun ("What is
    open from last week's stand-up?" -> "What is open from the stand-up?")."""
    at = question.find(period.said)
    if at < 0:
        return question
    before, after = question[:at], question[at + len(period.said):]
    if period.said.endswith("'s"):
        return re.sub(r"\s{2,}", " ", f"{before}the{after}").strip()
    before = re.sub(r"\b(?:from|in|of|during|on|over|since)\s*$", "", before.rstrip(), flags=re.IGNORECASE)
    text = re.sub(r"\s{2,}", " ", f"{before.rstrip()} {after.lstrip()}").strip().lstrip(",;: ")
    text = re.sub(r"\s+([?.!,])", r"\1", text)
    return text[:1].upper() + text[1:]
