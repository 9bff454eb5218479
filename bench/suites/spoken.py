"""Numbers, dates and verb forms as espeak-ng should say them, plus the written forms a correct
answer may use. espeak reads digits oddly, so every spoken number is written out in words; the
digit forms only live in facts.json keywords."""

from __future__ import annotations

import calendar
import datetime as dt

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORD = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
        "nine": "ninth", "twelve": "twelfth"}
MONTHS = list(calendar.month_name)[1:]
WEEKDAYS = list(calendar.day_name)


def words(n: int) -> str:
    """Cardinal in words, American style (no "and"): 12500 -> "twelve thousand five hundred"."""
    if n < 0 or n >= 10**9:
        raise ValueError(n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        t, u = divmod(n, 10)
        return _TENS[t] + ("" if u == 0 else " " + _ONES[u])
    if n < 1000:
        h, r = divmod(n, 100)
        return _ONES[h] + " hundred" + ("" if r == 0 else " " + words(r))
    for scale, name in ((10**6, "million"), (1000, "thousand")):
        if n >= scale:
            q, r = divmod(n, scale)
            return words(q) + " " + name + ("" if r == 0 else " " + words(r))
    raise AssertionError(n)


def ordinal_words(n: int) -> str:
    """1 -> "first", 21 -> "twenty first", 30 -> "thirtieth"."""
    parts = words(n).split()
    last = parts[-1]
    if last in _ORD:
        parts[-1] = _ORD[last]
    elif last.endswith("y"):
        parts[-1] = last[:-1] + "ieth"
    else:
        parts[-1] = last + "th"
    return " ".join(parts)


def ordinal_suffix(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def number_words(value: float, decimals: int = 0) -> str:
    """4.2 -> "four point two"; decimals are read digit by digit, as people (and espeak) say them."""
    if decimals == 0:
        return words(int(round(value)))
    whole, frac = f"{value:.{decimals}f}".split(".")
    return words(int(whole)) + " point " + " ".join(_ONES[int(d)] for d in frac)


def number_digits(value: float, decimals: int = 0) -> str:
    return f"{value:,.{decimals}f}"


def number_keywords(value: float, decimals: int = 0, unit: str = "") -> list[str]:
    """Written forms of a number (+ unit): "12,000", "12000", "twelve thousand" (unit appended)."""
    digits = number_digits(value, decimals)
    forms = list(dict.fromkeys([digits, digits.replace(",", ""), number_words(value, decimals)]))
    if unit == "percent":
        return [f"{digits}%", *(f"{f} percent" for f in forms)]
    if unit:
        return [f"{f} {unit}" for f in forms]
    return forms


def money_spoken(amount: int) -> str:
    return f"{words(amount)} dollars"


def money_keywords(amount: int) -> list[str]:
    return [f"${amount:,}", f"{amount:,}", str(amount), words(amount)]


def weekday(day: dt.date) -> str:
    return WEEKDAYS[day.weekday()]


def date_spoken(day: dt.date, british: bool = False) -> str:
    """"Monday, March tenth" or "Monday the tenth of March"; the weekday is the calendar's."""
    month, nth = MONTHS[day.month - 1], ordinal_words(day.day)
    if british:
        return f"{weekday(day)} the {nth} of {month}"
    return f"{weekday(day)}, {month} {nth}"


def date_keywords(day: dt.date) -> list[str]:
    """Month + day in the forms an answer may take: "March 10", "March 10th", "March tenth",
    "10 March", "10th of March", "tenth of March"."""
    month, n = MONTHS[day.month - 1], day.day
    return [f"{month} {n}", f"{month} {ordinal_suffix(n)}", f"{month} {ordinal_words(n)}",
            f"{n} {month}", f"{ordinal_suffix(n)} of {month}", f"{ordinal_words(n)} of {month}"]


def date_written(day: dt.date) -> str:
    return f"{weekday(day)}, {MONTHS[day.month - 1]} {ordinal_suffix(day.day)}"


_DOUBLE = {"run", "set", "plan", "get", "put", "stop", "ship", "map", "chat", "shop"}
_KEEP_E = {"see", "free", "agree"}


def gerund(phrase: str) -> str:
    """"update the budget" -> "updating the budget" (the first word is the verb)."""
    verb, _, rest = phrase.partition(" ")
    if verb in _DOUBLE:
        ing = verb + verb[-1] + "ing"
    elif verb.endswith("ie"):
        ing = verb[:-2] + "ying"
    elif verb.endswith("e") and verb not in _KEEP_E:
        ing = verb[:-1] + "ing"
    else:
        ing = verb + "ing"
    return f"{ing} {rest}".strip()


def capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


def agreement(noun_phrase: str) -> dict[str, str]:
    """Verb forms that agree with a noun phrase ("the new laptops are", "the catering is")."""
    last = noun_phrase.split()[-1]
    plural = last.endswith("s") and not last.endswith(("ss", "us"))
    return {"is": "are" if plural else "is", "costs": "cost" if plural else "costs",
            "comes": "come" if plural else "comes"}
