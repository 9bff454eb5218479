"""Scoring answers to the questions of a synthetic meeting suite (facts.json, minutia.facts/2).

An answer is correct when, after minutia's transcript normalisation (app/text/textnorm.py) (digits and number words map
to the same form: "$12,000" and "twelve thousand dollars" both contain "12000"), it contains one
of the question's keyword forms as whole words (a flat list), or one form of every group (a list
of lists, used by what_decided). yes_no answers are judged by their polarity. absent questions
(the meeting does not say) want an answer that says so and makes nothing up: no number, date,
amount, or (for "who" questions) name.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .vocabulary import topics as _vocabulary

ROOT = Path(__file__).resolve().parents[2]
# Question types whose right answer is that the meeting does not say (nothing to cite).
ABSENT_TYPES = ("absent", "figure_not_said")


@lru_cache(maxsize=1)
def _textnorm():
    """app/text/textnorm.py (where minutia's answers normalise too), else the copy in samples/."""
    try:
        from app.text import textnorm
        return textnorm
    except ImportError:
        spec = importlib.util.spec_from_file_location("minutia_textnorm", ROOT / "samples" / "textnorm.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def normalize(text: str) -> str:
    """textnorm's form, with decimals kept apart from sentence ends: "4.2%" -> "4 point 2 percent"."""
    text = re.sub(r"(\d)\.(\d)", r"\1 point \2", text)
    return _textnorm().normalize(text)


def has_form(norm_answer: str, form: str) -> bool:
    """Whole-word match of a normalised keyword form (a trailing plural or possessive s allowed)."""
    f = normalize(form)
    return bool(f) and re.search(rf"(?<!\S){re.escape(f)}s?(?!\S)", norm_answer) is not None


def keywords_match(answer: str, keywords: list) -> bool:
    norm = normalize(answer)
    if keywords and all(isinstance(k, list) for k in keywords):
        return all(any(has_form(norm, f) for f in group) for group in keywords)
    return any(has_form(norm, f) for f in keywords)


_UNKNOWN = [re.compile(p) for p in (
    r"\bnot (be )?(mentioned|said|stated|specified|discussed|given|covered|provided|clear|known|specify|say|"
    r"state|mention|discuss|included?|addressed|available|decided|in the (meeting|transcript|discussion|notes))\b",
    r"\b(does|did|do|was|were|is|are|has|have|had)(n'?t| not) (say|said|mention(ed)?|specif(y|ied)|state[d]?|"
    r"discuss(ed)?|cover(ed)?|include[d]?|come up|address(ed)?|give|given|provide[d]?|talk about)\b",
    r"\bno (information|mention|details?|data|answer|record|indication|figure|date|name)\b",
    r"\bnever (mentioned|said|discussed|stated|specified|came up|brought up|given)\b",
    r"\b(unknown|unclear|unspecified|unmentioned|not known)\b",
    r"\bnothing (was |is )?(said|mentioned|stated)\b",
    r"\b(no one|nobody|none of them) (mentioned|said|discussed|gave|was named)\b",
    r"\b(cannot|can'?t|could not|couldn'?t) (tell|say|determine|find|answer)\b",
    r"\b(i|we) (do not|don'?t) know\b",
)]
_NUMBER_WORDS = set("two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                    "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety "
                    "hundred thousand million billion percent dollars dollar euros cents".split())
_DATE_WORDS = set("january february march april june july august september october november december monday "
                  "tuesday wednesday thursday friday saturday sunday tomorrow".split())
_NEGATIVE = re.compile(r"\b(no|not|never|cannot|can'?t|didn'?t|won'?t|don'?t|doesn'?t|isn'?t|aren'?t|wasn'?t|"
                       r"weren'?t|shouldn'?t|rejected|declined|against|nope)\b")
_POSITIVE = re.compile(r"\b(yes|yeah|yep|agreed|approved|accepted|will|decided to|going to|they did)\b")


def _plain(text: str) -> str:
    return text.lower().replace("\u2019", "'")


def says_not_mentioned(answer: str) -> bool:
    text = _plain(answer)
    return any(p.search(text) for p in _UNKNOWN)


def makes_something_up(answer: str, asks: str | None = None) -> bool:
    """A number, amount or date in the answer (or a name, when the question asks for a person)."""
    text = _plain(answer)
    tokens = set(re.findall(r"[a-z]+", text))
    if re.search(r"\d|\$", text) or tokens & _NUMBER_WORDS or tokens & _DATE_WORDS:
        return True
    return asks == "person" and any(n.lower() in tokens for n in _vocabulary.NAMES)


def yes_no_correct(answer: str, expected: str) -> bool:
    if says_not_mentioned(answer):
        return False
    text = _plain(answer)
    negative = bool(_NEGATIVE.search(text))
    if expected == "no":
        return negative
    return not negative and bool(_POSITIVE.search(text))


def answer_correct(answer_text: str, question: dict) -> bool:
    """Whether an answer to one facts.json question is right (see the module docstring)."""
    qtype = question.get("type")
    if qtype in ABSENT_TYPES:
        return says_not_mentioned(answer_text) and not makes_something_up(answer_text, question.get("asks"))
    if qtype == "yes_no":
        expected = "yes" if any(str(k).lower() == "yes" for k in question["keywords"]) else "no"
        return yes_no_correct(answer_text, expected)
    return keywords_match(answer_text, question["keywords"])


def repeats_itself(text: str) -> bool:
    """A sentence said twice, or any run of 4 words said twice (the loop small LMs fall into)."""
    sentences = [" ".join(re.findall(r"[a-z0-9]+", s.lower())) for s in re.split(r"(?<=[.!?])\s+|\n+", text)]
    sentences = [s for s in sentences if len(s.split()) >= 2]
    if len(sentences) != len(set(sentences)):
        return True
    tokens = re.findall(r"[a-z0-9]+", text.lower())
    grams = [tuple(tokens[i:i + 4]) for i in range(len(tokens) - 3)]
    return len(grams) != len(set(grams))


@dataclass
class Meeting:
    """One generated meeting: its folder and what it says about itself."""
    path: Path
    facts: dict
    meta: dict

    @property
    def audio(self) -> Path:
        return self.path / "meeting.wav"

    @property
    def reference(self) -> Path:
        return self.path / "reference.json"

    @property
    def rttm(self) -> Path:
        return self.path / "reference.rttm"

    @property
    def questions(self) -> list[dict]:
        return self.facts["questions"]


def load_suite(folder: str | Path) -> list[Meeting]:
    """Every meeting under `folder` (folders holding a meta.json), in path order."""
    metas = sorted(Path(folder).rglob("meta.json"))
    return [Meeting(m.parent, json.loads((m.parent / "facts.json").read_text()), json.loads(m.read_text()))
            for m in metas]


def score_answers(meeting: Meeting, answers: list[str]) -> dict:
    """Per-type and overall accuracy of answers given in question order; repetition counted too."""
    by_type: dict[str, list[bool]] = {}
    for q, a in zip(meeting.questions, answers, strict=True):
        by_type.setdefault(q["type"], []).append(answer_correct(a, q))
    flat = [ok for oks in by_type.values() for ok in oks]
    return {"accuracy": sum(flat) / len(flat), "by_type": {t: sum(v) / len(v) for t, v in sorted(by_type.items())},
            "repeating": sum(repeats_itself(a) for a in answers)}
