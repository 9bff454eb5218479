"""Give diarized speakers (SPEAKER_00...) the names they have in the meeting.

Two kinds of evidence, each a weighted vote for a label's name:
- a self-introduction ("I'm Priya", "My name is Fiona", "Marcus here from finance", "This is Diego
  from engineering") names the speaker who says it; it is the strongest evidence;
- an address names someone else: "Bob, can you start?" or "What do you think, Bob?" is followed by
  Bob; "Thanks, Bob." follows him.
A label takes the name with the most votes, each name at most once (strongest evidence first), and
keeps it only when that name has most of the label's votes (its confidence). Labels with no votes
keep their SPEAKER_xx name. Known names (the attendees a user gives, ``asr.hotwords``) fix the spelling:
a name heard close to one of them ("Sophia" for Sofia) is counted as that one.
Wrong names cost more than missing ones (a "who" answer then names the wrong person), so a name with a
single address needs the recogniser to have been sure of it (or to be an attendee's), and a label that
itself addresses a name in two turns (two voices the diarizer merged) does not go by it.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Sequence

from app.text.transcript import Transcript, Turn, TranscriptWord
from encoders.errors import InputError

_NAME = r"(?P<name>[A-Z][a-z]{1,20}(?:-[A-Z][a-z]+)?)"
# An address that hands the floor to the next speaker.
_TO_NEXT = (
    re.compile(rf"\b{_NAME},\s+(?:can|could|would|will|do|did|what|how|any|are|is|where|when)\b[^.?!]*\?"),
    re.compile(rf"\b{_NAME},\s+(?i:go ahead|over to you|your turn|the floor is yours|you're next|you are next|you're up)\b"),
    re.compile(rf"(?i:let's hear from|over to|handing over to|next up is|next is)\s+{_NAME}\b"),
    re.compile(rf"(?i:over to you|your turn|go ahead|what do you think|what about you|anything from you|how about you),?\s+{_NAME}\s*[?.!]"),
)
# A reply that names the previous speaker (at the start of a sentence: "That works. Thank you, Alice.").
_TO_PREVIOUS = re.compile(
    rf"(?:^|(?<=[.!?])\s+)(?:(?:Sure|Yes|Yeah|Okay|OK|Right|Thanks|Thank you|Great|Good|Good point|Agreed|Exactly|Fair enough),?\s+){_NAME}\b"
)
# A speaker who introduces themself.
_INTRODUCTION = (
    re.compile(rf"\b(?i:I am|I'm|my name is|my name's|this is)\s+{_NAME}(?=\s*(?:[,.!?;]|$|\s+(?:from|with|and|here|in|on|of|at)\b))"),
    re.compile(rf"(?:^|[.!?,]\s+){_NAME} (?:here|speaking)\b"),
    # "Hey, it's Carlos." (the recogniser often hears the greeting as "Okay")
    re.compile(rf"^(?i:hi|hello|hey|morning|good morning|good afternoon|okay|ok|yeah|so|well|alright|all right)\b"
               rf"[^.?!]{{0,20}}?(?i:it's|it is)\s+{_NAME}\s*[.,!]"),
)
_INTRO_WEIGHT = 3.0  # a self-introduction outweighs a few (possibly misattributed) addresses
_MIN_SHARE = 0.5  # a name must hold at least this share of its label's votes
# ...or this share when the label introduced itself by that name: addresses are handed to whoever speaks
# next, so a few of them land on the wrong label, and they should not outvote a speaker's own "I'm Sofia".
_MIN_SHARE_INTRODUCED = 0.34
_MIN_ADDRESSES = 2.0  # address votes a name needs when no introduction backs it and no attendee has it...
_MIN_HEARD = 0.5  # ...unless the recogniser gave the name's word at least this probability
_SELF_ADDRESSES = 2  # turns in which a label addresses a name before that name is not its own
_NOT_NAMES = {
    "I", "We", "You", "The", "This", "That", "Okay", "Right", "Sure", "Yes", "Thanks", "Great", "So", "And", "But",
    "Well", "Good", "Now", "Then", "Here", "There", "Also", "Just", "Not", "Really", "Going", "Happy", "Glad",
    "Sorry", "Done", "Ready", "Fine", "Back", "All", "Everyone", "Team", "Today", "Tomorrow", "Yesterday",
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January", "February", "March",
    "April", "May", "June", "July", "August", "September", "October", "November", "December", "Hi", "Hello",
    "Hey", "Thank", "Please", "Let", "What", "How", "Who", "When", "Where", "Why", "Which", "It", "Is", "Are",
    "Our", "My", "Your", "Their", "His", "Her", "One", "Two", "Three", "Next", "Last", "First", "Finally",
    "Yeah", "Yep", "Nope", "Alright", "Cool", "Perfect", "Absolutely", "Exactly", "Agreed", "Oh", "Um", "Uh",
    "Hmm", "Wow", "Nice", "Sounds", "Totally", "Indeed", "Anyway", "Actually", "Honestly", "Basically",
    # languages, nationalities and places: "English speaking", "I'm British", "this is Berlin" are no names
    "English", "England", "British", "Britain", "American", "America", "Spanish", "Spain", "French", "France",
    "German", "Germany", "Italian", "Italy", "Chinese", "China", "Japanese", "Japan", "Indian",
    "Canadian", "Canada", "Irish", "Ireland", "Scottish", "Scotland", "Dutch", "European", "Europe",
    "Berlin", "Remote", "Online", "Office", "Home",
    # pronouns and words for a group: "Hi guys", "He said so" address or mean someone, they do not name them
    "He", "She", "They", "Them", "Him", "Guys", "Folks", "People", "Everybody", "Somebody", "Someone", "Anyone",
    "Anybody", "Nobody", "Ladies", "Gentlemen", "Colleagues", "Friends", "Boss", "Man", "Dude", "Mate",
}
# Words an introduction is followed by when the "name" is really an adjective ("I'm Glad to ...").
_LOWER_NOT_NAMES = {n.lower() for n in _NOT_NAMES}


# A label that names nobody: the diarizer's, or what a transcript writes for an unknown speaker.
_ANONYMOUS = re.compile(r"^(?:SPEAKER_\d+|\?|unknown)$", re.IGNORECASE)


def is_anonymous(label: str) -> bool:
    return bool(_ANONYMOUS.match(label.strip()))


@dataclass(frozen=True)
class SpeakerName:
    """A label's name, the evidence behind it, and its share of that label's votes (0-1)."""

    label: str
    name: str
    confidence: float
    evidence: str  # "introduction", "address", or "kept" (known before a forget)


_KNOWN_CLOSE = 0.6  # difflib ratio at which a heard name counts as a known one


def name_speakers(transcript: Transcript, known: Sequence[str] = ()) -> Transcript:
    return rename_speakers(transcript, speaker_names(transcript, known))


def speaker_names(transcript: Transcript, known: Sequence[str] = (), forgotten: Sequence[str] = (),
                  kept: dict[str, str] | None = None) -> dict[str, str]:
    """Label -> name for the labels the meeting names (the others are left out); ``forgotten``: names given to no
    one (speakers forgotten from the meeting, whom the others still address); ``kept``: label -> name known
    before a forget (the evidence may have been in the forgotten speaker's turns), given first."""
    return {n.label: n.name for n in named_speakers(transcript, known, forgotten, kept)}


def checked_name(name: str, what: str = "a speaker's name") -> str:
    """A name a user gives a speaker, spaces collapsed; InputError unless 1-40 characters with a letter."""
    name = " ".join((name or "").split())
    if not name or len(name) > 40 or not any(c.isalpha() for c in name):
        raise InputError(f"{what} is 1-40 characters with at least one letter")
    return name


def speaker_label(speaker: str, labels: list[str], names: dict[str, str]) -> str:
    """The diarizer label ``speaker`` means: a label, or (any case) the name a label goes by; else InputError
    listing the meeting's speakers."""
    known = list(dict.fromkeys(labels))
    if speaker in known:
        return speaker
    matches = [label for label in known if names.get(label, "").lower() == speaker.strip().lower()]
    if len(matches) == 1:
        return matches[0]
    shown = ", ".join(f"{label} ({names[label]})" if label in names else label for label in known) or "none"
    raise InputError(f"the meeting has no speaker {speaker!r}; its speakers: {shown}")


def known_spelling(name: str, known: Sequence[str]) -> str:
    """The known name closest to ``name`` as heard, if close enough (one word of a known full name counts)."""
    spellings = {w.lower(): w for k in known for w in k.split() if w[:1].isupper()}
    best = difflib.get_close_matches(name.lower(), spellings, n=1, cutoff=_KNOWN_CLOSE)
    return spellings[best[0]] if best else name


def is_a_name(name: str) -> bool:
    """Could this capitalised word be a person's name (not "Monday", "Guys", "English", "Okay")?"""
    return name not in _NOT_NAMES and name.lower() not in _LOWER_NOT_NAMES


@dataclass
class _Evidence:
    """What a transcript says about names: weighted votes per label, the kinds of evidence behind each
    (label, name), how sure the recogniser was of the name's word there, and the names each label addresses."""

    votes: dict[str, Counter[str]]
    kinds: dict[tuple[str, str], set[str]]
    heard: dict[tuple[str, str], float]
    addresses: dict[str, Counter[str]]


def _heard(turn: Turn, name: str) -> float:
    """The recogniser's probability for ``name`` in ``turn`` (1.0 for text without word timings)."""
    probs = [w.probability for w in turn.words if w.text.strip(" ,.;:!?\"'").startswith(name)]
    return max(probs, default=1.0)


def _votes(turns: list[Turn], known: Sequence[str] = ()) -> _Evidence:
    """Self-introductions vote for their speaker, addresses for the next (or previous) speaker."""
    found = _Evidence(defaultdict(Counter), defaultdict(set), defaultdict(float), defaultdict(Counter))

    def spelled(name: str) -> str:
        return known_spelling(name, known) if known else name

    def vote(label: str, turn: Turn, name: str, weight: float, kind: str) -> None:
        if is_a_name(name):
            key = (label, spelled(name))
            found.votes[label][key[1]] += weight
            found.kinds[key].add(kind)
            found.heard[key] = max(found.heard[key], _heard(turn, name))

    for i, turn in enumerate(turns):
        for pattern in _INTRODUCTION:
            for match in pattern.finditer(turn.text):
                vote(turn.speaker, turn, match["name"], _INTRO_WEIGHT, "introduction")
        nxt = next((t for t in turns[i + 1:] if t.speaker != turn.speaker), None)
        addressed: set[str] = set()
        for pattern in _TO_NEXT:
            for match in pattern.finditer(turn.text):
                addressed.add(spelled(match["name"]))
                if nxt is not None:
                    vote(nxt.speaker, turn, match["name"], 1.0, "address")
        for match in _TO_PREVIOUS.finditer(turn.text):
            addressed.add(spelled(match["name"]))
            if i > 0 and turns[i - 1].speaker != turn.speaker:
                vote(turns[i - 1].speaker, turn, match["name"], 1.0, "address")
        found.addresses[turn.speaker].update(addressed)  # turns in which the label addresses each name
    return found


def named_speakers(transcript: Transcript, known: Sequence[str] = (), forgotten: Sequence[str] = (),
                   kept: dict[str, str] | None = None) -> list[SpeakerName]:
    """Names with their confidence; a name goes to one label only, strongest evidence first, a ``forgotten``
    one to none, and a ``kept`` one (label -> name, from before a forget) to its label before any vote."""
    found = _votes(transcript.turns, known)
    votes = found.votes
    ranked = sorted(
        ((count, label, name) for label, c in votes.items() for name, count in c.items()),
        key=lambda r: (-r[0], r[1], r[2]),
    )
    kept = {label: name for label, name in (kept or {}).items() if name not in forgotten}
    names = [SpeakerName(label, name, 1.0, "kept") for label, name in kept.items()]
    done: set[str] = set(kept)
    # never another label's name, nor a forgotten or kept one
    taken: set[str] = set(transcript.speakers) | set(forgotten) | set(kept.values())
    known_names = {known_spelling(w, known) for k in known for w in k.split()}
    for count, label, name in ranked:
        if label in done or name in taken:
            continue
        # A label that addresses this name ("Jamal, can you ...?") in two or more turns is someone else: the
        # diarizer has put two people under one label, so no name. (One such turn is often just the start of
        # the next speaker's reply, "Sure, Alice", cut onto the previous label.)
        if found.addresses[label][name] >= _SELF_ADDRESSES:
            continue
        evidence = "introduction" if "introduction" in found.kinds[(label, name)] else "address"
        # A single address hands the name to whoever the diarizer says spoke next; it counts when the
        # recogniser was sure of the name, the name is an attendee's, or the meeting says it again.
        if evidence == "address" and count < _MIN_ADDRESSES and name not in known_names \
                and found.heard[(label, name)] < _MIN_HEARD:
            continue
        share = count / sum(votes[label].values())
        # A name that also speaks for itself elsewhere (an introduction by another label) is contested:
        # the introduction wins, handled by the ordering; a weak minority name is not given at all.
        if share < (_MIN_SHARE_INTRODUCED if evidence == "introduction" else _MIN_SHARE):
            continue
        names.append(SpeakerName(label, name, round(share, 3), evidence))
        done.add(label)
        taken.add(name)
    return names


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
