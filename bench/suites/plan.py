"""Plan one synthetic meeting from its seed: who speaks (names, voices, how each is named), what
facts the meeting carries (amounts, dates, metrics, counts, decisions, action items) and the turns
that say them. No audio here: bench/suites/audio.py voices the plan, meetings.py writes it out.

Every random draw comes from a stream named after the seed and a purpose, so the content of a
seed is the same whatever the audio condition, and adding a draw in one place does not shift the
others. Topic, speaker count and prosody are balanced over blocks of seeds (`balanced`), so any
split covers them evenly.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from dataclasses import dataclass, field

from .topics import Choice, Topic
from .vocabulary import topics as _vocabulary

AREAS, DEPARTMENTS, NAMES = _vocabulary.AREAS, _vocabulary.DEPARTMENTS, _vocabulary.NAMES
TOPICS, VENDORS = _vocabulary.TOPICS, _vocabulary.VENDORS
from .voices import Voice, draw_voices

SPEAKER_COUNTS = (2, 3, 4, 5, 6)
NAMED_BY = ("introduction", "address", None)
CHAIR = 0  # speaker 0 runs the meeting
MAX_TURN_WORDS = 55  # about 20 s at espeak's pace; turns stay within 1-25 s


def stream(seed: int, purpose: str) -> random.Random:
    """A random stream for one purpose of one seed (string seeds hash the same in every process)."""
    return random.Random(f"minutia-suite/{seed}/{purpose}")


def balanced(seed: int, purpose: str, options: tuple | list):
    """An option for this seed such that every aligned block of len(options) seeds uses each
    option once (in a shuffled order): any 100 consecutive seeds cover them evenly."""
    block = seed - seed % len(options)
    order = list(options)
    random.Random(f"minutia-suite/block-{block}/{purpose}").shuffle(order)
    return order[seed % len(options)]


@dataclass
class Speaker:
    name: str
    voice: Voice
    dept: str
    area: str
    named_by: str | None  # "introduction" | "address" | None: how the meeting gives the name
    intro_text: str | None = None


@dataclass
class Turn:
    speaker: int
    text: str
    keys: list[str] = field(default_factory=list)  # facts this turn states
    kind: str = "speech"  # "speech" | "filler" (may be dropped to fit the length) | "backchannel"
    pause: float = 0.0  # silence before the turn
    overlap: float = 0.0  # > 0: starts this many seconds before the previous turn ends


@dataclass
class Fact:
    key: str
    kind: str  # amount | event | move | metric | count | choice | proposal | action | next_meeting
    speaker: int  # who states it
    data: dict


@dataclass
class Question:
    question: str
    type: str
    answer: str
    keywords: list
    evidence: str | None  # a fact key; meetings.py turns it into a turn index
    asks: str | None = None  # absent questions: what kind of answer would be made up

    def to_json(self, evidence_turn: int | None) -> dict:
        out = {"question": self.question, "type": self.type, "answer": self.answer,
               "keywords": self.keywords, "evidence_turn": evidence_turn}
        if self.asks:
            out["asks"] = self.asks
        return out


@dataclass
class MeetingSpec:
    seed: int
    topic: Topic
    title: str
    meeting_date: dt.date
    default_prosody: bool
    speakers: list[Speaker]
    facts: list[Fact]
    turns: list[Turn]
    questions: list[Question] = field(default_factory=list)

    def fact(self, key: str) -> Fact:
        return next(f for f in self.facts if f.key == key)


def estimate_seconds(text: str, voice: Voice) -> float:
    """Rough espeak duration, fitted on generated turns: ~1.3 x the -s words per minute, plus
    about 0.27 s per punctuation break."""
    n_words = len(text.split())
    breaks = len(re.findall(r"[.?!,:;]", text))
    return n_words * 60.0 / voice.speed * 0.76 + 0.27 * breaks


class Planner:
    """Builds a MeetingSpec. Methods are the steps of plan(); each draws from its own stream."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = stream(seed, "content")
        self.unused: dict[str, list] = {}  # topic entries the meeting does not use (absent questions)

    # ---- people ---------------------------------------------------------------------------
    def speakers(self) -> tuple[list[Speaker], bool]:
        rng = stream(self.seed, "speakers")
        n = balanced(self.seed, "speakers", SPEAKER_COUNTS)
        names = rng.sample(NAMES, n)
        vrng = stream(self.seed, "voices")
        default_prosody = balanced(self.seed, "prosody", (True, False))
        voices = draw_voices(vrng, n, default_prosody)
        named = [rng.choices(NAMED_BY, weights=(0.4, 0.35, 0.25))[0] for _ in range(n)]
        if not any(named):
            named[rng.randrange(n)] = rng.choice(NAMED_BY[:2])
        return [Speaker(name, voice, rng.choice(DEPARTMENTS), rng.choice(AREAS), nb)
                for name, voice, nb in zip(names, voices, named)], default_prosody

    # ---- facts ----------------------------------------------------------------------------
    def facts(self, topic: Topic, speakers: list[Speaker], meeting_date: dt.date) -> list[Fact]:
        rng = self.rng
        self._dates = self._free_dates(meeting_date)
        self._amounts: set[int] = set()
        self._owners: set[int] = set()
        kinds = ["amount", "event", "metric", "choice", "proposal", "action"]  # one question of each type
        extras = ["amount", "amount", "event", "metric", "count", "move", "proposal", "action", "action",
                  "next_meeting", "count"]
        rng.shuffle(extras)
        kinds += extras[: rng.randint(1, 8)]
        pools = {"items": rng.sample(topic.items, len(topic.items)),
                 "events": rng.sample(topic.events, len(topic.events)),
                 "metrics": rng.sample(topic.metrics, len(topic.metrics)),
                 "counts": rng.sample(topic.counts, len(topic.counts)),
                 "choices": rng.sample(topic.choices, len(topic.choices)),
                 "proposals": rng.sample(topic.proposals, len(topic.proposals)),
                 "tasks": rng.sample(topic.tasks, len(topic.tasks))}
        reporters = self._reporter_cycle(len(speakers))
        facts = []
        for i, kind in enumerate(kinds):
            if kind in ("count", "metric", "move", "choice") and not pools[self._pool_of(kind)]:
                continue
            speaker = self._owner(speakers) if kind == "action" else next(reporters)
            facts.append(getattr(self, f"_fact_{kind}")(f"{kind}{i}", speaker, pools))
        self._ensure_named_reporter(facts, speakers)
        self.unused = pools
        return facts

    @staticmethod
    def _pool_of(kind: str) -> str:
        return {"count": "counts", "metric": "metrics", "move": "events", "choice": "choices"}[kind]

    def _free_dates(self, meeting_date: dt.date) -> list[dt.date]:
        days = [meeting_date + dt.timedelta(days=d) for d in range(1, 50)]
        days = [d for d in days if d.weekday() < 5]
        self.rng.shuffle(days)
        return days

    def _reporter_cycle(self, n: int):
        """Everyone reports something; the chair less often than the others."""
        order = list(range(1, n)) or [CHAIR]
        while True:
            self.rng.shuffle(order)
            yield from order
            if self.rng.random() < 0.3:
                yield CHAIR

    def _owner(self, speakers: list[Speaker]) -> int:
        """Action items go to named people, so "who will" has an answer a listener can give;
        different people while there are some left."""
        named = [i for i, s in enumerate(speakers) if s.named_by]
        fresh = [i for i in named if i not in self._owners] or named
        owner = self.rng.choice(fresh)
        self._owners.add(owner)
        return owner

    def _ensure_named_reporter(self, facts: list[Fact], speakers: list[Speaker]) -> None:
        reported = [f for f in facts if f.kind in ("amount", "event", "metric", "count", "proposal")]
        if not any(speakers[f.speaker].named_by for f in reported):
            reported[0].speaker = self._owner(speakers)

    def _date(self) -> dt.date:
        return self._dates.pop()

    def _fact_amount(self, key, speaker, pools) -> Fact:
        item = pools["items"].pop()
        amount = self._amount()
        return Fact(key, "amount", speaker, {"item": item, "amount": amount})

    def _amount(self) -> int:
        rng = self.rng
        while True:
            amount = rng.choice([lambda: rng.randrange(3, 20) * 50, lambda: rng.randrange(1, 50) * 500,
                                 lambda: rng.randrange(10, 200) * 1000, lambda: rng.randrange(100, 1000) * 10])()
            if amount not in self._amounts:
                self._amounts.add(amount)
                return amount

    def _fact_event(self, key, speaker, pools) -> Fact:
        return Fact(key, "event", speaker, {"event": pools["events"].pop(), "date": self._date()})

    def _fact_move(self, key, speaker, pools) -> Fact:
        old, new = sorted([self._date(), self._date()])
        return Fact(key, "move", speaker, {"event": pools["events"].pop(), "old": old, "new": new})

    def _fact_next_meeting(self, key, speaker, pools) -> Fact:
        return Fact(key, "next_meeting", CHAIR, {"event": "next meeting", "date": self._date()})

    def _fact_metric(self, key, speaker, pools) -> Fact:
        m = pools["metrics"].pop()
        value = round(self.rng.uniform(m.lo, m.hi), m.decimals)
        decimals = m.decimals if value != int(value) else 0
        old = round(self.rng.uniform(m.lo, m.hi), m.decimals) if self.rng.random() < 0.4 else None
        if old == value:
            old = None
        return Fact(key, "metric", speaker, {"metric": m, "value": value, "decimals": decimals, "old": old})

    def _fact_count(self, key, speaker, pools) -> Fact:
        c = pools["counts"].pop()
        n = self.rng.randint(c.lo, c.hi)
        if n > 100 and self.rng.random() < 0.5:
            n = round(n, -1)
        return Fact(key, "count", speaker, {"count": c, "n": n})

    def _fact_choice(self, key, speaker, pools) -> Fact:
        choice: Choice = pools["choices"].pop()
        options = choice.options or VENDORS
        a, b = self.rng.sample(options, 2)
        return Fact(key, "choice", speaker, {"subject": choice.subject, "a": a, "b": b,
                                             "vendors": not choice.options})

    def _fact_proposal(self, key, speaker, pools) -> Fact:
        return Fact(key, "proposal", speaker, {"proposal": pools["proposals"].pop(),
                                               "accepted": self.rng.random() < 0.5})

    def _fact_action(self, key, speaker, pools) -> Fact:
        return Fact(key, "action", speaker, {"task": pools["tasks"].pop(), "date": self._date()})


def plan_meeting(seed: int) -> MeetingSpec:
    """The whole plan of one meeting: people, facts, turns and questions."""
    from .dialogue import Dialogue
    from .questions import figure_not_said, make_questions

    planner = Planner(seed)
    rng = planner.rng
    topic = balanced(seed, "topic", TOPICS)
    year = rng.randint(2024, 2032)
    meeting_date = _weekday_in(rng, year)
    speakers, default_prosody = planner.speakers()
    facts = planner.facts(topic, speakers, meeting_date)
    spec = MeetingSpec(seed, topic, rng.choice(topic.titles), meeting_date, default_prosody,
                       speakers, facts, [])
    spec.turns = Dialogue(spec, stream(seed, "dialogue")).build()
    spec.questions = make_questions(spec, planner.unused, stream(seed, "questions"))
    spec.questions += figure_not_said(spec, stream(seed, "questions/figure-not-said"))
    return spec


def _weekday_in(rng: random.Random, year: int) -> dt.date:
    """A working day between January and October, so that later dates stay in the same year."""
    while True:
        day = dt.date(year, 1, 1) + dt.timedelta(days=rng.randrange(4, 300))
        if day.weekday() < 5:
            return day
