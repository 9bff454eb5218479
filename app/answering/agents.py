"""Who a line has do a task, read from its grammar: the subject of the task's verb, or, where the verb is an
infinitive with no subject of its own, the one its governing verb controls: the object where there is one ("I'm
putting you down to order the gloves", "Count on me to print the scripts", "I asked Bob to send it"), else that
verb's subject ("I'll try to send it"). A bare imperative is the listener's ("Send the slides, please").

For the answer finder's who-will questions (app/answering/people.py names the speaker and the listener).
"""

from __future__ import annotations

from app.answering.meeting_record import join_names
from app.answering.question_parse import _named, _with_names
from app.answering.retrieval import stems
from app.text.speakers import is_a_name

SPEAKER, LISTENER = "speaker", "listener"
_SPEAKER_WORDS = frozenset({"i", "me", "my", "mine", "myself"})
_LISTENER_WORDS = frozenset({"you", "your", "yours", "yourself"})
_SUBJECTS = ("nsubj", "nsubjpass")
_INFINITIVE_DEPS = ("xcomp", "advcl", "ccomp")
_CONTROLLED_BY_OBJECT = 3  # how many governing verbs up an infinitive's doer is looked for


def task_doer(text: str, task: str) -> str | None:
    """Who ``text`` has do ``task`` (the question's words for it, "ordering more gloves"): SPEAKER, LISTENER, a name
    as written, or None when no verb of the task is in the line or its grammar names no one. A task done already
    ("I called the client"), refused or doubted ("I won't call the client", "I don't think you should call ...")
    names no one; a question names only the one it asks ("Could you call the client?")."""
    doc, bracketed = _with_names(text)
    if doc is None:
        return None
    wanted = set(stems(task))
    asks = text.rstrip().endswith("?")
    for verb in (t for t in doc if _is_verb(t) and set(stems(t.text)) & wanted):
        if verb.tag_ == "VBD" or any(c.dep_ == "neg" for t in (verb, *verb.ancestors) for c in t.children):
            continue  # done already, or refused or doubted on the way up ("I don't think you should ...")
        doer = _doer(verb, bracketed, _CONTROLLED_BY_OBJECT)
        if doer is not None and not (asks and doer != LISTENER):
            return doer
    return None


def _is_verb(token) -> bool:
    """A verb, or a word the tagger took for a noun that "to" makes an infinitive ("to book the venue")."""
    return token.pos_ == "VERB" or any(c.dep_ == "aux" and c.tag_ == "TO" for c in token.children)


def _doer(verb, bracketed: set[str], depth: int) -> str | None:
    if any(c.dep_ == "neg" for c in verb.children):
        return None  # "won't", "don't want to", "can't": not who will do it
    subject = next((c for c in verb.children if c.dep_ in _SUBJECTS), None)
    by = [g for c in verb.children if c.dep_ == "agent" for g in c.children if g.dep_ == "pobj"]
    if depth == _CONTROLLED_BY_OBJECT and subject is not None and subject.dep_ == "nsubjpass" and by:
        return _person(by[0], bracketed)  # "The report will be sent by Maria" (not "I was asked by Tom to ...")
    if subject is not None:  # with those joined to it ("Dora and Ben should select the video")
        people = [_person(t, bracketed) for t in (subject, *subject.conjuncts)]
        names = [p for p in people if p not in (None, SPEAKER, LISTENER)]
        either = any(c.dep_ == "cc" and c.lower_ == "or" for c in subject.children)
        if either and len(people) > 1:
            return None  # "Anna or Ben": not yet one of them
        return join_names(names) if len(names) == len(people) > 1 else people[0]
    infinitive = any(c.dep_ == "aux" and c.tag_ == "TO" for c in verb.children)
    if infinitive and verb.dep_ in _INFINITIVE_DEPS and depth > 0:
        head = verb.head
        objects = [c for c in head.children if c.dep_ in ("dobj", "dative")]
        if objects:  # "I told her to ...", "put you down to ...": the object does it, whoever it is
            return _person(objects[0], bracketed) if not any(c.dep_ == "neg" for c in head.children) else None
        # "count on me to ...", "rely on Anna to ..." (not "go to the office on Monday to ...")
        relied = [g for c in head.children if c.dep_ == "prep" and c.lower_ in ("on", "upon")
                  for g in c.children if g.dep_ == "pobj"]
        if relied:
            return _person(relied[0], bracketed) if not any(c.dep_ == "neg" for c in head.children) else None
        if head.lemma_.lower() == "be":  # "Your task is to call the fishmonger": whose task
            owner = next((c for c in head.children if c.dep_ in _SUBJECTS), None)
            mine = next((p for p in owner.children if p.dep_ == "poss"), None) if owner is not None else None
            return _person(mine, bracketed) if mine is not None else None
        return _doer(head, bracketed, depth - 1)
    imperative = verb.tag_ == "VB" and verb.dep_ == "ROOT" and not any(c.dep_ in ("aux", "auxpass", "expl")
                                                                       for c in verb.children)
    return LISTENER if imperative else None


def _person(token, bracketed: set[str]) -> str | None:
    word = token.lower_
    if word in _SPEAKER_WORDS:
        return SPEAKER
    if word in _LISTENER_WORDS:
        return LISTENER
    if token.text in bracketed:
        return f"[{token.text}]"
    if _named(token, bracketed) and is_a_name(token.text):  # not "Monday"
        return token.text
    return None
