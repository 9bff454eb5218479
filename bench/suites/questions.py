"""Questions about a planned meeting, with answers and keywords for bench/suites/score.py.

Keywords: a flat list means any one form must appear in a correct answer ("12,000", "twelve
thousand"); a list of lists (what_decided) means every group must be matched by one of its forms.
"absent" questions ask for something the meeting never mentions; their keywords are empty and
`asks` says what a made-up answer would contain ("amount", "date", "person", "number").
"figure_not_said" questions ask the price of something the meeting does talk about, without a price.
"""

from __future__ import annotations

import random
import re

from .vocabulary import phrases as P
from .dialogue import metric_spoken
from .plan import Fact, MeetingSpec, Question
from .spoken import agreement, date_keywords, date_written, gerund, money_keywords, number_keywords

MIN_QUESTIONS, MAX_QUESTIONS = 8, 12
MAX_ABSENT = 2
NOT_SAID = "The meeting does not say."
# Words too common to tell whether an unused topic entry came up in the meeting.
_STOP = {"with", "from", "that", "this", "their", "about", "into", "team", "update", "send", "write",
         "review", "check", "make", "order", "book", "call", "prepare", "test", "plan", "new", "final",
         "first", "second", "rate", "time", "total", "date", "day", "what", "they", "them", "more",
         "days", "last", "next", "growth", "score", "after", "before", "for"}


class QuestionMaker:
    def __init__(self, spec: MeetingSpec, rng: random.Random):
        self.spec, self.rng = spec, rng

    def _pick(self, options):
        return self.rng.choice(options)

    def _name(self, speaker: int) -> str | None:
        s = self.spec.speakers[speaker]
        return s.name if s.named_by else None

    def for_fact(self, f: Fact) -> list[Question]:
        return getattr(self, f"_q_{f.kind}")(f)

    def _who_said(self, f: Fact, np: str, key: str | None = None) -> list[Question]:
        name = self._name(f.speaker)
        if not name:
            return []
        return [Question(self._pick(P.WHO_SAID_Q).format(np=np), "who_said", name, [name], key or f.key)]

    def _q_amount(self, f: Fact) -> list[Question]:
        item, amount = f.data["item"], f.data["amount"]
        np = self._pick(("the cost of the {item}", "the price of the {item}", "the budget for the {item}"))
        return [Question(self._pick(P.HOW_MUCH_Q).format(item=item, **agreement(item)), "how_much", f"${amount:,}",
                         money_keywords(amount), f.key),
                *self._who_said(f, np.format(item=item))]

    def _when(self, text: str, day, key: str) -> Question:
        return Question(text, "when", date_written(day), date_keywords(day), key)

    def _q_event(self, f: Fact) -> list[Question]:
        event = f.data["event"]
        return [self._when(self._pick(P.WHEN_Q).format(event=event), f.data["date"], f.key),
                *self._who_said(f, f"the date of the {event}")]

    def _q_next_meeting(self, f: Fact) -> list[Question]:
        text = self._pick(P.NEXT_MEETING_Q)
        return [self._when(text, f.data["date"], f.key)]

    def _q_move(self, f: Fact) -> list[Question]:
        event, new = f.data["event"], f.data["new"]
        return [self._when(self._pick(P.WHEN_NOW_Q).format(event=event), new, f.key),
                Question(self._pick(P.DECIDED_MOVE_Q).format(event=event), "what_decided",
                         f"Move the {event} to {date_written(new)}.", [date_keywords(new)], f.key)]

    def _q_metric(self, f: Fact) -> list[Question]:
        m, value = f.data["metric"], f.data["value"]
        decimals = m.decimals if value != int(value) else 0
        unit = "percent" if m.unit == "percent" else m.unit
        return [Question(self._pick(P.METRIC_Q).format(metric=m.name), "metric", metric_spoken(m, value),
                         number_keywords(value, decimals, unit), f.key),
                *self._who_said(f, f"the {m.name}")]

    def _q_count(self, f: Fact) -> list[Question]:
        c, n = f.data["count"], f.data["n"]
        return [Question(self._pick(c.questions), "how_many", f"{n:,}", number_keywords(n), f.key),
                *self._who_said(f, f"the number of {c.noun}")]

    def _q_choice(self, f: Fact) -> list[Question]:
        d = f.data
        return [Question(self._pick(P.DECIDED_Q).format(subject=d["subject"]), "what_decided", d["decision"],
                         [list(d["b"])], f.key)]

    def _q_proposal(self, f: Fact) -> list[Question]:
        d = f.data
        yes = Question(self._pick(P.YES_NO_Q).format(proposal=d["proposal"]), "yes_no",
                       "Yes." if d["accepted"] else "No.", ["yes"] if d["accepted"] else ["no"], f.key)
        name = self._name(f.speaker)
        who = [Question(self._pick(P.WHO_PROPOSED_Q).format(proposal=d["proposal"]), "who_said", name, [name],
                        f.key + ":propose")] if name else []
        return [yes, *who]

    def _q_action(self, f: Fact) -> list[Question]:
        task, owner = f.data["task"], self.spec.speakers[f.speaker].name
        return [Question(self._pick(P.WHO_WILL_Q).format(task=task, gerund=gerund(task)), "who_will", owner,
                         [owner], f.key),
                self._when(self._pick(P.DUE_Q).format(task=task, gerund=gerund(task)), f.data["date"], f.key)]

    # ---- absent -------------------------------------------------------------------------------
    def absent(self, unused: dict) -> list[Question]:
        """Plausible questions about topic entries that no turn mentions."""
        text = " ".join(t.text for t in self.spec.turns)
        out = []
        kinds = [("items", P.ABSENT_AMOUNT_Q, "amount", lambda x: {"item": x, **agreement(x)}),
                 ("events", P.ABSENT_WHEN_Q, "date", lambda x: {"event": x}),
                 ("tasks", P.ABSENT_WHO_Q, "person", lambda x: {"task": x, "gerund": gerund(x)}),
                 ("metrics", P.ABSENT_METRIC_Q, "number", lambda m: {"metric": m.name})]
        for pool, templates, asks, fields in kinds:
            for entry in unused[pool]:
                phrase = getattr(entry, "name", entry)
                if not mentioned(phrase, text):
                    out.append(Question(self._pick(templates).format(**fields(entry)), "absent", NOT_SAID, [],
                                        None, asks))
                    break
        return out


