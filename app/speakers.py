"""Give diarized speakers (SPEAKER_00...) the names people call them in the meeting.

People address each other: "Bob, can you start?" is followed by Bob; "Thanks, Bob." follows him.
Each such address is a vote for the name of the next or previous speaker; a label takes the name
with the most votes, each name at most once. Labels with no votes keep their SPEAKER_xx name.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from app.transcript import Transcript, Turn, TranscriptWord

_NAME = r"(?P<name>[A-Z][a-z]{1,20})"
# An address that hands the floor to the next speaker.
_TO_NEXT = re.compile(rf"\b{_NAME},\s+(?:can|could|would|will|do|did|what|how|any)\b[^.?!]*\?")
# A reply that names the previous speaker.
_TO_PREVIOUS = re.compile(rf"^(?:(?:Sure|Yes|Yeah|Okay|OK|Right|Thanks|Thank you|Great|Good),?\s+){_NAME}\b")
_NOT_NAMES = {"I", "We", "You", "The", "This", "That", "Okay", "Right", "Sure", "Yes", "Thanks", "Great", "So", "And"}


def name_speakers(transcript: Transcript) -> Transcript:
    return rename_speakers(transcript, speaker_names(transcript))


def speaker_names(transcript: Transcript) -> dict[str, str]:
    """Label -> name for the labels people address by name (the others are left out)."""
    votes: dict[str, Counter[str]] = defaultdict(Counter)
    turns = transcript.turns
    for i, turn in enumerate(turns):
        for match in _TO_NEXT.finditer(turn.text):
            nxt = next((t for t in turns[i + 1:] if t.speaker != turn.speaker), None)
            if nxt is not None and match["name"] not in _NOT_NAMES:
                votes[nxt.speaker][match["name"]] += 1
        match = _TO_PREVIOUS.match(turn.text)
        if match and i > 0 and turns[i - 1].speaker != turn.speaker and match["name"] not in _NOT_NAMES:
            votes[turns[i - 1].speaker][match["name"]] += 1
    mapping: dict[str, str] = {}
    taken: set[str] = set()
    ranked = sorted(((count, label, name) for label, c in votes.items() for name, count in c.items()), reverse=True)
    for count, label, name in ranked:
        if label not in mapping and name not in taken and name not in transcript.speakers:
            mapping[label] = name
            taken.add(name)
    return mapping


def rename_speakers(transcript: Transcript, mapping: dict[str, str]) -> Transcript:
    if not mapping:
        return transcript
    turns = transcript.turns
    renamed = [
        Turn(
            speaker=mapping.get(t.speaker, t.speaker),
            text=t.text,
            start=t.start,
            end=t.end,
            words=[
                TranscriptWord(w.text, w.start, w.end, mapping.get(w.speaker, w.speaker), w.probability)
                for w in t.words
            ],
        )
        for t in turns
    ]
    return Transcript(turns=renamed, source=transcript.source, duration=transcript.duration)
