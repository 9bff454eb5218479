"""Questions that offer a choice ("Which colour is better, blue or green?", "Did they pick Postgres or MySQL?"):
the answer is one of the options, read from how the meeting put them, never "Yes." (issue 49: "Green." was answered
citing "blue is better than green").

The options come from the question's grammar (the two sides of its "or"). A line settles it when it ranks them
("A is better than B", "B is worse than A", "prefer A over B") or takes one ("let's go with A", "we chose A"), or
names one option only.
"""

from __future__ import annotations

import re

from app.answering.question_parse import parse

# Comparatives that put the second option first ("green is worse than blue" favours blue).
_LOWER = frozenset({"worse", "less", "fewer", "weaker", "slower", "harder", "riskier", "costlier", "pricier"})
_PREFER = re.compile(r"\b(?:prefer(?:s|red)?|rather|favou?r(?:s|ed)?)\s+(?P<a>.+?)\s+(?:over|to|than)\s+(?P<b>.+)",
                     re.IGNORECASE)
_TAKE = re.compile(r"\b(?:go(?:ing)? with|went with|pick(?:ed)?|cho(?:o)?se|chosen|decided on|settled on|opt(?:ed)? for|"
                   r"take|took|use|using)\s+(?P<x>.+)", re.IGNORECASE)


def alternatives(question: str) -> list[str] | None:
    """The two options of the question's "X or Y" ("vendor A", "vendor B"), or None when it offers none ("..., or
    not?" offers none)."""
    doc = parse(question)
    if doc is None or not len(doc):
        return None
    # A choice is offered by a yes/no question ("Did they pick A or B?"), by "which/what <thing>" ("Which colour is
    # better, blue or green?") or by options set off after a comma; not by "What should be frozen 1 or 2 weeks
    # before?", where the "or" is inside what is said.
    yes_no_form = doc[0].pos_ == "AUX" or doc[0].tag_ == "MD"
    which_thing = any(t.lower_ in ("which", "what") and t.dep_ == "det" for t in doc)
    for cc in (t for t in doc if t.lower_ == "or" and t.dep_ == "cc"):
        first = cc.head
        second = next((c for c in first.children if c.dep_ == "conj" and c.i > cc.i), None)
        if second is None or second.lower_ in ("not", "no"):
            continue
        set_off = first.i > 0 and doc[first.i - 1].text == ","
        if not (yes_no_form or which_thing or set_off) or (first.like_num and second.like_num):
            continue
        options = [_phrase(first), _phrase(second)]
        if all(options) and options[0].lower() != options[1].lower():
            return options
    return None


def _phrase(token) -> str:
    """The option's words: the token with its compounds and adjectives before it ("vendor B", "the blue one")."""
    left = [c for c in token.lefts if c.dep_ in ("compound", "amod", "nummod")]
    return " ".join(t.text for t in sorted(left + [token], key=lambda t: t.i)).strip(" ,?.")


def _mentions(text: str, option: str) -> list[int]:
    """Where ``option`` is said in ``text`` (whole words, any case)."""
    return [m.start() for m in re.finditer(rf"\b{re.escape(option)}\b", text, re.IGNORECASE)]


def choose(options: list[str], said: str) -> str | None:
    """The option ``said`` settles on, or None when it does not settle it."""
    at = {o: _mentions(said, o) for o in options}
    named = [o for o in options if at[o]]
    if not named:
        return None
    if len(named) == 1:
        return named[0]
    a, b = options
    # "A is better than B" / "B is worse than A"
    than = re.search(r"\b(\w+)\s+than\b", said, re.IGNORECASE)
    if than:
        before = [o for o in options if any(p < than.start() for p in at[o])]
        after = [o for o in options if any(p > than.end() for p in at[o])]
        if len(before) >= 1 and len(after) >= 1:
            first = max(before, key=lambda o: max(p for p in at[o] if p < than.start()))
            other = b if first == a else a
            return other if than.group(1).lower() in _LOWER else first
    for pattern, group in ((_PREFER, "a"), (_TAKE, "x")):
        found = pattern.search(said)
        if found:
            taken = found.group(group)
            hit = [o for o in options if _mentions(taken, o)]
            if hit:
                return min(hit, key=lambda o: _mentions(taken, o)[0])
    return None
