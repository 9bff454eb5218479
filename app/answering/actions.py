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

from app.text.entities import DATE, DAY, MONTH, NUMBER_WORD, WEEKDAY
from app.text.sentences import Sentence, split_sentences
from app.text.transcript import Transcript

_DUE = re.compile(rf"\b(?:by|before|on|until|no later than)\s+(?P<due>{DATE})\b", re.IGNORECASE)
_SELF = re.compile(r"\b(?P<who>I|we)(?:'ll| will| shall| am going to| are going to)\s+(?P<task>[^.?!;]+)", re.IGNORECASE)
_NAMED = re.compile(r"\b(?P<who>[A-Z][a-z]+)(?:'ll| will| is going to)\s+(?P<task>[^.?!;]+)")
_ASKED = re.compile(
    r"\b(?P<who>[A-Z][a-z]+),\s+(?:can|could|would|will) you(?: please)?\s+(?P<task>[^.?!;]+)", re.IGNORECASE
)
# "We decided to...", "The decision is...", "Let's go with the city park.", "Fine, video calls it is."
_DECISION = re.compile(
    r"\b(?:we|they|you|I)\s+(?:have\s+)?(?:decided|agreed)\b[^.?!]*[.?!]?|\bthe (?:final )?decision is\b|\b(?:it's|it is|that's) settled\b"
    r"|\blet's (?:go with|choose|pick|take|move|switch to)\b|\bwe(?:'ll| will) go with\b|,\s+[^,.?!]+ it is[.!]",
    re.IGNORECASE,
)
_NOT_TASKS = re.compile(r"^(?:be|have|need|see|say|talk|do that|try)\b", re.IGNORECASE)
_TASK_END = re.compile(r",?\s+(?:but|and then|so that|so|because|if)\s+", re.IGNORECASE)
_NESTED = re.compile(r"\b(?:I|we|you)(?:'ll|'re| will)\b", re.IGNORECASE)
_PRONOUNS = {"I", "We", "You", "It", "They", "He", "She", "This", "That", "There", "Also", "And", "So", "But",
             "Sure", "Yes", "Yeah", "Okay", "Ok", "Right", "Fine", "Great", "Thanks", "Well", "Now", "Then"}


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


def _split_due(task: str) -> tuple[str, str | None]:
    match = _DUE.search(task)
    if not match:
        return task.strip(" ,"), None
    due = match["due"].strip()
    task = (task[: match.start()] + task[match.end():]).strip(" ,")
    return re.sub(r"\s+", " ", task), due[0].upper() + due[1:]


def _candidates(sentence: Sentence, speakers: set[str]) -> list[ActionItem]:
    found: list[ActionItem] = []
    if not _DECISION.search(sentence.text):
        for pattern in (_ASKED, _SELF, _NAMED):
            for match in pattern.finditer(sentence.text):
                who = match["who"]
                if pattern is _SELF:
                    owner = sentence.speaker if who.lower() == "i" else "the team"
                elif not who[0].isupper() or who in _PRONOUNS or (speakers and who not in speakers and pattern is _NAMED):
                    continue
                else:
                    owner = who
                task, due = _split_due(_TASK_END.split(match["task"])[0])
                if len(task.split()) < 2 or _NOT_TASKS.match(task) or _NESTED.search(task):
                    continue
                if owner == "the team" and due is None:  # "we'll see", "we will start with": plans, not tasks
                    continue
                found.append(ActionItem(owner, task, due, sentence.turn_index, sentence.start))
    return found


def _same_task(a: ActionItem, b: ActionItem) -> bool:
    wa, wb = set(a.task.lower().split()), set(b.task.lower().split())
    return a.owner == b.owner and len(wa & wb) >= max(1, min(len(wa), len(wb)) // 2)


def extract_action_items(transcript: Transcript) -> list[ActionItem]:
    """Commitments in order of appearance; a request and its confirmation become one item (the later,
    more specific one wins)."""
    speakers = set(transcript.speakers)
    items: list[ActionItem] = []
    for sentence in split_sentences(transcript):
        for item in _candidates(sentence, speakers):
            for j, kept in enumerate(items):
                if _same_task(kept, item):
                    items[j] = ActionItem(item.owner, item.task, item.due or kept.due, item.turn_index, item.start)
                    break
            else:
                items.append(item)
    return items


def extract_decisions(transcript: Transcript) -> list[Decision]:
    return [Decision(s.text, s.speaker, s.turn_index, s.start) for s in split_sentences(transcript) if _DECISION.search(s.text)]


@dataclass(frozen=True)
class KeyFact:
    text: str
    speaker: str
    turn_index: int
    start: float | None


# Amounts in digits ("12,000") or, as people transcribe speech, in words ("twelve thousand").
_AMOUNT = rf"(?:\d[\d,.]*|\b{NUMBER_WORD}(?:[\s-]+(?:and\s+)?{NUMBER_WORD})*)"
_FACT = re.compile(
    rf"(\$\s?\d|{_AMOUNT}\s*(?:%|percent|dollars|euros|users|people|weeks|days|months|hours)|{MONTH}\s+{DAY}"
    rf"|\b{WEEKDAY}\b)",
    re.IGNORECASE,
)


def _is_commitment(sentence: str) -> bool:
    """Someone commits to a date ("I will send it by Thursday"): an action item, not a key fact.
    A date on its own ("It starts on Monday") is a fact."""
    return bool(_DUE.search(sentence)) and any(p.search(sentence) for p in (_ASKED, _SELF, _NAMED))


def extract_key_facts(transcript: Transcript, limit: int = 8) -> list[KeyFact]:
    """Statements with amounts, counts and dates that are not already decisions or commitments."""
    facts: list[KeyFact] = []
    for s in split_sentences(transcript):
        if s.text.endswith("?") or _DECISION.search(s.text) or _is_commitment(s.text):
            continue
        if _FACT.search(s.text) and s.text not in {f.text for f in facts}:
            facts.append(KeyFact(s.text, s.speaker, s.turn_index, s.start))
    return facts[:limit]