def figure_not_said(spec: MeetingSpec, rng: random.Random) -> list[Question]:
    """One question asking the price of an event or task the meeting talks about without a price (type
    "figure_not_said"; the right answer says the meeting does not say). Drawn from its own random stream and
    added after the others, so a meeting's other questions stay what they were before this type existed."""
    priced = " ".join(f.data["item"] for f in spec.facts if f.kind == "amount")
    options = []
    for f in spec.facts:
        if f.kind in ("event", "move") and not mentioned(f.data["event"], priced):
            options.append(rng.choice(P.FIGURE_NOT_SAID_EVENT_Q).format(event=f.data["event"]))
        elif f.kind == "action" and not mentioned(f.data["task"], priced):
            task = f.data["task"]
            options.append(rng.choice(P.FIGURE_NOT_SAID_TASK_Q).format(task=task, gerund=gerund(task)))
    if not options:
        return []
    return [Question(rng.choice(options), "figure_not_said", NOT_SAID, [], None, "amount")]


def mentioned(phrase: str, text: str) -> bool:
    """Whether any telling word of `phrase` (or its singular/plural) occurs in `text`."""
    said = {w.rstrip("s") for w in re.findall(r"[a-z]+", text.lower())}
    telling = [w.rstrip("s") for w in re.findall(r"[a-z]+", phrase.lower()) if len(w) >= 4 and w not in _STOP]
    return not telling or any(w in said for w in telling)


def make_questions(spec: MeetingSpec, unused: dict, rng: random.Random) -> list[Question]:
    """8-12 questions: one of every type the meeting supports (absent always), then more at random."""
    maker = QuestionMaker(spec, rng)
    pool = [q for f in spec.facts for q in maker.for_fact(f)]
    absent = maker.absent(unused)
    if not absent:
        raise RuntimeError(f"seed {spec.seed}: no absent question possible")
    rng.shuffle(pool)
    rng.shuffle(absent)
    n = rng.randint(MIN_QUESTIONS, MAX_QUESTIONS)
    types = sorted({q.type for q in pool})
    rng.shuffle(types)
    picked = [absent.pop()] + [next(q for q in pool if q.type == t) for t in types]
    rest = [q for q in pool if q not in picked] + absent[: MAX_ABSENT - 1]
    rng.shuffle(rest)
    picked = (picked + rest)[:n]
    rng.shuffle(picked)
    return picked
