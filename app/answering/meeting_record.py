"""Questions about the meeting itself, answered from its record rather than from one line that happens to match.

"Who attended?" is the list of speakers, not whoever said the word "attend"; "What was the meeting about?" is
what it kept coming back to, not one sentence with "purpose" in it. A question is taken as one of these when its
meaning (the sentence embedder) is close to the plain way of asking it; otherwise it is an ordinary question.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from typing import Sequence

from app.answering.question_parse import asks_how_long, asks_who_attended, asks_who_spoke_most
from app.text.sentences import Sentence
from app.text.speakers import is_anonymous
from app.text.transcript import SLIDE_SPEAKER, Transcript, format_time


class MeetingAsk(str, enum.Enum):
    ATTENDEES = "attendees"
    LEADER = "leader"
    PURPOSE = "purpose"
    SPOKE_MOST = "spoke_most"
    SPOKE_LEAST = "spoke_least"
    DURATION = "duration"


# The plain ways of asking each, as a user would; a question must be close to one of them in meaning.
# None is worded as an ELITR-Bench question is (those are what the detection is measured on).
PROTOTYPES = {
    MeetingAsk.ATTENDEES: ("Who was present at the meeting?", "Who took part in the meeting?", "Who was in the meeting?"),
    MeetingAsk.LEADER: ("Who led the meeting?", "Who chaired the meeting?", "Who was leading the meeting?"),
    MeetingAsk.PURPOSE: ("What was the goal of the meeting?", "What was the meeting about?", "Why was the meeting held?"),
}
MIN_SIMILARITY = 0.85  # "Who left the meeting before the end?" is 0.79 from "Who attended the meeting?"
MIN_MARGIN = 0.03  # over the next kind: "Who ran the meeting?" is near both attendees and leader
# Other words for the gathering itself; the embedder knows "meeting" far better than "call" (0.53 vs 0.90).
_GATHERING = re.compile(r"\b(?:call|video ?call|conference call|session|get-together|sync|stand-?up)\b", re.IGNORECASE)


def meeting_ask(question: str, embedder) -> MeetingAsk | None:
    """Which question about the meeting itself ``question`` is, or None. Who attended is read from the question's
    grammar first (app/answering/question_parse.py: short questions sit far from every way of asking in meaning); then by
    meaning, which needs the embedder."""
    if asks_who_attended(question):
        return MeetingAsk.ATTENDEES
    most = asks_who_spoke_most(question)
    if most is not None:
        return MeetingAsk.SPOKE_MOST if most == "most" else MeetingAsk.SPOKE_LEAST
    if asks_how_long(question):
        return MeetingAsk.DURATION
    if embedder is None:
        return None
    vectors = {k: embedder.embed(list(v)) for k, v in PROTOTYPES.items()}  # MiniLMEmbedder caches each text
    asked = embedder.embed([_GATHERING.sub("meeting", question)])[0]
    score = {k: float((v @ asked).max()) for k, v in vectors.items()}
    best, second = sorted(score, key=score.get, reverse=True)[:2]
    if score[best] < MIN_SIMILARITY or score[best] - score[second] < MIN_MARGIN:
        return None
    return best


# An unnamed voice that said less than this, in one turn, is not counted as a person who attended: a live diarizer
# briefly gives a new label to a known voice (a cough, a clipped word, a voice unlike itself for a moment), and a
# page that said "and 1 unnamed speaker" then listed someone who was not there (issue 49). It is still mentioned.
FEW_WORDS = 8


def attendees(transcript: Transcript, sentences: Sequence[Sentence]) -> tuple[str, list[Sentence]]:
    """Everyone who spoke, in order of first words, each cited by their first sentence (a slide is no one)."""
    speakers = [s for s in transcript.speakers if s != SLIDE_SPEAKER]
    if not speakers:
        return "", []
    first = {s.speaker: s for s in reversed(sentences)}
    named = [s for s in speakers if not is_anonymous(s)]
    words, turns = _floor(transcript)
    brief = [s for s in speakers if is_anonymous(s) and words[s] < FEW_WORDS and turns[s] <= 1]
    unnamed = len(speakers) - len(named) - len(brief)
    if brief and len(brief) == len(speakers):  # nobody else: a short recording, its voices are its voices
        brief, unnamed = [], len(speakers)
    if not named:
        said = "1 speaker, not named" if unnamed == 1 else f"{unnamed} speakers, none of them named"
        cited = [first[s] for s in speakers if s in first and s not in brief][:8]
    else:
        said = join_names(named)
        if unnamed:
            said += f", and {unnamed} unnamed speaker{'s' if unnamed != 1 else ''}"
        cited = [first[s] for s in named if s in first][:8]
    if brief:
        counted = named + ["that speaker"] * unnamed
        who = counted[0] if len(counted) == 1 else "one of them"
        said += (f". A few words ({sum(words[s] for s in brief)}) came from "
                 f"{'a voice' if len(brief) == 1 else f'{len(brief)} voices'} not matched to anyone; "
                 f"{'it' if len(brief) == 1 else 'they'} may be {who}")
    return f"{said}.", cited


def leader(transcript: Transcript, sentences: Sequence[Sentence]) -> tuple[str, list[Sentence]]:
    """Who led it, read as who held the floor: the most words and the most turns (a chair opens, hands over and
    recaps). Said as a reading of the record, with each one's share."""
    words, turns = _floor(transcript)
    if not words:
        return "", []
    total_words, total_turns = sum(words.values()) or 1, sum(turns.values()) or 1
    score = {s: words[s] / total_words + turns[s] / total_turns for s in words}
    chair = max(score, key=score.get)
    evidence = [s for s in sentences if s.speaker == chair][:2]
    return (f"{chair}, who led the discussion ({words[chair] / total_words:.0%} of the words, "
            f"{turns[chair] / total_turns:.0%} of the turns)."), evidence


