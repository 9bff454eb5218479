"""Questions read by their grammar (spaCy's parser and lemmatiser, the en_core_web_sm pipeline the PII detector
uses): what a question asks for, whatever its words.

The sentence embedder tells questions apart by their content words, so a short question it has not seen ("Who
attended?", "Who was there?") sits far from every plain way of asking it (0.45-0.54) while a question that only
shares "meeting" sits close (0.79). The parse says who or what is asked about and by which verb: "Who attended?" is
a who-subject of *attend* with no other object than the gathering itself.
"""

from __future__ import annotations

import functools
import re
import logging

log = logging.getLogger(__name__)

# Being at a gathering: a who-subject of these (with no other object than the gathering) asks who attended.
PRESENCE_VERBS = frozenset({"attend", "participate", "join"})
# The gathering itself, however it is called.
GATHERING_NOUNS = frozenset({"meeting", "call", "session", "discussion", "conversation", "sync", "standup",
                             "stand-up", "huddle", "today", "this"})
# The people at one.
ATTENDEE_NOUNS = frozenset({"participant", "attendee"})
LISTING_VERBS = frozenset({"list", "name", "give"})


@functools.lru_cache(maxsize=1)
def parser():
    """The English pipeline without its entity recogniser (None, with a warning, where it is not installed)."""
    try:
        import spacy

        from app.text.pii import SPACY_MODEL

        return spacy.load(SPACY_MODEL, exclude=["ner"])
    except (ImportError, OSError) as exc:
        log.warning("spaCy's English pipeline is not available (%s): questions are read without their grammar", exc)
        return None


@functools.lru_cache(maxsize=4096)
def parse(question: str):
    """The parsed question (a spaCy Doc), or None without the pipeline."""
    nlp = parser()
    return nlp(" ".join(question.split())) if nlp is not None else None


def _objects(verb) -> list:
    """The nouns a verb acts on: its direct objects and its prepositions' objects."""
    found = [c for c in verb.children if c.dep_ in ("dobj", "attr", "oprd")]
    for prep in (c for c in verb.children if c.dep_ == "prep"):
        found += [c for c in prep.children if c.dep_ == "pobj"]
    return found


def _only_the_gathering(tokens) -> bool:
    return all(t.lemma_.lower() in GATHERING_NOUNS for t in tokens)


def _future(verb) -> bool:
    return any(c.dep_ == "aux" and c.lemma_.lower() in ("will", "shall") for c in verb.children) or \
        any(t.lower_ == "going" for t in verb.children)


def asks_who_attended(question: str) -> bool:
    """Whether ``question`` asks who was at the meeting: "Who attended?", "Which people joined the call?", "Who was
    there?", "Who were the participants?", "List the attendees." Not "Who attended the conference in Berlin?",
    "Who will join next week?" or "Who left the meeting?"."""
    doc = parse(question)
    if doc is None or not len(doc):
        return False
    root = next((t for t in doc if t.dep_ == "ROOT"), doc[0])
    lemma = root.lemma_.lower()
    if _future(root):
        return False
    subjects = [c for c in root.children if c.dep_ in ("nsubj", "nsubjpass", "attr")]
    asked_who = any(t.lower_ == "who" or (t.lemma_.lower() in ("people", "person") and
                                          any(d.lower_ in ("which", "what") for d in t.children))
                    for t in subjects)
    objects = _objects(root)
    if any(c.dep_ in ("advmod", "npadvmod") and c.lower_ not in ("there", "today") for c in root.children):
        return False  # "Who attended remotely / in person / late?" asks for some of them
    if lemma in PRESENCE_VERBS or (lemma == "take" and any(o.lower_ == "part" for o in objects)):
        rest = [o for o in objects if o.lower_ != "part"]
        return asked_who and _only_the_gathering(rest)
    if lemma == "be":
        nouns = [t for t in subjects + objects if t.lower_ != "who"]
        if asked_who and any(c.lower_ == "there" for c in root.children):  # not "Who is there to help with X?"
            return _only_the_gathering(nouns) and not any(c.dep_ in ("xcomp", "advcl", "ccomp") for c in root.children)
        present = [c for c in root.children if c.dep_ == "acomp" and c.lemma_.lower() == "present"]
        if asked_who and present:
            return _only_the_gathering(nouns + _objects(present[0]))
        if any(t.lower_ == "who" for t in subjects):
            people = [t for t in nouns if t.lemma_.lower() in ATTENDEE_NOUNS]
            if people:  # "Who were the participants (of the meeting)?"
                return _only_the_gathering([o for p in people for o in _objects(p)])
            return bool(nouns) and _only_the_gathering(nouns) and any(c.dep_ == "prep" for c in root.children)
        return False
    if lemma in LISTING_VERBS and not subjects:  # an imperative: "List the attendees."
        return any(o.lemma_.lower() in ATTENDEE_NOUNS for o in objects)
    return False


