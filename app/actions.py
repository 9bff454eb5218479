"""Action items and decisions, read from commitments in the transcript.

A commitment is a sentence where someone says they (or a named person) will do something:
"I will send the contract by Thursday", "Carol, can you update the budget?", "Bob will call them".
The owner is resolved through the speaker ("I" -> who spoke); the due date is the time phrase after
"by/before/on/until". Every item points at the turn it came from, so it can be checked. This is
grounded by construction, which a small LLM's free-form list is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.transcript import Transcript, Turn

_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_MONTH = r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
_DAY = r"(?:\d{1,2}(?:st|nd|rd|th)?|[a-z]+(?:st|nd|rd|th))"
_DATE = (
    rf"(?:(?:next |this )?{_WEEKDAY}(?:,? {_MONTH} {_DAY})?|{_MONTH} {_DAY}|tomorrow|tonight|today"
    r"|(?:the )?end of (?:the |this |next )?(?:day|week|month|quarter|year)|next (?:week|month|quarter)"
    r"|\d{4}-\d{2}-\d{2})"
)
_DUE = re.compile(rf"\b(?:by|before|on|until|no later than)\s+(?P<due>{_DATE})\b", re.IGNORECASE)
_SELF = re.compile(r"\b(?P<who>I|we)(?:'ll| will| shall| am going to| are going to)\s+(?P<task>[^.?!;]+)", re.IGNORECASE)
_NAMED = re.compile(r"\b(?P<who>[A-Z][a-z]+)(?:'ll| will| is going to)\s+(?P<task>[^.?!;]+)")
_ASKED = re.compile(
    r"\b(?P<who>[A-Z][a-z]+),\s+(?:can|could|would|will) you(?: please)?\s+(?P<task>[^.?!;]+)", re.IGNORECASE
)
_DECISION = re.compile(r"\b(?:we|they|you|I)\s+(?:have\s+)?(?:decided|agreed)\b[^.?!]*[.?!]?", re.IGNORECASE)
_NOT_TASKS = re.compile(r"^(?:be|have|need|see|say|talk|do that|try)\b", re.IGNORECASE)
_TASK_END = re.compile(r",?\s+(?:but|and then|so that|so|because|if)\s+", re.IGNORECASE)
_NESTED = re.compile(r"\b(?:I|we|you)(?:'ll|'re| will)\b", re.IGNORECASE)
_PRONOUNS = {"I", "We", "You", "It", "They", "He", "She", "This", "That", "There", "Also", "And", "So", "But"}


@dataclass(frozen=True)
class ActionItem:
    owner: str
    task: str
    due: str | None
    turn_index: int
    start: float | None


@dataclass(frozen=True)
class Decision:
    text: str
    speaker: str
    turn_index: int
    start: float | None


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.?!])\s+", text) if s.strip()]


def _split_due(task: str) -> tuple[str, str | None]:
    match = _DUE.search(task)
    if not match:
        return task.strip(" ,"), None
    due = match["due"].strip()
    task = (task[: match.start()] + task[match.end():]).strip(" ,")
    return re.sub(r"\s+", " ", task), due[0].upper() + due[1:]


def _candidates(index: int, turn: Turn, speakers: set[str]) -> list[ActionItem]:
    found: list[ActionItem] = []
    for sentence in _sentences(turn.text):
        if _DECISION.search(sentence):
            continue
        for pattern in (_ASKED, _SELF, _NAMED):
            for match in pattern.finditer(sentence):
                who = match["who"]
                if pattern is _SELF:
                    owner = turn.speaker if who.lower() == "i" else "the team"
                elif not who[0].isupper() or who in _PRONOUNS or (speakers and who not in speakers and pattern is _NAMED):
                    continue
                else:
                    owner = who
                task, due = _split_due(_TASK_END.split(match["task"])[0])
                if len(task.split()) < 2 or _NOT_TASKS.match(task) or _NESTED.search(task):
                    continue
                if owner == "the team" and due is None:  # "we'll see", "we will start with": plans, not tasks
                    continue
                found.append(ActionItem(owner, task, due, index, turn.start))
    return found


def _same_task(a: ActionItem, b: ActionItem) -> bool:
    wa, wb = set(a.task.lower().split()), set(b.task.lower().split())
    return a.owner == b.owner and len(wa & wb) >= max(1, min(len(wa), len(wb)) // 2)


def extract_action_items(transcript: Transcript) -> list[ActionItem]:
    """Commitments in order of appearance; a request and its confirmation become one item (the later,
    more specific one wins)."""
    speakers = set(transcript.speakers)
    items: list[ActionItem] = []
    for index, turn in enumerate(transcript.turns):
        for item in _candidates(index, turn, speakers):
            for j, kept in enumerate(items):
                if _same_task(kept, item):
                    items[j] = ActionItem(item.owner, item.task, item.due or kept.due, item.turn_index, item.start)
                    break
            else:
                items.append(item)
    return items


def extract_decisions(transcript: Transcript) -> list[Decision]:
    decisions = []
    for index, turn in enumerate(transcript.turns):
        for sentence in _sentences(turn.text):
            if _DECISION.search(sentence):
                decisions.append(Decision(sentence, turn.speaker, index, turn.start))
    return decisions


@dataclass(frozen=True)
class KeyFact:
    text: str
    speaker: str
    turn_index: int
    start: float | None


_NUMBER_WORD = (
    r"(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen"
    r"|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million"
    r"|billion)"
)
# Amounts in digits ("12,000") or, as people transcribe speech, in words ("twelve thousand").
_AMOUNT = rf"(?:\d[\d,.]*|\b{_NUMBER_WORD}(?:[\s-]+(?:and\s+)?{_NUMBER_WORD})*)"
_FACT = re.compile(
    rf"(\$\s?\d|{_AMOUNT}\s*(?:%|percent|dollars|euros|users|people|weeks|days|months|hours)|{_MONTH}\s+{_DAY}"
    rf"|\b{_WEEKDAY}\b)",
    re.IGNORECASE,
)


def _is_commitment(sentence: str) -> bool:
    """Someone commits to a date ("I will send it by Thursday"): an action item, not a key fact.
    A date on its own ("It starts on Monday") is a fact."""
    return bool(_DUE.search(sentence)) and any(p.search(sentence) for p in (_ASKED, _SELF, _NAMED))


def extract_key_facts(transcript: Transcript, limit: int = 8) -> list[KeyFact]:
    """Statements with amounts, counts and dates that are not already decisions or commitments."""
    facts = []
    for index, turn in enumerate(transcript.turns):
        for sentence in _sentences(turn.text):
            if sentence.endswith("?") or _DECISION.search(sentence) or _is_commitment(sentence):
                continue
            if _FACT.search(sentence):
                facts.append(KeyFact(sentence, turn.speaker, index, turn.start))
    return facts[:limit]
