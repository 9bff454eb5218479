"""What is still open: the action items of earlier meetings that no later meeting reports done.

An item is closed by a later meeting's sentence that speaks of the item's things and says its work was done ("I
sent the contract on Monday" closes "send the contract"; app/answering/done.py reads it by the parser). The later
meetings are searched for each item through the library's own index, so a check costs one search, not a read of
every later meeting. An item said again later ("I still have to send the contract") stays open.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.answering.answers import Answer, Citation
from app.answering.done import reports_done
from app.answering.retrieval import stems
from app.library.record import action_line, parse_action_line
from app.library.store import Found, Library, MeetingHead
from app.text.transcript import format_day

CANDIDATES = 12  # later sentences read per item


@dataclass(frozen=True)
class ItemState:
    """One action item, the meeting it was given in, and the later sentence that closed it (None: still open)."""

    meeting: MeetingHead
    owner: str
    task: str
    due: str | None
    closed_by: Found | None = None

    def line(self) -> str:
        return (f"{action_line(self.owner, self.task, self.due)} - from {self.meeting.title}, "
                f"{format_day(self.meeting.started, 'undated')}")


def item_states(library: Library, meetings: list[str], about: set[str] | None = None,
                owner: str | None = None) -> list[ItemState]:
    """Every action item of ``meetings`` (on a topic's words ``about``, or of ``owner``, when given), oldest first,
    each with the sentence of a later meeting that reports it done."""
    topic = set(stems(" ".join(about))) if about else set()
    timeline = list(reversed(library.meetings()))  # oldest first: every later meeting may close an item
    chosen = set(meetings)
    states = []
    for at, head in enumerate(timeline):
        if head.id not in chosen:
            continue
        later = [h.id for h in timeline[at + 1:]]
        for item in filter(None, map(parse_action_line, library.get(head.id).action_items)):
            who, task, due = item
            if topic and not topic & set(stems(task)):
                continue
            if owner and who.strip().lower() != owner.strip().lower():
                continue
            closed = next((f for f in (library.search(task, limit=CANDIDATES, meetings=later) if later else [])
                           if reports_done(task, f.sentence.text)), None)
            states.append(ItemState(head, who, task, due, closed))
    return states


def open_answer(question: str, states: list[ItemState]) -> Answer:
    """The items still open, as one answer citing where each was given; what later meetings closed is said too."""
    still = [s for s in states if s.closed_by is None]
    closed = [s for s in states if s.closed_by is not None]
    if not states:
        return Answer(question, "No action items were recorded in those meetings.", [], 1, 0.0)
    done = "the action item was" if len(states) == 1 else f"all {len(states)} action items were"
    lines = [f"Still open ({len(still)} of {len(states)}):"] + [f"- {s.line()}" for s in still] if still else \
        [f"Nothing is open: {done} reported done."]
    if closed and still:
        lines.append(f"Reported done later: {len(closed)} ("
                     + "; ".join(f"{s.task}, in {s.closed_by.title}" for s in closed[:3])
                     + ("; ..." if len(closed) > 3 else "") + ").")
    citations = [Citation(s.closed_by.sentence.turn_index, s.closed_by.sentence.speaker, s.closed_by.sentence.start,
                          s.closed_by.sentence.text) for s in closed]
    return Answer(question, "\n".join(lines), citations, 1, 1.0, "open_items")