SPEAKING_VERBS = frozenset({"speak", "talk", "say"})
LENGTH_NOUNS = frozenset({"duration", "length"})
HOW_LONG_VERBS = frozenset({"be", "last", "take", "run", "go"})


def asks_who_spoke_most(question: str) -> str | None:
    """"most" for "Who spoke the most?", "Who talked most?", "Who did most of the talking?"; "least" for "Who
    spoke the least?"; None otherwise ("Who said the most about the budget?" asks about the budget)."""
    doc = parse(question)
    if doc is None or not len(doc):
        return None
    root = next((t for t in doc if t.dep_ == "ROOT"), doc[0])
    if not any(c.lower_ == "who" and c.dep_ == "nsubj" for c in root.children) or _future(root):
        return None
    amount = next((c for c in root.children if c.lower_ in ("most", "least", "more", "less")), None)
    if amount is None or any(t.lower_ == "or" for t in doc):  # "Who spoke more, Anna or Ben?" compares two
        return None
    about = [o for o in _objects(root) + _objects(amount) if o.i != amount.i]
    if root.lemma_.lower() in SPEAKING_VERBS:
        if about and not _only_the_gathering(about):
            return None
    elif root.lemma_.lower() != "do" or not about or any(o.lemma_.lower() not in ("talking", "speaking") for o in about):
        return None
    return "least" if amount.lower_ in ("least", "less") else "most"


def asks_how_long(question: str) -> bool:
    """"How long was the meeting?", "How long did the call last?", "What was the duration of the meeting?" (not
    "How long will the migration take?" or "How long was the delay?")."""
    doc = parse(question)
    if doc is None or not len(doc):
        return False
    root = next((t for t in doc if t.dep_ == "ROOT"), doc[0])
    if _future(root):
        return False
    subjects = [c for c in root.children if c.dep_ in ("nsubj", "nsubjpass")]
    how_long = any(t.lower_ == "long" and any(c.lower_ == "how" for c in t.children) for t in doc)
    if how_long and root.lemma_.lower() in HOW_LONG_VERBS:
        return bool(subjects) and _only_the_gathering(subjects)
    lengths = [t for t in subjects if t.lemma_.lower() in LENGTH_NOUNS]
    if lengths and root.lemma_.lower() == "be":
        return _only_the_gathering(_objects(lengths[0])) and bool(_objects(lengths[0]))
    return False


# Verbs that carry no event of their own: being, having, planning, saying and the modals ("When is the launch?",
# "When is it planned?", "When was it mentioned?", "When will it ..."); the event is what they are about.
LIGHT_VERBS = frozenset({"be", "do", "have", "happen", "occur", "take", "go", "get", "plan", "schedule", "set",
                         "expect", "need", "want", "suppose", "give", "make", "hold",
                         "say", "report", "mention", "tell", "state", "note", "announce", "discuss",
                         "will", "can", "could", "should", "would", "must"})
# The adverbs that make a phrasal verb ("come back", "set up"), which the parser sometimes tags as modifiers.
_PARTICLES = frozenset({"back", "up", "out", "off", "over", "down", "away", "on"})


