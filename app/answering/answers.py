"""Answer a question about a meeting from what the meeting says, and say so when it says nothing.

The question's type picks how it is answered (app/answering/questions.py):
- amounts, dates and metrics: the entity of that kind in the best supporting sentence, the one
  nearest the words the question is about (app/answering/figure_reader.py, figures.py), or in a line said just
  after one that names its topic;
- "who will": the owner of the matching action item (app/answering/actions.py), else whom a line's grammar has do
  the task (app/answering/agents.py), else who committed in the best sentence; "who said": the speaker of the best
  sentence;
- "what was decided": the matching decision; yes/no: the best sentence, negated or contradicted;
- a request for a summary ("Summarize the discussion about X", "What did X think of Y?"): the passage
  about it as a few lines of minutes (app/answering/focused.py), or the topics' central sentences for the whole meeting;
- anything else: the words of the best sentences that answer it (app/answering/span_reader.py), else the
  language model, given the best sentences, and kept only when its answer is supported by them, else the best
  sentences themselves.
A question whose focus words the meeting never mentions (lexically or by meaning) is not answered:
the answer says the meeting does not say. Every answer cites the sentences it rests on.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, NamedTuple, Sequence

from app.answering.actions import Decision, extract_decisions
from app.answering.figure_reader import OTHER_EVENTS, FigureReader
from app.answering.figures import ASKS_A_FIGURE, ONLY_A_FIGURE, WANTED, contradicts
from app.answering.focused import FocusedSummarizer, FocusedSummary
from app.answering.checks import checked
from app.answering.choice import alternatives, choose
from app.answering.injection import speaks_to_the_model
from app.answering.key_phrases import KeyPhrase, key_phrases
from app.answering.meeting_record import MeetingAsk, attendees, duration, leader, meeting_ask, purpose, spoke_most
from app.answering.people import People, committer
from app.answering.polarity import NEGATION
from app.answering.question_parse import asked_events, asks_what_one_will_do
from app.answering.asked import split_questions
from app.answering.questions import Question, QuestionType, content_words, parse_question
from app.answering.rerank import Reranker
from app.answering.retrieval import Embedder, Hit, SentenceIndex, stems
from app.answering.span_reader import SpanReader
from app.answering.support import Support, coverage
from app.answering.spoken import capitalise, no_repeats, tidy, uncapitalise
from app.text.sentences import Sentence, split_sentences
from app.text.transcript import SLIDE_SPEAKER, Transcript, format_time, unsure_words

NOT_IN_MEETING = "The meeting does not say."

# "..., or not?" offers both answers; it does not negate what is asked.
_OR_NOT = re.compile(r",?\s*\bor not\b", re.IGNORECASE)


@dataclass(frozen=True)
class Citation:
    turn_index: int
    speaker: str
    start: float | None
    text: str
    unsure: tuple[str, ...] = ()  # its words the recogniser heard with low confidence (app.text.transcript.UNSURE)
    check: str = ""  # what says the opposite of the line (a slide, the question): it may have lost a "not"

    @property
    def label(self) -> str:
        return f"[{format_time(self.start)}]" if self.start is not None else f"[turn {self.turn_index + 1}]"


@dataclass
class Answer:
    question: str
    text: str
    citations: list[Citation]
    parts: int  # how many transcript parts were read (1 = the whole transcript in one pass)
    confidence: float
    kind: str = "other"  # the question's type, as understood
    asked: list["Answer"] = field(default_factory=list)  # one per question when a message asked several

    def to_dict(self) -> dict:
        return {**asdict(self), "citations": [{**asdict(c), "label": c.label} for c in self.citations],
                "asked": [a.to_dict() for a in self.asked]}


# (question, evidence sentences) -> the model's Reading (or just its text and confidence 0-1), or None if it has none.
Generate = Callable[[str, Sequence[Sentence]], "Reading | tuple[str, float] | None"]


class Reading(NamedTuple):
    """What a reader (the LLM) made of the evidence: its answer, how sure it was (0-1), and how many parts of the
    transcript it read to give it (1: the whole in one pass)."""

    text: str
    confidence: float
    parts: int = 1


@dataclass(frozen=True)
class AnswerOptions:
    """Thresholds, chosen on the development seeds of bench/suites (never on the evaluation seeds)."""

    top_k: int = 8
    min_focus_coverage: float = 0.6  # share of the question's focus stems a supporting sentence must hold
    min_dense: float = 0.62  # or a cosine this high between question and sentence
    near_best: float = 0.6  # hits within this share of the best score compete for the entity
    heard_alike: float = 80.0  # a focus word counts as said when a word (or two run together) is this close in
    # spelling (RapidFuzz ratio, 0-100), at half weight: the recogniser hears "data storage" as "latest story"
    # When no single line says most of the question, the meeting still answers it if it says this share of the
    # question's focus (weighted by rarity) somewhere: people ask in their own words, and a line seldom repeats
    # all of them. A question about something the meeting never mentions says none of it.
    min_meeting_coverage: float = 0.34
    answer_lines: int = 2  # lines quoted when the reader gives no answer of its own
    # The span reader's answer is given when its best span beats "no answer here" by this much (start + end
    # logits); below it, the lines are read by the model or quoted.
    min_span_margin: float = 0.0


# A pronoun that points back at a topic said before the question ("the vendor contract, is it signed?").
_POINTS_BACK = re.compile(r"\b(?:it|its|that|this|those|these|them)\b"
                          r"(?!\s+(?:time|week|month|year|quarter|morning|afternoon|evening|round)\b)", re.IGNORECASE)
# Words of courtesy a meeting says too ("Thank you, Bob."): never what a question is about.
_COURTESY = frozenset("thanks thank thx please pls sorry hi hey hello morning afternoon evening cheers bye welcome "
                      "great ok okay first second third things thing questions question quick".split())


class AnswerFinder:
    """One meeting's sentences, indexed once; answers any number of questions about it."""

    def __init__(self, transcript: Transcript, embedder: Embedder | None = None, generate: Generate | None = None,
                 options: AnswerOptions | None = None, reranker: Reranker | None = None,
                 quote_reranker: Reranker | None = None, span_reader: SpanReader | None = None):
        """``reranker`` orders the lines for answers that take a person, a date or a figure from them;
        ``quote_reranker`` (default: the same) orders them for every other answer, which gives the lines
        themselves (app/answering/cross_rank.py: the line that answers in other words); ``span_reader`` takes
        the words that answer out of those lines."""
        self.transcript = transcript
        self.options = options or AnswerOptions()
        self.sentences = split_sentences(transcript)
        self.index = SentenceIndex(self.sentences, embedder, reranker=reranker)
        self.quote_reranker = quote_reranker
        self.span_reader = span_reader
        self.generate = generate
        self.people = People(transcript, self.sentences)
        self._decisions: list[Decision] | None = None
        self.support = Support(self.sentences, self.options)
        self.figures = FigureReader(self.sentences, self.index)
        self._focused: FocusedSummarizer | None = None
        self._phrases: list[KeyPhrase] | None = None

    # ------------------------------------------------------------------ entry point
    def answer(self, question: str) -> Answer:
        """The answer to ``question``; a message that asks two things ("How much will it cost, and when does it
        start?") gets each answered in turn, after the question it answers."""
        asked = split_questions(question)
        if len(asked) == 1:
            return self._answer_one(asked[0])  # as split: a line that asks nothing ends the question before it
        answers = [self._answer_one(part) for part in asked]
        text = " ".join(f"{a.question.rstrip('?.! ')}? {a.text.rstrip()}{'' if a.text.rstrip()[-1:] in '.!?' else '.'}"
                        for a in answers)
        citations = list({(c.turn_index, c.text): c for a in answers for c in a.citations}.values())
        return Answer(" ".join(a.question for a in answers), text, citations, 1,
                      min(a.confidence for a in answers), answers[0].kind, answers)

    def _answer_one(self, question: str) -> Answer:
        q = self._with_aside(parse_question(question))
        answer = self._read(q)
        return replace(answer, citations=[checked(c, q, self.transcript) for c in answer.citations])

    def _read(self, q: Question) -> Answer:
        about = meeting_ask(q.text, self.index.embedder)
        if about is not None:
            return self._about_meeting(q, about)
        if q.type is QuestionType.SUMMARY and not q.focus:
            return self._whole_meeting(q)
        person = asks_what_one_will_do(q.text)
        tasks = self._tasks_of(q, person) if person else None
        if tasks is not None:
            return tasks
        # A person, a date or a figure is taken from lines that share the question's words (the retriever's score
        # keeps its share of the order); an answer that quotes lines needs the line that answers, in any words.
        takes_a_value = q.type in WANTED or q.type in (QuestionType.WHO_WILL, QuestionType.WHO_SAID)
        found_hits = self.index.search(q.text, self.options.top_k,
                                       reranker=None if takes_a_value else self.quote_reranker)
        chosen = self._chosen(q, found_hits)  # the options are what it is about: a line naming one may settle it
        if chosen is not None:
            return chosen
        hits = [h for h in found_hits if self.support.supports(q, h)] or self.support.said_in_meeting(q, found_hits)
        if not hits:
            return Answer(q.text, NOT_IN_MEETING, [], 1, 0.0, q.type.value)
        if q.type is QuestionType.SUMMARY:
            return self._summary_about(q, round(max(h.score for h in hits), 3))
        by_type = {
            QuestionType.WHO_WILL: self._who_will,
            QuestionType.WHO_SAID: self._who_said,
            QuestionType.WHAT_DECIDED: self._decided,
            QuestionType.YES_NO: self._yes_no,
        }
        if q.type in WANTED:
            # An amount or count that no supporting line gives is not in the meeting: a line about the topic
            # without it ("the new customer website" for "how much does the website cost?") is no answer. (A
            # "when" is often said without a date - "after the launch" - so that falls back to the best line.)
            found = self.figures.read(q, hits)
            if found is None:  # the figure may come a few lines after the line that names its topic
                later = self.figures.read(q, self.support.after_its_topic(q, found_hits))
                found = later if isinstance(later, tuple) else None
            if found is OTHER_EVENTS:  # "When does the pilot start?", where only the test plan for it has a date
                return Answer(q.text, NOT_IN_MEETING, [], 1, 0.0, q.type.value)
            if found is None and q.type in ONLY_A_FIGURE and ASKS_A_FIGURE.search(q.text):
                return Answer(q.text, NOT_IN_MEETING, [], 1, 0.0, q.type.value)
        else:
            found = by_type.get(q.type, self._free_form)(q, hits)
        if found is None:
            found = self._free_form(q, hits)
        text, evidence, *read = found  # a free-form answer also says how many parts its reader read
        confidence = round(max(h.score for h in hits), 3)
        return Answer(q.text, no_repeats(text), [self._cite(s) for s in evidence], read[0] if read else 1, confidence,
                      q.type.value)

    def _chosen(self, q: Question, hits: list[Hit]) -> Answer | None:
        """A question offering options ("blue or green?"): the option the best line naming one settles on
        (app/answering/choice.py); None when it offers none or no line settles it."""
        options = alternatives(q.text)
        if not options:
            return None
        about = set(stems(q.text)) - set(stems(" ".join(options)))  # what the choice is about ("the launch")
        for hit in hits[:3]:
            sentence = self.sentences[hit.index]
            picked = choose(options, sentence.text)
            named = [o for o in options if set(stems(o)) <= set(stems(sentence.text))]
            if picked is not None and len(named) == 1 and about and not about & set(stems(sentence.text)):
                continue  # one option named in passing ("May I add something?") settles nothing
            if picked is not None:
                return Answer(q.text, f"{capitalise(picked)}.", [self._cite(sentence)], 1, round(hit.score, 3),
                              q.type.value)
        return None

    def _with_aside(self, q: Question) -> Question:
        """A question that does not say what it is about ("for the launch, what is the budget?") or points back at
        it ("the vendor contract, is it signed?") is about the words around it that the meeting says; the rest
        ("sorry to bother you", "for my notes") is how it was asked. A question with a topic of its own keeps to
        it."""
        if q.focus and not _POINTS_BACK.search(q.text):
            return q
        said = tuple(w for w in q.aside if w not in _COURTESY
                     and any(self.support.idf(st) < self.support.idf("\x00") for st in stems(w)))
        if not said:
            return q
        return replace(q, text=f"{q.text.rstrip('?.! ')} ({', '.join(said)})?", focus=q.focus + said)

    def _about_meeting(self, q: Question, about: MeetingAsk) -> Answer:
        """Who attended, who led it, what it was for: from the whole record (app/answering/meeting_record.py)."""
        if about is MeetingAsk.ATTENDEES:
            text, evidence = attendees(self.transcript, self.sentences)
        elif about is MeetingAsk.LEADER:
            text, evidence = leader(self.transcript, self.sentences)
        elif about in (MeetingAsk.SPOKE_MOST, MeetingAsk.SPOKE_LEAST):
            text, evidence = spoke_most(self.transcript, self.sentences, least=about is MeetingAsk.SPOKE_LEAST)
        elif about is MeetingAsk.DURATION:
            text, evidence = duration(self.transcript, self.sentences)
        else:
            found = self._summarizer().whole(self.transcript)
            asked = set(stems(q.text))  # "the meeting" is no answer to what the meeting was about
            if self._phrases is None:  # a parse of the whole meeting: once per finder
                self._phrases = key_phrases((s.text for s in self.sentences if s.speaker != SLIDE_SPEAKER), k=9)
            phrases = [p.text for p in self._phrases if not set(stems(p.text)) <= asked][:6]
            text, evidence = purpose(phrases, sorted(found.sentences, key=lambda s: s.turn_index) if found else [])
            text = tidy(text)
        if not text:
            return Answer(q.text, NOT_IN_MEETING, [], 1, 0.0, about.value)
        return Answer(q.text, text, [self._cite(s) for s in evidence], 1, 1.0, about.value)

    # ------------------------------------------------------------------ support
    def _competing(self, hits: list[Hit]) -> list[Hit]:
        best = hits[0].score
        return [h for h in hits if h.score >= self.options.near_best * best]

    # ------------------------------------------------------------------ by type
    def _who_will(self, q: Question, hits: list[Hit]) -> tuple[str, list[Sentence]] | None:
        focus = set(stems(" ".join(q.focus)))
        scored = []
        for item in self.people.items:
            task = set(stems(item.task))
            if focus and task:
                scored.append((len(focus & task) / len(focus), item))
        scored.sort(key=lambda s: -s[0])
        if scored and scored[0][0] >= self.options.min_focus_coverage:
            item = scored[0][1]
            if item.owner != "the team":
                evidence = self.people.said(item) or self.sentences[hits[0].index]
                owner = self.people.speaker(evidence, q.text) if item.owner == evidence.speaker else item.owner
                due = f" by {item.due}" if item.due else ""
                return f"{owner} (will {item.task}{due}).", [evidence]
        # the task: the question's verbs ("ordering"), not its nouns ("call")
        task = " ".join(e for e in asked_events(q.text) if set(stems(e)) & focus)
        for hit in self._competing(hits):  # whom the line's grammar has do the task ("I've put you down to ...")
            sentence = self.sentences[hit.index]
            doer = self.people.task_doer(sentence, q.text, task) if task else None
            if doer:
                return f"{doer}.", [sentence]
        for hit in self._competing(hits):
            sentence = self.sentences[hit.index]
            owner = committer(sentence, self.transcript.speakers)
            if owner:
                return f"{self.people.speaker(sentence, q.text) if owner == sentence.speaker else owner}.", [sentence]
        # Nobody commits in so many words: who the best line has do it.
        sentence = self.sentences[hits[0].index]
        return f"{self.people.doer(sentence, q.text)}.", [sentence]

    def _tasks_of(self, q: Question, person: str) -> Answer | None:
        """"What should Anna do next?": the action items Anna took or was given, in the order said; None when the
        meeting gives her none (the question is then searched as any other)."""
        theirs = [i for i in self.people.items if i.owner.strip("[]").lower() == person.lower()
                  and len(content_words(i.task)) >= 2]  # "I'll find it" is no task to report
        if not theirs:
            return None
        evidence = [s for s in (self.people.said(i) for i in theirs) if s is not None]
        tasks = "; ".join(f"{uncapitalise(tidy(i.task) or i.task)}{f' by {i.due}' if i.due else ''}" for i in theirs)
        return Answer(q.text, f"{person} will {tasks}.", [self._cite(s) for s in evidence], 1, 1.0,
                      QuestionType.WHO_WILL.value)

    def _who_said(self, q: Question, hits: list[Hit]) -> tuple[str, list[Sentence]]:
        """Who said it: the best-covering sentence; for an idea or suggestion, the first one proposing it."""
        ranked = sorted(hits, key=lambda h: -coverage(q, self.sentences[h.index]))
        best = coverage(q, self.sentences[ranked[0].index])
        top = [self.sentences[h.index] for h in ranked if coverage(q, self.sentences[h.index]) >= best]
        if _ASKS_IDEA.search(q.text):
            proposals = [s for s in top if _PROPOSAL.search(s.text)] or top
            sentence = min(proposals, key=lambda s: s.start or 0.0)
        else:
            sentence = top[0]
        return f"{self.people.speaker(sentence, q.text)}.", [sentence]

    def _decided(self, q: Question, hits: list[Hit]) -> tuple[str, list[Sentence]]:
        """The decision about what the question names. A decision often does not repeat its subject ("Fine, the
        city park it is."), so it is matched together with the few sentences before it that raised the matter."""
        if self._decisions is None:
            self._decisions = extract_decisions(self.transcript)
        best: tuple[float, Sentence] | None = None
        for decision in self._decisions:
            at = self._sentence_of(decision.text, decision.turn_index)
            if at is None:
                continue
            lead_in = " ".join(s.text for s in self.sentences[max(0, at - DECISION_LEAD_IN):at])
            said = Sentence(decision.text, decision.speaker, decision.turn_index, decision.start, None, lead_in)
            covered = coverage(q, said, context_weight=0.75, frame_weight=0.0)
            if covered >= self.options.min_focus_coverage and (best is None or covered > best[0]):
                best = (covered, self.sentences[at])
        if best is not None:
            return capitalise(best[1].text), [best[1]]
        sentence = self.sentences[hits[0].index]
        return sentence.text, [sentence]

    def _sentence_of(self, text: str, turn_index: int) -> int | None:
        return next((i for i, s in enumerate(self.sentences) if s.turn_index == turn_index and text in s.text
                     or s.turn_index == turn_index and s.text in text), None)

    def _yes_no(self, q: Question, hits: list[Hit]) -> tuple[str, list[Sentence]]:
        """The latest sentence that itself says what the question is about settles it, together with the
        answers it got: "Maybe we should X." - "No, let's leave that." is a no; a sentence that negates the
        question, or gives another amount or date, is a no too."""
        asked_negated = bool(NEGATION.search(_OR_NOT.sub("", q.text)))  # "do they X or not?" asks, it does not negate
        own = [h for h in hits if coverage(q, self.sentences[h.index], context_weight=0.0)
               >= self.options.min_focus_coverage]
        # The line that says most of what is asked, the predicate included ("signed" in "Is the contract signed?":
        # not a later line that only names the contract), the latest among equals (what was said last holds).
        said = {h.index: round(coverage(q, self.sentences[h.index], context_weight=0.0, frame_weight=1.0), 1)
                for h in own}
        at = max(own, key=lambda h: (said[h.index], h.index)).index if own else hits[0].index
        sentence = self.sentences[at]
        if contradicts(q.text, sentence.text) or (_REJECT.search(sentence.text) and not asked_negated):
            return "No.", [sentence]
        if _PROPOSAL.search(sentence.text) or sentence.text.endswith("?"):
            # The first reply by someone else, right after the proposal, accepts or rejects it.
            reply = next((r for r in self.sentences[at + 1:at + 1 + REPLY_WINDOW] if r.speaker != sentence.speaker), None)
            if reply is not None and _REJECT.search(reply.text):
                return "No.", [sentence, reply]
            if reply is not None and _ACCEPT.search(reply.text):
                return "Yes.", [sentence, reply]
        negated = bool(NEGATION.search(sentence.text)) != asked_negated
        return ("No." if negated else "Yes."), [sentence]

    def _free_form(self, q: Question, hits: list[Hit]) -> tuple[str, list[Sentence], int]:
        evidence = [self.sentences[h.index] for h in self._competing(hits)][:3]
        readable = [s for s in evidence if not speaks_to_the_model(s.text)]  # quoted, never acted on
        parts = 1  # of the transcript, that a reader read (its answer kept or not)
        span = self._span(q, readable)
        if span is not None:
            return (*span, parts)
        if self.generate is not None and readable:
            evidence = readable
            generated = self.generate(q.text, evidence)
            if generated is not None:
                reading = Reading(*generated)
                text, parts = reading.text.strip(), reading.parts
                said = set(stems(" ".join(s.text for s in evidence)))
                # What the answer adds to the question must come from the lines: an answer that only restates
                # the question ("The one in charge of X is the one in charge of X") says nothing.
                words = set(stems(text)) - set(stems(q.text))
                if text and words and len(words & said) / len(words) >= 0.5:
                    return text, [s for s in evidence if set(stems(s.text)) & words] or evidence[:1], parts
        # No reader's answer: the best lines themselves, in the order they were said. On real meetings the best
        # line holds the answer far less often than the best two do (docs/benchmarks.md, issue 48).
        quoted = sorted(evidence[:self.options.answer_lines], key=lambda s: (s.start or 0.0, s.turn_index))
        return " ".join(tidy(s.text) or s.text for s in quoted), quoted, parts

    def _span(self, q: Question, evidence: list[Sentence]) -> tuple[str, list[Sentence]] | None:
        """The words of one of the lines that answer the question, when the span reader finds them; a span that
        only repeats the question, or is the speaker's name, is none."""
        if self.span_reader is None or not evidence:
            return None
        prefixes = [f"{s.speaker}: " for s in evidence]
        found = [sp for sp in self.span_reader.read(q.text, [p + s.text for p, s in zip(prefixes, evidence)])
                 if sp is not None and sp.margin > self.options.min_span_margin and sp.start >= len(prefixes[sp.passage])]
        for sp in sorted(found, key=lambda sp: -sp.margin):
            text = tidy(sp.text.strip(" ,;:-"))
            if set(stems(text)) - set(stems(q.text)):
                return f"{text}{'' if text[-1:] in '.!?' else '.'}", [evidence[sp.passage]]
        return None

    def _summary_about(self, q: Question, confidence: float) -> Answer:
        """A passage, not a fact: the meeting's part about the focus words, as a few lines of minutes."""
        return self._summary_answer(q, self._summarizer().about(q.text), confidence)

    def _whole_meeting(self, q: Question) -> Answer:
        """"Summarize the meeting": each topic's most central sentences in turn, as minutes (app/answering/focused.py)."""
        return self._summary_answer(q, self._summarizer().whole(self.transcript), 1.0)

    def _summary_answer(self, q: Question, found: FocusedSummary | None, confidence: float) -> Answer:
        if found is None:
            return Answer(q.text, NOT_IN_MEETING, [], 1, 0.0, q.type.value)
        return Answer(q.text, " ".join(found.text.splitlines()), [self._cite(s) for s in found.sentences], 1,
                      confidence, q.type.value)

    def _summarizer(self) -> FocusedSummarizer:
        """The meeting's passage index, built at the first summary request and kept for the next ones."""
        if self._focused is None:
            self._focused = FocusedSummarizer(self.transcript, self.sentences)
        return self._focused

    def _cite(self, sentence: Sentence) -> Citation:
        turn = self.transcript.turns[sentence.turn_index] if sentence.turn_index < len(self.transcript.turns) else None
        unsure = tuple(unsure_words(turn, sentence.text)) if turn is not None else ()
        return Citation(sentence.turn_index, sentence.speaker, sentence.start, sentence.text, unsure)


DECISION_LEAD_IN = 4  # sentences before a decision that may name what it decides
REPLY_WINDOW = 2  # sentences after a proposal within which its reply comes
_REJECT = re.compile(r"^(?:no\b|nope\b|not\b)|\b(?:let's not|let us not|i don't think|i do not think|not this time|"
                     r"not now|leave that|leave it|too expensive|too risky|skip that|drop that|rather not|against it|"
                     r"we can't|we cannot|won't|isn't worth|say no|don't have (?:the )?(?:time|budget|money))\b",
                     re.IGNORECASE)
_ACCEPT = re.compile(r"^(?:yes|yeah|yep|sure|agreed|okay|ok|fine)\b|\b(?:sounds good|let's do it|let's do that|good idea|"
                     r"great idea|i agree|makes sense|go ahead|we should|let's)\b", re.IGNORECASE)
_ASKS_IDEA = re.compile(r"\b(?:idea|suggest\w*|propos\w*|recommend\w*)\b", re.IGNORECASE)
_PROPOSAL = re.compile(r"\b(?:how about|what about|maybe we|should we|we should|i suggest|i propose|i recommend|"
                       r"why don't we|what if we|let's)\b", re.IGNORECASE)
