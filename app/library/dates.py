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
from encoders.errors import InputError

_MONTHS = ("january february march april may june july august september october november december").split()
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_UNIT = r"(?P<unit>day|week|month|year)s?"
_NUMBER = r"(?P<n>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_MONTH = rf"(?P<month>{'|'.join(_MONTHS)})(?:\s+(?P<year>\d{{4}}))?"
_WEEKDAY = rf"(?P<weekday>{'|'.join(_WEEKDAYS)})"

# Each form, its pattern (matched on the lower-cased question) and how it is reckoned; the first that matches wins.
_FORMS = [
    ("ago", rf"\b{_NUMBER}\s+{_UNIT}\s+ago\b"),
    ("within", rf"\b(?:in|over|during|within)\s+the\s+(?:last|past)\s+{_NUMBER}\s+{_UNIT}\b"),
    ("within", rf"\b(?:in|over|during)\s+the\s+(?:last|past)\s+{_UNIT}\b"),
    ("last", rf"\b(?:last|the\s+previous|the\s+past|previous)\s+{_UNIT}(?:'s)?\b"),
    ("this", rf"\b(?:this|the\s+current)\s+{_UNIT}(?:'s)?\b"),
    ("weekday", rf"\b(?P<lead>on\s+|last\s+)?{_WEEKDAY}(?P<poss>'s)?\b"),  # said as a day, not "the Monday seminar"
    ("since", rf"\bsince\s+{_MONTH}\b"),
    ("month", rf"\b(?:in|during|from|of)\s+{_MONTH}\b"),
    ("iso", r"\b(?:on\s+|since\s+)?(?P<iso>\d{4}-\d{2}-\d{2})\b"),
    ("yesterday", r"\byesterday(?:'s)?\b"),
    ("today", r"\btoday(?:'s)?\b"),
]
_WORDS = {"a": 1, "an": 1}


@dataclass(frozen=True)
class Period:
    """Days a question asks about: [start, end) in epoch seconds (UTC); either end open (None)."""

    start: float | None
    end: float | None
    said: str  # the words that said it, as in the question

    def describe(self) -> str:
        day = lambda t: datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d")  # noqa: E731
        if self.end is None:
            return f"from {day(self.start)} on"
        last = day(self.end - 1)
        return f"on {last}" if self.start is not None and day(self.start) == last else \
            f"from {day(self.start)} to {last}" if self.start is not None else f"until {last}"


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
    is this year's)."""
    today = datetime.fromtimestamp(now if now is not None else datetime.now(timezone.utc).timestamp(),
                                   timezone.utc).date()
    text = question.lower()
    for form, pattern in _FORMS:
        m = next((m for m in re.finditer(pattern, text) if form != "weekday" or m["lead"] or m["poss"]), None)
        if m is None:
            continue
        said = question[m.start():m.end()]
        if form == "ago":
            start, end = _unit_range(today, m["unit"], _number(m["n"]))
        elif form == "within":
            n = _number(m["n"]) if "n" in m.groupdict() and m["n"] else 1
            start, end = today - _span(m["unit"], n), today + timedelta(days=1)
        elif form == "last":
            start, end = _unit_range(today, m["unit"], 1)
        elif form == "this":
            start, end = _unit_range(today, m["unit"], 0)
        elif form == "weekday":
            back = (today.weekday() - _WEEKDAYS.index(m["weekday"])) % 7 or (7 if "last" in m.group(0) else 0)
            start, end = _unit_range(today, "day", back)
        elif form in ("month", "since"):
            month = _MONTHS.index(m["month"]) + 1
            year = int(m["year"]) if m["year"] else today.year - (month > today.month)
            start = date(year, month, 1)
            end = None if form == "since" else _month_start(start, -1)
            return Period(_epoch(start), None if end is None else _epoch(end), said)
        elif form == "iso":
            try:
                day = date.fromisoformat(m["iso"])
            except ValueError:
                raise InputError(f"not a date: {m['iso']!r}") from None
            if m.group(0).startswith("since"):
                return Period(_epoch(day), None, said)
            start, end = day, day + timedelta(days=1)
        elif form == "yesterday":
            start, end = _unit_range(today, "day", 1)
        else:
            start, end = _unit_range(today, "day", 0)
        return Period(_epoch(start), _epoch(end), said)
    return None


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