def _is_verb(token) -> bool:
    """A verb, or a word with an auxiliary, whatever the tagger says ("When does the trip depart?": NOUN)."""
    return token.pos_ in ("VERB", "AUX") or any(c.dep_ == "aux" for c in token.children)


def _event(verb) -> str | None:
    """The verb's lemma with any particle ("come back"), or None for a light verb with none."""
    particle = next((c.lower_ for c in verb.children if c.dep_ == "prt"
                     or c.dep_ == "advmod" and c.lower_ in _PARTICLES), None)
    lemma = verb.lemma_.lower()
    if lemma in LIGHT_VERBS:
        return None
    return f"{lemma} {particle}" if particle else lemma


def asked_events(question: str) -> list[str]:
    """The events a question names by its verbs ("When does the pilot start?" -> ["start"], "When did they promise
    to clear out the bins by?" -> ["clear out"], "When will he come back?" -> ["come back"]); [] where only light
    verbs speak ("When is the release?", "Which day is pencilled in for the drill?")."""
    doc = parse(question)
    if doc is None:
        return []
    # a participle describing a noun ("the shared data") names no event
    return list(dict.fromkeys(e for t in doc if _is_verb(t) and t.dep_ not in ("amod", "compound")
                              and (e := _event(t)) is not None))


def date_event(sentence: str, start: int, end: int) -> tuple[str, tuple[str, ...]] | None:
    """The event a date said at ``sentence[start:end]`` is the time of, and what that event acts on: the first verb
    above the date that is not light, with its objects ("I will write the test plan by Wednesday" -> ("write",
    ("test", "plan"))); None where only a light verb holds it ("The pilot is on Monday", "I'll have it done by
    Friday")."""
    doc = parse(sentence)
    if doc is None:
        return None
    token = next((t for t in doc if t.idx < end and t.idx + len(t) > start), None)
    seen = 0
    while token is not None and seen < 12:
        if _is_verb(token) and token.dep_ != "amod":
            event = _event(token)
            if event is None:
                return None
            objects = [c for c in token.children if c.dep_ in ("dobj", "nsubjpass", "attr")]
            # the thing itself ("the test plan"), not what is said of it ("for the pilot")
            words = tuple(w.lemma_.lower() for o in objects for w in (*(c for c in o.children if c.dep_ == "compound"), o)
                          if w.pos_ in ("NOUN", "PROPN"))
            return event, words
        if token.head is token:
            return None
        token, seen = token.head, seen + 1
    return None


# How the parser attaches a name that is spoken to (English has no vocative case; spaCy's small model gives a
# vocative one of these): anything else - a subject, an object, a modifier - is a name talked about.
_VOCATIVE_DEPS = frozenset({"npadvmod", "punct", "dep", "intj", "vocative"})


def _told(token) -> bool:
    """The subject of a bare imperative ("So Anna please tell us..."): the verb in its base form, with no
    auxiliary ("Anna can tell us" is said of her)."""
    verb = token.head
    return token.dep_ == "nsubj" and verb.tag_ == "VB" and not any(c.dep_ in ("aux", "auxpass") for c in verb.children)


def _with_names(text: str) -> tuple:
    """The parsed text (None without the parser) with anonymised names' brackets taken off ("[PERSON3]" would parse
    as punctuation around a word), and those names."""
    return parse(text.replace("[", " ").replace("]", " ")), set(re.findall(r"\[([A-Za-z]+\d+)\]", text))


def _named(token, bracketed: set[str]) -> bool:
    """A person's name: a proper noun, or an anonymised name."""
    return token.tag_ == "NNP" or token.text in bracketed


def _as_written(token, bracketed: set[str]) -> str:
    """The name as the text wrote it: an anonymised one with its brackets ("[PERSON10]")."""
    return f"[{token.text}]" if token.text in bracketed else token.text


