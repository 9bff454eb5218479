"""Does a sentence report a task done? "I sent the contract on Monday", "The certificate has been renewed", "The
slides are ready" close "send the contract", "renew the certificate", "prepare the slides"; "I will send the
contract", "The contract has not been sent" and "Did you send the contract?" do not.

Read by the parser, not by word lists of tasks: the sentence must speak of the task's things (most of its nouns) and
either do the task's own verb in the past or the perfect, or say of it one of the few words English uses for work
finished ("done", "finished", "complete", "ready", "closed", "resolved"), not negated. Used to tell which action
items of earlier meetings a later meeting closed (app/library/open_items.py).
"""

from __future__ import annotations

from app.answering.question_parse import parse

# Words that say work is finished, whatever the work was ("the budget is done", "we finished the slides").
_FINISHED = frozenset({"do", "done", "finish", "complete", "ready", "close", "resolve", "settle", "wrap"})


def _task_parts(task: str) -> tuple[str | None, set[str]]:
    """The task's verb (lemma) and the things it acts on (noun lemmas of its object): "renew the certificate and
    add an alert" -> ("renew", {"certificate"}). Parsed after "I will", as it was said: alone, "book the coach"
    reads as a noun phrase."""
    doc = parse(f"I will {task}")
    if doc is None:
        return None, set()
    verb = next((t for t in doc[2:] if t.pos_ == "VERB"), None)
    if verb is None:
        return None, {t.lemma_.lower() for t in doc if t.pos_ in ("NOUN", "PROPN")}
    objects = [c for c in verb.children if c.dep_ in ("dobj", "attr", "oprd")] or \
        [g for c in verb.children if c.dep_ == "prep" for g in c.children if g.dep_ == "pobj"]
    things = {t.lemma_.lower() for o in objects for t in o.subtree if t.pos_ in ("NOUN", "PROPN")
              and not any(a.dep_ == "prep" for a in t.ancestors if a in o.subtree)}
    return verb.lemma_.lower(), things or {t.lemma_.lower() for t in doc if t.pos_ in ("NOUN", "PROPN")}


def _negated(token) -> bool:
    return any(c.dep_ == "neg" for c in token.children) or any(c.dep_ == "neg" for c in token.head.children)


# A clause that says what would, should or may be done, not what was: "if the slides are finished", "once it is
# ready", "we need the contract ready", "it will be done".
_CONDITION = frozenset({"if", "once", "when", "until", "unless", "whether", "before"})
_WANTING = frozenset({"need", "want", "hope", "expect", "plan", "try", "wish", "intend", "have"})


def _settled(token) -> bool:
    """Is ``token`` said as fact, now or past: no modal or future ("will", "should", "going to") on it or the verbs
    above it in its clause, no condition ("if", "once"), not wanted or needed ("we need it ready")."""
    for node in (token, *token.ancestors):
        if any(c.dep_ == "aux" and (c.tag_ == "MD" or c.lower_ in ("will", "shall")) for c in node.children):
            return False
        if any(c.dep_ == "mark" and c.lower_ in _CONDITION for c in node.children):
            return False
        if node is not token and node.lemma_.lower() in _WANTING | {"go"} and node.pos_ in ("VERB", "AUX"):
            return False
        if node.dep_ in ("ROOT", "ccomp", "advcl") and node is not token:
            break
    return True


def _past_or_perfect(token) -> bool:
    """"sent", "has sent", "was sent", "has been sent"; not "will send" or "send"."""
    if token.tag_ == "VBD":
        return True
    return token.tag_ == "VBN" and any(c.dep_ in ("aux", "auxpass") for c in token.children)


def reports_done(task: str, sentence: str) -> bool:
    """Does ``sentence`` say ``task`` (an action item's words, "send the contract to Olek") was done?"""
    if sentence.rstrip().endswith("?"):
        return False
    verb, things = _task_parts(task)
    doc = parse(sentence)
    if doc is None or not things:
        return False
    said = {t.lemma_.lower() for t in doc if t.pos_ in ("NOUN", "PROPN", "PRON")}
    if len(things & said) * 2 < len(things):  # most of the task's things must be spoken of
        return False
    for token in doc:
        lemma = token.lemma_.lower()
        if _negated(token) or token.dep_ in ("aux", "auxpass") or not _settled(token):
            continue  # "did" helping another verb does nothing itself
        if verb is not None and lemma == verb and _past_or_perfect(token):
            return True
        if lemma in _FINISHED and (_past_or_perfect(token) or (token.pos_ == "ADJ" and lemma != "close")
                                   or token.dep_ == "acomp" and lemma != "close"):
            return True  # "we are close to sending it" is not closed
    return False


# Words that say work is not finished: "What is still open?", "Anything outstanding?", "What remains?"
_UNFINISHED = frozenset({"open", "outstanding", "pending", "unresolved", "unfinished", "undone", "incomplete", "remain"})


def asks_what_is_open(question: str) -> bool:
    """Does ``question`` ask for the work not yet finished ("What is still open?", "Which to-dos haven't been
    closed?", "What is left to do?", "Anything outstanding from last week?"), not whether a thing is open ("Is the
    office open on Fridays?") or what was done ("Which tasks did Olek finish?")?"""
    doc = parse(question)
    if doc is None or not len(doc) or not (doc[0].tag_ in ("WP", "WDT") or doc[0].lower_ in ("anything", "any")):
        return False
    for token in doc:
        lemma = token.lemma_.lower()
        if any(a.dep_ in ("prep", "pobj") for a in token.ancestors):
            continue  # said of a thing asked about ("about the open-source license"), not of the work
        if token.dep_ in ("oprd", "xcomp") and token.head.lemma_.lower() == "leave":
            continue  # "Which doors were left open?": said of a thing
        if (lemma in _UNFINISHED or token.lower_ in _UNFINISHED) and _of_the_asked(token):
            return True  # "pending" is the parser's "pend"
        if lemma == "leave" and any(c.dep_ == "xcomp" and c.lemma_.lower() == "do" for c in token.children):
            return True  # "What is left to do?", not "What was left out?"
        if (lemma in _FINISHED or lemma in ("close", "handle")) and _negated(token):
            return True
    return False


def _is_asked(token) -> bool:
    """The thing a question asks for: "what", "which ...", "anything"."""
    return token.tag_ in ("WP", "WDT") or token.lower_ in ("anything", "any") or \
        any(c.dep_ == "det" and c.tag_ == "WDT" for c in token.children)


def _of_the_asked(token) -> bool:
    """Is the unfinished word said of what the question asks for ("What is still open?", "Anything outstanding?"),
    not of another thing ("What time does the office open?": the office is)?"""
    if token.dep_ == "amod":
        return _is_asked(token.head)
    holders = [token] + ([token.head] if token.dep_ in ("acomp", "attr", "oprd", "xcomp") else [])
    subjects = [c for h in holders for c in h.children if c.dep_ in ("nsubj", "nsubjpass")]
    if subjects:
        return any(_is_asked(c) for c in subjects)
    return any(_is_asked(c) for c in token.children if c.dep_ == "dobj")  # "What's still pending?"


def asked_about(question: str) -> set[str]:
    """What a question about open work narrows it to: the nouns after "about", "on", "regarding" or "concerning"
    ("What is open about the budget?" -> {"budget"}); empty for all of it."""
    doc = parse(question)
    if doc is None:
        return set()
    return {t.lemma_.lower() for prep in doc if prep.dep_ == "prep" and prep.lower_ in ("about", "on", "regarding",
                                                                                           "concerning")
            for t in prep.subtree if t.pos_ in ("NOUN", "PROPN")}
