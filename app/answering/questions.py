"""What a question asks for: its type, and the words that say what it is about.

The type picks the kind of answer (an amount, a date, a person, a decision, yes/no); the focus words
(the question's content words minus the words that only frame its type, like "cost" or "when") are
what the meeting must mention for the question to be answerable at all.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from app.answering.asked import LEAD_IN, SUMMARY_REQUEST, plain_question, split_question
from encoders.errors import InputError

MAX_QUESTION_CHARS = 2000  # a question, not a document: batch, live, the page and the bot all keep to it


def checked_question(question: str) -> str:
    """``question`` with its whitespace closed up; an InputError (that request alone fails) when it is empty or
    longer than MAX_QUESTION_CHARS. The one check every way of asking goes through."""
    question = " ".join(str(question or "").split())
    if not question:
        raise InputError("the question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise InputError(f"the question is {len(question)} characters long; keep it under {MAX_QUESTION_CHARS}")
    return question


class QuestionType(str, enum.Enum):
    HOW_MUCH = "how_much"
    WHEN = "when"
    WHO_WILL = "who_will"
    WHO_SAID = "who_said"
    WHAT_DECIDED = "what_decided"
    METRIC = "metric"
    HOW_MANY = "how_many"
    YES_NO = "yes_no"
    SUMMARY = "summary"  # "Summarize the discussion about X", "What did Marketing think of X?"
    OTHER = "other"


STOPWORDS = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being it this that these "
    "those what which who whom whose when where why how do does did done will would can could should shall may "
    "might must i we you he she they them our your his her its their me us my there here not no yes so about "
    "into than then too very just also has have had having any some all s t 's 're ll 'll get got going go "
    "team they're we're someone anyone everyone one group".split()
)

# Nouns that ask for a person (or a party: a team, an organisation) after "which" or "what": the question wants a
# name, and the noun itself need not be said in the meeting ("Which colleague ...?").
_PERSON_WORDS = ("person persons people one ones member members attendee attendees participant participants colleague "
                 "colleagues speaker speakers teammate teammates individual individuals employee employees staff "
                 "manager managers lead leader presenter presenters guest guests representative representatives rep "
                 "contact partner partners party parties entity entities organization organisation organizations "
                 "organisations company companies team teams department departments group groups side")
# Words of telling: what a person said, reported, or gave as information (a general English list).
_SPEECH_WORDS = ("spoke speak speaks stated state states described describe discussed update updates updated "
                 "provided provide gave shared answered replied commented confirmed claimed added revealed informed "
                 "source figures numbers estimate comment comments remark remarks point news report")
_PERSON_NOUN = r"(?:" + "|".join(_PERSON_WORDS.split()) + r"|team member|of them|of us|of you)"

# Words that frame a type of question without naming what it is about.
_FRAME = {
    QuestionType.HOW_MUCH: "much many cost costs costing price priced prices budget budgeted spend spent spending "
    "amount money pay paid dollars dollar euros total expensive charge charged worth figure sum bill invoice quote "
    "expense expenses outlay",
    QuestionType.WHEN: "when date day time deadline due happen happens take place scheduled schedule planned "
    "start starts begin begins end ends week month",
    QuestionType.WHO_WILL: "who responsible charge owner owns handle handling take care "
    "assigned volunteer volunteered promised agreed doing take taking going supposed need needs job task "
    + _PERSON_WORDS,
    QuestionType.WHO_SAID: "who whose said say says mentioned mention raised suggested proposed reported "
    "asked brought talked pointed noted told explained thinks thought idea suggestion proposal " + _SPEECH_WORDS
    + " " + _PERSON_WORDS,
    QuestionType.WHAT_DECIDED: "what decide decided decision decisions agreed agree settle settled conclusion "
    "concluded choose chose chosen outcome resolved final call option options pick picked select selected change "
    "changed make made regarding",
    QuestionType.METRIC: "what current currently rate level number value figure stand stands percentage",
    QuestionType.HOW_MANY: "how many big large size number count total",
    QuestionType.YES_NO: "",
    QuestionType.SUMMARY: "summarize summarise summary summaries discussion discussions discuss discussed talk talked "
    "whole meeting think thought opinion opinions feel felt views view recap sum main points highlights key "
    "overview rundown everything overall give tell me us brief short quick please up hey briefly quickly "
    "today call conversation session far points",
    QuestionType.OTHER: "",
}
# Words any question may use to ask, which say nothing about what it asks about ("reported", "set aside").
_GENERIC = (
    "report reported reporting say said says mention mentioned talk talked tell told give gave given get got make "
    "made set aside ready current currently now latest new right far moment expect expected expecting estimate "
    "estimated plan planned planning happen happened take taking place update updates number numbers figure "
    "figures cost costs price budget amount date group people reach reached recorded measured collected total "
    "final overall exactly approximately roughly about around much many big large"
)
# Words that place a question in time or scope, not in a topic: "so far", and "this phase" / "the current
# project", which point at what the meeting is about whether or not it names it.
_PHRASES = re.compile(
    r"\b(?:this time|right now|so far|at the moment|at this point|for now|these days|"
    r"(?:this|the current|the whole|our) (?:phase|project|quarter|sprint|stage|period|cycle|programme|program|"
    r"initiative|effort))\b")
# The words that only say an amount or a count is asked: a question with no other topic needs none of them said.
_ASKS_AMOUNT = re.compile(r"\bhow (?:much|many)(?: money)?\b")
# A summary's topic may well be "the budget" or "the numbers": only its own frame words are dropped.
FRAME_WORDS = {t: frozenset(words.split()) | (frozenset() if t is QuestionType.SUMMARY else frozenset(_GENERIC.split()))
               for t, words in _FRAME.items()}

_AUX = r"(?:is|are|was|were|do|does|did|will|would|can|could|has|have|had|should|shall|isn't|aren't|wasn't|didn't|doesn't|won't)"
_PATTERNS: list[tuple[QuestionType, re.Pattern[str]]] = [
    (QuestionType.SUMMARY, SUMMARY_REQUEST),  # app/answering/asked.py: it is also what a message asks
    (QuestionType.WHAT_DECIDED, re.compile(
        r"\b(?:decid\w*|decision|agree[ds]?|agreement|settle[ds]?|conclu\w+|outcome|resolved|go with|went with|"
        r"cho(?:ose|se|sen)|option|pick(?:ed)?|select(?:ed)?|what change)\b")),
    (QuestionType.WHO_SAID, re.compile(r"^whose (?:idea|suggestion|proposal|" + "|".join(_SPEECH_WORDS.split())
                                       + r")\b")),
    (QuestionType.WHO_WILL, re.compile(
        r"^(?:who|(?:which|what) " + _PERSON_NOUN + r")(?:'s| is| are)?\s+(?:will|going to|gonna|responsible|"
        r"in charge|supposed to|meant to|has to|needs to|should|taking|handling|doing|owns)\b")),
    (QuestionType.WHO_SAID, re.compile(
        r"^(?:who|(?:which|what) " + _PERSON_NOUN + r")\b.*\b(?:said|say|says|mention\w*|raise\w*|suggest\w*|"
        r"propos\w*|report\w*|asked|brought up|talked|point\w* out|noted|told|explain\w*|complain\w*|warn\w*|"
        r"think|thinks|thought|shared|gave|presented|announced|introduced|ran|leads?|from|"
        + "|".join(_SPEECH_WORDS.split()) + r")\b")),
    (QuestionType.WHO_WILL, re.compile(r"^(?:who|whom|(?:which|what) " + _PERSON_NOUN + r")\b|\bwho(?:'s| is)\b")),
    # The words that say what is asked beat the topic's words: "the deadline to update the budget sheet" asks
    # for a date, "the budget for the offer deadline" for an amount, "how many cost centers" for a count, "the
    # budget utilization" for a percentage.
    (QuestionType.HOW_MANY, re.compile(r"\bhow many\b")),
    (QuestionType.HOW_MUCH, re.compile(
        r"^what(?:'s| is| was| will be| are)? (?:the |our |their )?(?:total |overall )?(?:budget|cost|price|fee)s? "
        r"(?:for|of|to)\b|\bhow much money\b")),
    (QuestionType.WHEN, re.compile(r"^(?:by )?when\b|^(?!.*\bhow much\b).*(?:\b(?:deadline|due date)\b|\bwhat (?:date|day)\b)")),
    (QuestionType.METRIC, re.compile(r"^(?!.*\bhow much\b).*\b(?:utili[sz]ation|overrun|percentage|ratio|margin|rate)\b")),
    (QuestionType.HOW_MUCH, re.compile(
        r"\bhow much\b|\b(?:cost|costs|price|prices|budget|spend|spent|amount|paid|pay|charge|expensive|fee|fees|"
        r"salary|dollars|euros|money|bill|invoice|quote|expense|expenses|outlay)\b")),
    (QuestionType.HOW_MANY, re.compile(r"\bhow (?:many|big|large)\b|\bwhat size\b|\bnumber of\b")),
    (QuestionType.WHEN, re.compile(
        r"^when\b|\bwhen (?:is|are|was|were|will|do|does|did|should|can)\b|\b(?:date|dates|day|deadline|due|weekday)\b|"
        r"\bwhat time\b|\bby when\b|\bhow soon\b|\bwhich (?:week|month)\b")),
    (QuestionType.METRIC, re.compile(
        r"\b(?:rate|percentage|percent|ratio|score|level|count|number of|growth|churn|margin|"
        r"retention|conversion|uptime|latency|nps|share|time|average|metric|figure|score)\b")),
    (QuestionType.YES_NO, re.compile(rf"^{_AUX}\b")),
]


@dataclass(frozen=True)
class Question:
    text: str
    type: QuestionType
    focus: tuple[str, ...]  # content words that say what the question is about (lowercase)
    aside: tuple[str, ...] = ()  # content words around the question ("for the launch, ..."): topic only if said


def content_words(text: str) -> list[str]:
    words = (w.split("'")[0] for w in re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())  # "what's" -> "what"
             if not w.endswith("n't"))  # "didn't", "don't": a negation, not a topic
    return [w for w in words if w not in STOPWORDS and len(w) > 1]


def classify(question: str) -> QuestionType:
    q = " ".join(plain_question(question).lower().split())
    q = LEAD_IN.sub("", q)
    for qtype, pattern in _PATTERNS:
        if pattern.search(q):
            if qtype is QuestionType.WHAT_DECIDED and re.match(r"^(?:who|whom)\b", q):
                return QuestionType.WHO_SAID if re.search(r"\b(?:suggest|propos)\w*", q) else QuestionType.WHO_WILL
            if qtype is QuestionType.WHAT_DECIDED and re.match(rf"^{_AUX}\b", q):
                return QuestionType.YES_NO
            if qtype in (QuestionType.HOW_MUCH, QuestionType.METRIC, QuestionType.HOW_MANY, QuestionType.WHEN) and re.match(rf"^{_AUX}\b", q):
                return QuestionType.YES_NO
            return qtype
    return QuestionType.OTHER


def parse_question(question: str) -> Question:
    question, aside = split_question(question)
    qtype = classify(question)
    frame = FRAME_WORDS[qtype]
    asked = LEAD_IN.sub("", question.lower().strip())
    focus = tuple(dict.fromkeys(w for w in content_words(_PHRASES.sub(" ", asked)) if w not in frame))
    extra = tuple(dict.fromkeys(w for w in content_words(_PHRASES.sub(" ", aside.lower())) if w not in frame
                                and w not in focus))
    return Question(" ".join(question.split()), qtype, focus, extra)


def topic_words(question: str) -> list[str]:
    """The content words a question about nothing in particular still needs said ("What is the total budget?",
    "How much money has been spent so far?" -> spent): without its time/scope phrases and "how much money"."""
    return content_words(_ASKS_AMOUNT.sub(" ", _PHRASES.sub(" ", question.lower())))