def addressed(text: str) -> list[str]:
    """The people ``text`` speaks to by name ("So now Anna, if you can describe...", "What do you think, Peter?",
    "So Anna please tell us..."), not those it speaks of ("so that Peter knows", "Peter's disks"), in order: proper
    nouns the parser attaches as a vocative. An anonymised name keeps its brackets ("[PERSON10]")."""
    doc, bracketed = _with_names(text)
    if doc is None:
        return []
    return list(dict.fromkeys(_as_written(t, bracketed) for t in doc
                              if _named(t, bracketed) and (t.dep_ in _VOCATIVE_DEPS or _told(t))))


def named_subjects(text: str) -> list[str]:
    """The people a line has do something, with those joined to them ("And Anna and [PERSON11] should select the
    video" - Anna, [PERSON11]): proper nouns that are a verb's subject, and their conjuncts. An anonymised name keeps
    its brackets."""
    doc, bracketed = _with_names(text)
    if doc is None:
        return []
    found = []
    for token in doc:
        says = any(c.dep_ == "ccomp" for c in token.head.children)  # "Anna said Ben should...": Ben does it
        if token.dep_ in ("nsubj", "nsubjpass") and _named(token, bracketed) and token.head.pos_ == "VERB" \
                and not says:
            found += [t for t in (token, *token.conjuncts) if _named(t, bracketed)]
    return list(dict.fromkeys(_as_written(t, bracketed) for t in found))


# Bare verbs that ask nothing of the one spoken to: "Let's move on" (the speaker too), "Thank you", "See you".
_NOT_ASKING = frozenset({"let", "thank", "see", "mean", "welcome"})


def tells_the_listener(text: str) -> bool:
    """Does the line ask the one spoken to to do something? A bare imperative ("But try sending him an e-mail",
    "Please send it to Anna"), or "you" with a modal ("You should write the introduction", "Could you send the
    slides?"); not a question about what they know ("Do you know when it starts?")."""
    doc = parse(text)
    if doc is None:
        return False
    for verb in (t for t in doc if t.dep_ == "ROOT" or (t.dep_ == "conj" and t.head.dep_ == "ROOT")):
        if verb.pos_ not in ("VERB", "AUX"):
            continue
        deps = {c.dep_ for c in verb.children}
        if verb.tag_ == "VB" and not deps & {"nsubj", "nsubjpass", "expl", "aux", "auxpass"} \
                and verb.lemma_.lower() not in _NOT_ASKING:
            return True
        you = any(c.dep_ == "nsubj" and c.lower_ == "you" for c in verb.children)
        if you and any(c.dep_ == "aux" and c.tag_ == "MD" for c in verb.children):
            return True
    return False


def asks_what_one_will_do(question: str) -> str | None:
    """The person a question asks the tasks of ("What should [PERSON3] do next?", "What is Peter going to do?",
    "What does Maria have to do?"), or None: "what" done by a named person, ahead ("should", "will", "going to",
    "have to", "need to", "supposed to"), not behind ("What did Anna do yesterday?")."""
    doc, bracketed = _with_names(question)
    if doc is None:
        return None
    for do in (t for t in doc if t.lemma_.lower() == "do" and t.pos_ in ("VERB", "AUX")):
        if not any(c.dep_ == "dobj" and c.lower_ == "what" for c in do.children):
            continue
        verb, ahead = do, any(c.dep_ == "aux" and c.tag_ == "MD" for c in do.children)
        while verb.dep_ == "xcomp" and verb.head is not verb:  # "going to do", "have to do", "supposed to do"
            verb = verb.head
            past = verb.tag_ == "VBD" or any(c.dep_ == "aux" and c.tag_ == "VBD" for c in verb.children)
            # what is ahead for them, not what they wanted or tried ("What did Anna want to do?")
            ahead = verb.lemma_.lower() == "suppose" or (verb.lemma_.lower() in ("go", "have", "need") and not past)
        if not ahead:
            continue
        for subject in (c for c in verb.children if c.dep_ in ("nsubj", "nsubjpass")):
            if _named(subject, bracketed):
                return subject.text
    return None