def spoke_most(transcript: Transcript, sentences: Sequence[Sentence], least: bool = False) -> tuple[str, list[Sentence]]:
    """Who said the most (or the fewest) words, with their share."""
    words, _ = _floor(transcript)
    if not words:
        return "", []
    total = sum(words.values()) or 1
    who = min(words, key=words.get) if least else max(words, key=words.get)
    evidence = [s for s in sentences if s.speaker == who][:2]
    return f"{who}, with {words[who]:,} of the {total:,} words said ({words[who] / total:.0%}).", evidence


def duration(transcript: Transcript, sentences: Sequence[Sentence]) -> tuple[str, list[Sentence]]:
    """How long it ran, from the first words to the last; "" when the transcript has no times."""
    starts = [t.start for t in transcript.turns if t.start is not None]
    ends = [t.end if t.end is not None else t.start for t in transcript.turns if t.start is not None]
    if not starts:
        return "", []
    seconds = max(ends) - min(starts)
    minutes = round(seconds / 60)
    said = f"About {minutes} minute{'s' if minutes != 1 else ''}" if minutes else f"About {seconds:.0f} seconds"
    return f"{said}, from {format_time(min(starts))} to {format_time(max(ends))}.", list(sentences[:1]) + list(sentences[-1:])


def purpose(phrases: Sequence[str], central: Sequence[Sentence]) -> tuple[str, list[Sentence]]:
    """What it was about: what it kept talking about (its key phrases, app/answering/key_phrases.py), cited by
    the central sentences that say most of them; the central sentences themselves where no phrase stands out."""
    if not phrases:
        return " ".join(s.text for s in central[:2]), list(central[:2])

    def mentions(sentence: Sentence) -> int:
        return sum(p.lower() in sentence.text.lower() for p in phrases)

    cited = sorted(sorted(central, key=mentions, reverse=True)[:2], key=lambda s: s.turn_index)
    return f"The meeting was mainly about {join_names(list(phrases))}.", cited


def _spoken(transcript: Transcript) -> list:
    """The turns people said (not the slides placed among them)."""
    return [t for t in transcript.turns if t.speaker != SLIDE_SPEAKER]


def _floor(transcript: Transcript) -> tuple[Counter[str], Counter[str]]:
    """How much each speaker held the floor: (words said, turns taken)."""
    words: Counter[str] = Counter()
    turns: Counter[str] = Counter()
    for turn in _spoken(transcript):
        words[turn.speaker] += len(turn.text.split())
        turns[turn.speaker] += 1
    return words, turns


def join_names(names: Sequence[str]) -> str:
    """Names as a sentence says them: "Anna", "Anna and Bob", "Anna, Bob and Carol"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
