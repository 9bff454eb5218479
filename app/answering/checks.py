"""A cited line that says the opposite of the slide on screen then, or of what the question takes as given ("Why
can't they ...?"), carries that as a check: the recogniser may have dropped a "not" (app/answering/polarity.py)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Protocol, TypeVar

from app.answering.polarity import disagreement
from app.answering.questions import Question, QuestionType
from app.text.transcript import SLIDE_SPEAKER, Transcript, Turn, format_time


class Cited(Protocol):
    """A cited line (app/answering/answers.Citation): a dataclass with a ``check`` field."""

    speaker: str
    start: float | None
    text: str
    check: str


C = TypeVar("C", bound=Cited)

SLIDE_LAG_S = 30.0  # a slide shown this soon after a line is still about it (slides often follow the words)


def checked(citation: C, q: Question, transcript: Transcript) -> C:
    """The citation with its check set, when something says the opposite of it. A yes-no question asks for either,
    so it takes nothing as given."""
    if citation.speaker == SLIDE_SPEAKER:
        return citation
    if q.type is not QuestionType.YES_NO and (found := disagreement(citation.text, q.text)) is not None:
        return replace(citation, check=f'the question says "{found[1]}"')
    for slide in slides_around(transcript, citation.start):
        # its title names a topic and says nothing either way (read live, a slide's lines are joined by "; ")
        bullets = "\n".join(re.split(r"\n|;", slide.text)[1:])
        if (found := disagreement(citation.text, bullets)) is not None:
            return replace(citation, check=f'the slide at {format_time(slide.start)} says "{found[1]}"')
    return citation


def slides_around(transcript: Transcript, start: float | None) -> list[Turn]:
    """The slide on screen when a line was said, and the next one if it came within SLIDE_LAG_S."""
    if start is None:
        return []
    slides = [t for t in transcript.turns if t.speaker == SLIDE_SPEAKER and t.start is not None]
    shown = [t for t in slides if t.start <= start][-1:]
    return shown + [t for t in slides if start < t.start <= start + SLIDE_LAG_S][:1]
