"""Ask across the library: find the meetings that speak of the question, and answer it from them with the same
reader a single meeting gets.

Why not one answer over every sentence of every meeting: the single-meeting reader weighs a line against its own
meeting (its speakers, what else was said, which date belongs to which event), so the library picks the meetings
first (by the question's matches across the sealed index) and asks each in turn; the best-matching meeting that
answers gives the answer, cited with its title and date.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Callable

from app.answering.answers import NOT_IN_MEETING, Answer
from app.answering.done import asked_about, asks_what_is_open
from app.library.dates import Period, period_in, without_period
from app.library.open_items import item_states, open_answer
from app.library.record import transcript_of
from app.library.store import Library, MeetingHead, MeetingRecord
from app.text.transcript import Transcript
from encoders.errors import InputError

MEETINGS_READ = 3  # meetings asked, best-matching first
POOL = 40  # sentences found across the library to rank meetings by


@dataclass
class LibraryAnswer:
    """The answer, the meeting it comes from (None when no meeting answers), and what the others said."""

    question: str
    answer: Answer
    meeting: MeetingRecord | None
    also: list[tuple[MeetingRecord, Answer]] = field(default_factory=list)
    period: Period | None = None  # the days the question asked about ("last month"), when it named some

    @property
    def text(self) -> str:
        return self.answer.text


def ask_library(library: Library, question: str, ask: Callable[[Transcript, str], Answer],
                since: float | None = None, speaker: str | None = None, meeting_like: str | None = None,
                meetings_read: int = MEETINGS_READ, now: float | None = None) -> LibraryAnswer:
    """Answer ``question`` from the library's meetings (those from ``since`` on, whose title is like
    ``meeting_like``; with ``speaker``, those where that speaker said something matching it), asking each chosen
    meeting with ``ask``. A period the question names ("last month", "in March", reckoned from ``now``) narrows the
    meetings to its days, and each meeting is asked the question without it."""
    period = period_in(question, now)
    until = None
    if period is not None:
        since = period.start if since is None or (period.start is not None and period.start > since) else since
        until = period.end
        question = without_period(question, period)
    chosen = None
    if meeting_like is not None and not any(ch.isalnum() for ch in meeting_like):
        raise InputError("--meeting-like needs a word of the title to look for")
    asks_open = asks_what_is_open(question)
    # the meetings of the days asked (read, and audited, once): for a title, a period or what is open
    heads = library.meetings(since, until) if meeting_like or period is not None or asks_open else []
    if meeting_like:
        chosen = [m.id for m in heads if _like(meeting_like, m.title)]
        if not chosen:
            raise InputError(f"no meeting in the library has a title like {meeting_like!r}"
                             + (f" {period.describe()}" if period else ""))
    if period is not None and not heads:
        said = f"The library holds no meeting {Period(since, until, period.said).describe()}."
        return LibraryAnswer(question, Answer(question, said, [], 1, 0.0), None, [], period)
    if asks_open:
        about = asked_about(question) or None
        titled = chosen if chosen is not None else _titled(heads, question)
        states = item_states(library, titled if titled is not None else [h.id for h in heads], about, owner=speaker)
        if states or not about:  # none on that topic: the question may be about something else that is open
            return LibraryAnswer(question, open_answer(question, states), None, [], period)
    found = library.search(question, limit=POOL, since=since, speaker=speaker, meetings=chosen, until=until)
    best: dict[str, float] = {}
    for f in found:
        best[f.meeting] = max(best.get(f.meeting, 0.0), f.score)
    ranked = sorted(best, key=lambda m: -best[m])[:meetings_read]
    answered: list[tuple[MeetingRecord, Answer]] = []
    for meeting in ranked:
        record = library.get(meeting)
        library.warm(meeting)  # its sentences' vectors are kept: the reader need not embed them again
        answered.append((record, ask(transcript_of(record), question)))
    said = [(r, a) for r, a in answered if a.text != NOT_IN_MEETING]
    if not said:
        return LibraryAnswer(question, Answer(question, NOT_IN_MEETING, [], 1, 0.0), None, [], period)
    record, answer = said[0]
    return LibraryAnswer(question, answer, record, [(r, a) for r, a in said[1:]], period)


def _titled(heads: list[MeetingHead], question: str) -> list[str] | None:
    """Of ``heads``, the meetings a question names by title after "from" ("What is still open from the
    stand-up?"), or None."""
    m = re.search(r"\bfrom\s+(?:the\s+|our\s+|my\s+)?(?P<title>[^?.!]+)", question, re.IGNORECASE)
    if m is None:
        return None
    titled = [h.id for h in heads if _like(m["title"].strip(), h.title)]
    return titled or None


def _like(asked: str, title: str) -> bool:
    """A title like the one asked for: it contains it, or reads nearly the same ("standup" for "Stand-up")."""
    a, t = asked.lower(), title.lower()
    plain = lambda s: "".join(ch for ch in s if ch.isalnum())  # noqa: E731
    return a in t or plain(a) in plain(t) or difflib.SequenceMatcher(None, plain(a), plain(t)).ratio() >= 0.75
