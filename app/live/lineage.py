"""Lineage: which content source each KV block of a meeting holds, read from its Global Timeline Index.

A meeting's tokens come from content sources: each speaker's voice (a participant's audio stream, or a diarized
voice of a recording) and the shared screen or camera (the slides read from its frames). The timeline maps every
line the KV holds to its token range, so the blocks a source's tokens sit in follow from it; the timeline is the
one record of it (it is saved with the meeting and rebuilt with it), so no second tag can disagree with it. A cold
block keeps its logical block index in its id, so the same map covers blocks spilled to host memory, disk or Redis.

A block of 64 tokens often holds two sources (one turn ends, the next begins), and every later token attended to
earlier ones, so a source is forgotten by rebuilding the meeting without it and shredding every old key
(app/live/forget.py); the lineage says which blocks held it, for the forget's audit record and for the user.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvstore.timeline import Segment, TimelineIndex

SCREEN = "screen"  # the slides and frames read from the shared screen or camera
_SCREEN_NAMES = frozenset({SCREEN, "slides", "video", "camera"})


def is_screen(source: str) -> bool:
    """Whether a user's word for a source means the screen (``screen``, ``slides``, ``video``, ``camera``)."""
    return source.strip().lower() in _SCREEN_NAMES


def source_kind(source: str) -> str:
    """"screen" or "speaker": what kind of content source ``source`` (SCREEN or a speaker label) is."""
    return "screen" if source == SCREEN else "speaker"


def source_of(segment: Segment) -> str | None:
    """The content source of a timeline segment: its speaker's label, SCREEN for a slide, None for the app's own
    text (a prompt; no person's)."""
    if segment.modality == "video":
        return SCREEN
    if segment.modality == "audio":
        return segment.speaker or "unknown speaker"
    return None


@dataclass(frozen=True)
class SourceBlocks:
    """What one content source has in a meeting's KV cache."""

    source: str  # a speaker label, or SCREEN
    name: str | None  # the name the transcript gives the speaker
    segments: int
    tokens: int
    blocks: tuple[int, ...]  # logical KV blocks holding any of its tokens, in order
    shared: int  # of those, blocks that hold another source's tokens too

    @property
    def kind(self) -> str:
        return source_kind(self.source)

    def shown(self) -> str:
        return f"{self.source} ({self.name})" if self.name else self.source


def lineage(timeline: TimelineIndex, block_size: int, names: dict[str, str] | None = None) -> list[SourceBlocks]:
    """Every content source of the meeting with the KV blocks its tokens sit in, most tokens first. A line
    committed after its speaker was named holds the name on the timeline: it counts for that name's label (one
    speaker is one source, and a forget of them finds all of their blocks; issue 49 F7)."""
    names = names or {}
    labels_of: dict[str, list[str]] = defaultdict(list)
    for label, name in names.items():
        labels_of[name].append(label)
    label_of = {name: labels[0] for name, labels in labels_of.items() if len(labels) == 1 and name not in names}
    tokens: dict[str, int] = defaultdict(int)
    segments: dict[str, int] = defaultdict(int)
    blocks: dict[str, set[int]] = defaultdict(set)
    holders: dict[int, set[str]] = defaultdict(set)
    for segment in timeline.segments():
        source = source_of(segment)
        source = label_of.get(source, source) if source is not None else None
        if source is None or segment.token_end <= segment.token_start:
            continue
        segments[source] += 1
        tokens[source] += segment.token_end - segment.token_start
        for block in range(segment.token_start // block_size, (segment.token_end - 1) // block_size + 1):
            blocks[source].add(block)
            holders[block].add(source)
    found = [SourceBlocks(source, names.get(source), segments[source], tokens[source], tuple(sorted(held)),
                          sum(1 for block in held if len(holders[block]) > 1))
             for source, held in blocks.items()]
    return sorted(found, key=lambda s: (-s.tokens, s.source))


def blocks_of(timeline: TimelineIndex, block_size: int, source: str,
              names: dict[str, str] | None = None) -> SourceBlocks | None:
    """The lineage of one source (None when the meeting holds none of its tokens)."""
    return next((s for s in lineage(timeline, block_size, names) if s.source == source), None)
