"""Turn a meeting's facts into turns: an opening, introductions, one short exchange per fact (with
prompts and thanks that name people), action items, a closing; then small talk to reach the target
length, merged same-speaker turns, back-channels, pauses and a few overlaps.

Naming rules (what facts.json's `named_by` promises): an "introduction" speaker says their own name
in their first speech turn; an "address" speaker never does, but is addressed by name at least once
("Wei, can you give us the numbers?", "Thanks, Wei."); a speaker with None is never named.
"""

from __future__ import annotations

import random

from .vocabulary import phrases as P
from .plan import CHAIR, MAX_TURN_WORDS, Fact, MeetingSpec, Turn, estimate_seconds
from .spoken import agreement, capitalize, date_spoken, money_spoken, number_words, words

MIN_SECONDS, MAX_SECONDS = 50.0, 135.0  # planned length; the written meeting stays within 45-150 s


class Dialogue:
    def __init__(self, spec: MeetingSpec, rng: random.Random):
        self.spec, self.rng = spec, rng
        self.sp = spec.speakers
        self.turns: list[Turn] = []
        self.boundaries: set[int] = set()  # turn counts at which a filler may be inserted
        self.introduced: set[int] = set()
        self.addressed: set[int] = set()
        self.used_fillers: set[str] = set()

    def build(self) -> list[Turn]:
        self._opening()
        self._intro_round()
        middle = [f for f in self.spec.facts if f.kind not in ("action", "next_meeting")]
        self.rng.shuffle(middle)
        for fact in middle:
            self._exchange(fact)
        self._make_everyone_heard()
        for fact in self.spec.facts:
            if fact.kind in ("action", "next_meeting"):
                self._exchange(fact)
        self._closing()
        self._merge_same_speaker()
        self._add_fillers(self.rng.uniform(MIN_SECONDS, MAX_SECONDS))
        self._add_backchannels()
        self._add_timing()
        return self.turns

    # ---- saying things ------------------------------------------------------------------------
    def say(self, speaker: int, text: str, keys: tuple[str, ...] = (), kind: str = "speech",
            intro_last: bool = False) -> None:
        """Append a turn; a not yet introduced "introduction" speaker adds their introduction
        (before the text, or after it for a reply such as "Thanks, Wei.")."""
        s = self.sp[speaker]
        if kind == "speech" and s.named_by == "introduction" and speaker not in self.introduced:
            s.intro_text = self._pick(P.INTROS).format(name=s.name, dept=s.dept, area=s.area)
            self.introduced.add(speaker)
            text = f"{text} {s.intro_text}" if intro_last else f"{s.intro_text} {text}"
        text = " ".join(capitalize(x) for x in _sentences(text.strip()))
        self.turns.append(Turn(speaker, text, list(keys), kind))

    def _segment_end(self) -> None:
        self.boundaries.add(len(self.turns))

    def _pick(self, options):
        return self.rng.choice(options)

    def _nameable(self, speaker: int) -> bool:
        nb = self.sp[speaker].named_by
        return nb == "address" or (nb == "introduction" and speaker in self.introduced)

    def _name(self, speaker: int) -> str:
        self.addressed.add(speaker)
        return self.sp[speaker].name

    def _other(self, speaker: int, prefer_not_chair: bool = True) -> int:
        others = [i for i in range(len(self.sp)) if i != speaker]
        if prefer_not_chair and len(others) > 1:
            others = [i for i in others if i != CHAIR]
        return self._pick(others)

    def _filler(self, reactions: bool = False) -> str | None:
        """Small talk nobody asks about; reactions only where a turn stands on its own."""
        pool = (*self.spec.topic.fillers, *P.GENERIC_REMARKS, *(P.REACTIONS if reactions else ()))
        pool = [f for f in pool if f not in self.used_fillers]
        if not pool:
            return None
        text = self._pick(pool)
        self.used_fillers.add(text)
        return text

    def _maybe_more(self, text: str, p: float = 0.25) -> str:
        """Sometimes a speaker goes on after the fact: longer, multi-sentence turns."""
        extra = self._filler() if self.rng.random() < p else None
        return f"{text} {extra}" if extra else text

    def _date(self, day) -> str:
        return date_spoken(day, british=self.rng.random() < 0.3)

    # ---- meeting frame ------------------------------------------------------------------------
    def _opening(self) -> None:
        self.say(CHAIR, self._pick(P.OPENINGS).format(title=self.spec.title))
        if self.sp[CHAIR].named_by == "address":
            other = self._other(CHAIR)
            self.say(other, self._pick(P.THANKS_NAMED).format(name=self._name(CHAIR)), intro_last=True)
        self._segment_end()

    def _intro_round(self) -> None:
        waiting = [i for i, s in enumerate(self.sp) if s.named_by == "introduction" and i not in self.introduced]
        if len(waiting) < 2 or self.rng.random() < 0.5:
            return
        self.say(CHAIR, self._pick(P.INTRO_ROUND))
        for i in waiting:
            self.say(i, self._maybe_more("", 0.3))
        self._segment_end()

    def _closing(self) -> None:
        self.say(CHAIR, self._pick(P.CLOSINGS))
        if self.rng.random() < 0.6:
            other = self._other(CHAIR, prefer_not_chair=False)
            if self._nameable(CHAIR) and self.rng.random() < 0.6:
                self.say(other, self._pick(P.THANKS_NAMED).format(name=self._name(CHAIR)))
            else:
                self.say(other, self._pick(P.CLOSING_REPLIES))
        self._segment_end()

    def _make_everyone_heard(self) -> None:
        """Anyone not yet heard, or an "address" speaker not yet named, gets asked for an opinion."""
        spoken = {t.speaker for t in self.turns}
        for i in range(1, len(self.sp)):
            if i in spoken and (self.sp[i].named_by != "address" or i in self.addressed):
                continue
            if self._nameable(i) or self.sp[i].named_by == "address":
                self.say(CHAIR, self._pick(P.OPINION_PROMPTS).format(name=self._name(i)))
            else:
                self.say(CHAIR, self._pick(P.OTHERS_PROMPTS))
            self.say(i, self._filler(reactions=True) or P.AGREE)
            self._segment_end()

    # ---- one exchange per fact ----------------------------------------------------------------
    def _exchange(self, fact: Fact) -> None:
        s = fact.speaker
        if s != CHAIR and fact.kind != "action":
            self._prompt(s, numbers=fact.kind in ("amount", "metric", "count"))
        getattr(self, f"_say_{fact.kind}")(fact)
        last = self.turns[-1].speaker
        if last == s != CHAIR and fact.kind != "action" and self.rng.random() < 0.4:
            self._thanks(s)
        self._segment_end()

    def _prompt(self, s: int, numbers: bool) -> None:
        must = self.sp[s].named_by == "address" and s not in self.addressed
        if must or (self._nameable(s) and self.rng.random() < 0.35):
            pool = P.NUMBERS_PROMPTS if numbers and self.rng.random() < 0.5 else P.ADDRESS_PROMPTS
            self.say(CHAIR, self._pick(pool).format(name=self._name(s)))
        elif self.rng.random() < 0.45:
            self.say(CHAIR, self._pick(P.PLAIN_PROMPTS))

    def _thanks(self, s: int) -> None:
        if self._nameable(s) and self.rng.random() < 0.6:
            self.say(CHAIR, self._pick(P.THANKS_NAMED).format(name=self._name(s)))
        else:
            self.say(CHAIR, self._pick(P.THANKS_PLAIN))

    def _say_amount(self, f: Fact) -> None:
        item = f.data["item"]
        text = self._pick(P.AMOUNT).format(item=item, amount=money_spoken(f.data["amount"]), **agreement(item))
        self.say(f.speaker, self._maybe_more(text), (f.key,))

    def _say_event(self, f: Fact) -> None:
        text = self._pick(P.EVENT).format(event=f.data["event"], date=self._date(f.data["date"]))
        self.say(f.speaker, self._maybe_more(text), (f.key,))

    def _say_next_meeting(self, f: Fact) -> None:
        self.say(CHAIR, self._pick(P.NEXT_MEETING).format(date=self._date(f.data["date"])), (f.key,))

    def _say_metric(self, f: Fact) -> None:
        d = f.data
        text = self._pick(P.METRIC).format(metric=d["metric"].name, value=metric_spoken(d["metric"], d["value"]))
        if d["old"] is not None:
            text += self._pick(P.METRIC_PREVIOUS).format(old=metric_spoken(d["metric"], d["old"]))
        self.say(f.speaker, self._maybe_more(text), (f.key,))

    def _say_count(self, f: Fact) -> None:
        text = self._pick(f.data["count"].statements).format(n=words(f.data["n"]))
        self.say(f.speaker, self._maybe_more(text), (f.key,))

    def _say_choice(self, f: Fact) -> None:
        d = f.data
        a, b = d["a"][0], d["b"][0]
        pool = P.CHOICE_OPTIONS + (P.CHOICE_VENDOR_OPTIONS if d["vendors"] else ())
        self.say(f.speaker, self._pick(pool).format(subject=d["subject"], a=a, b=b), (f.key + ":options",))
        critic = self._other(f.speaker)
        self.say(critic, self._pick(P.CHOICE_OPINION).format(a=a, b=b))
        decider = CHAIR if f.speaker != CHAIR else critic
        d["decision"] = self._pick(P.CHOICE_DECIDE).format(b=b, subject=d["subject"])
        self.say(decider, d["decision"], (f.key,))

    def _say_move(self, f: Fact) -> None:
        d = f.data
        self.say(f.speaker, self._pick(P.MOVE_OLD).format(event=d["event"], old=self._date(d["old"])),
                 (f.key + ":old",))
        decider = CHAIR if f.speaker != CHAIR else self._other(CHAIR)
        d["decision"] = self._pick(P.MOVE_DECIDE).format(event=d["event"], new=self._date(d["new"]))
        self.say(decider, d["decision"], (f.key,))

    def _say_proposal(self, f: Fact) -> None:
        d = f.data
        self.say(f.speaker, self._pick(P.PROPOSE).format(proposal=d["proposal"]), (f.key + ":propose",))
        responder = CHAIR if f.speaker != CHAIR else self._other(CHAIR)
        reply = self._pick(P.ACCEPT if d["accepted"] else P.REJECT).format(proposal=d["proposal"])
        self.say(responder, reply, (f.key,))

    def _say_action(self, f: Fact) -> None:
        owner, task, date = f.speaker, f.data["task"], self._date(f.data["date"])
        forms = ["self"] + (["volunteer"] if owner != CHAIR else [])
        forms += ["assign", "assign"] if owner != CHAIR and self._nameable(owner) else []
        form = self._pick(forms)
        f.data["form"] = form
        if form == "assign":
            self.say(CHAIR, self._pick(P.ASSIGN).format(name=self._name(owner), task=task, date=date), (f.key,))
            self.say(owner, self._pick(P.ASSIGN_REPLY), (f.key + ":reply",))
        elif form == "volunteer":
            self.say(CHAIR, self._pick(P.VOLUNTEER_ASK).format(task=task))
            self.say(owner, self._pick(P.VOLUNTEER).format(task=task, date=date), (f.key,))
        else:
            self.say(owner, self._pick(P.SELF_ACTION).format(task=task, date=date), (f.key,))

    # ---- shaping ------------------------------------------------------------------------------
    def _merge_same_speaker(self) -> None:
        """Consecutive speech by one speaker becomes one turn while it stays under ~20 s."""
        merged: list[Turn] = []
        bounds: set[int] = set()
        for i, t in enumerate(self.turns):
            prev = merged[-1] if merged else None
            if prev and prev.speaker == t.speaker and prev.kind == t.kind == "speech" \
                    and len(prev.text.split()) + len(t.text.split()) <= MAX_TURN_WORDS:
                prev.text += " " + t.text
                prev.keys += t.keys
                bounds.discard(len(merged))
            else:
                merged.append(t)
            if i + 1 in self.boundaries:
                bounds.add(len(merged))
        self.turns, self.boundaries = merged, bounds

    def _estimate(self) -> float:
        return sum(estimate_seconds(t.text, self.sp[t.speaker].voice) + 0.45 for t in self.turns)

    def _add_fillers(self, target: float) -> None:
        """Small talk between exchanges until the planned length, at most one per gap, by someone
        other than the neighbours; these turns may be dropped later to fit the length."""
        gaps = sorted(b for b in self.boundaries if b < len(self.turns))
        self.rng.shuffle(gaps)
        while gaps and self._estimate() < target:
            text = self._filler(reactions=True)
            if text is None:
                return
            if self.rng.random() < 0.4:
                text = f"{text} {self._filler() or ''}".strip()
            at = gaps.pop()
            near = {self.turns[at - 1].speaker, self.turns[at].speaker}
            fits = [i for i in range(len(self.sp)) if self._heard_before(i, at)]
            speaker = self._pick([i for i in fits if i not in near] or fits)
            self.turns.insert(at, Turn(speaker, text, [], "filler"))
            gaps = [g + (g >= at) for g in gaps]

    def _heard_before(self, speaker: int, at: int) -> bool:
        """A filler by an "introduction" speaker must come after their introduction."""
        if self.sp[speaker].named_by != "introduction":
            return True
        return any(t.speaker == speaker for t in self.turns[:at])

    def _add_backchannels(self) -> None:
        names = [s.name for s in self.sp]
        spots = [i for i, t in enumerate(self.turns[:-1]) if t.kind != "backchannel"
                 and not t.text.endswith("?") and len(t.text.split()) >= 6
                 and not any(n in t.text for n in names)]
        for i in sorted(self.rng.sample(spots, min(len(spots), self.rng.randint(1, 4))), reverse=True):
            around = {self.turns[i].speaker, self.turns[i + 1].speaker}
            who = [s for s in range(len(self.sp)) if s not in around] or \
                  [s for s in range(len(self.sp)) if s != self.turns[i].speaker]
            self.turns.insert(i + 1, Turn(self._pick(who), self._pick(P.BACKCHANNELS), [], "backchannel"))

    def _add_timing(self) -> None:
        """Pauses of 0-0.8 s; in about a third of meetings 1-3 turns start 0.2-1.0 s early."""
        for t in self.turns[1:]:
            t.pause = round(self.rng.uniform(0.0, 0.8), 2)
        if self.rng.random() >= 0.4:  # some drawn meetings have no spot for one
            return
        names = [s.name for s in self.sp]
        spots = [i for i in range(1, len(self.turns))
                 if self.turns[i - 1].speaker != self.turns[i].speaker and self.turns[i].kind != "backchannel"
                 and self.turns[i - 1].kind != "backchannel" and not self.turns[i - 1].keys
                 and len(self.turns[i - 1].text.split()) >= 5
                 and not any(n in self.turns[i - 1].text for n in names)]
        for i in self.rng.sample(spots, min(len(spots), self.rng.randint(1, 3))):
            self.turns[i].overlap = round(self.rng.uniform(0.2, 1.0), 2)


def metric_spoken(metric, value: float) -> str:
    decimals = metric.decimals if value != int(value) else 0
    unit = "percent" if metric.unit == "percent" else metric.unit
    return f"{number_words(value, decimals)} {unit}"


def _sentences(text: str) -> list[str]:
    """Split after . ? ! so each sentence can be capitalised (numbers in words start some)."""
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch in ".?!" and (i + 1 == len(text) or text[i + 1] == " "):
            out.append(text[start:i + 1].strip())
            start = i + 1
    tail = text[start:].strip()
    return [s for s in out + [tail] if s]
