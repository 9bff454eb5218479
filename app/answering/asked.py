"""What a message asks: the question inside what was typed or said ("hey, sorry to bother you, but when is the
launch? thanks!"), and each question of a message that asks several ("How much will it cost, and when does it
start?").

People wrap a question in greetings, requests to the assistant and asides; the answer finder (app/answering/
answers.py) reads the question itself, and an aside's words only where the meeting says them.
"""

from __future__ import annotations

import re

# A request for a passage of the meeting, not one fact: answered by a short summary (app/answering/focused.py). "Recap:
# who will send the design?" asks a fact, so a question word after the request word leaves it to the others.
SUMMARY_REQUEST = re.compile(
    r"^(?:(?:hey|so|ok|okay|alright)[,!]?\s+)?(?:(?:can|could|would|will) you\s+(?:please\s+)?|please\s+)?"
    r"(?:(?:briefly|quickly)\s+)?"
    r"(?:(?:summari[sz]e|sum up|recap|give (?:me |us )?(?:a |an |the )?(?:short |brief |quick )?"
    r"(?:summary|recap|rundown|overview|highlights|key points|main points)|tell (?:me|us) (?:more )?about)"
    r"(?![\s:,]*(?:who|when|where|how|which|whether|if|what)\b)|"
    r"what (?:was|were|has been|got) (?:discussed|talked about)|"
    r"what did (?:the group|the team|they|we|everyone|people) (?:discuss|talk about)|"
    r"what did .+ (?:think|feel) (?:of|about)|how did .+ feel about|what (?:are|were) the (?:main |key )?"
    r"(?:points|highlights)|"
    r"(?:an? |the )?(?:short |brief |quick )?(?:summary|recap|overview|rundown) (?:of|about|on))\b")

# A label before the real question ("Recap: who will send the design?"): not part of what is asked.
LEAD_IN = re.compile(r"^(?:(?:recap|summary|quick|follow[- ]up|one more|another|last)\s+)?(?:question|q|one)"
                     r"\s*[:,-]+\s*(?=\w)|^(?:recap|summary)\s*[:,-]+\s*(?=\w)", re.IGNORECASE)

# How people wrap a question when they talk or type it: words before it ("hey, ...", "sorry to bother you, but
# ...", "for my notes, ..."), after it ("? thanks!", "? need this asap") or around it ("do you know ...", "can u tell me
# ..."). The question inside starts at the first question word that opens a clause (after the start, punctuation,
# a conjunction, or a verb that embeds a question) and is not itself a request to the assistant ("do you know");
# what is before it or after its question mark is an aside: only its words the meeting says count (app/answering/answers.py).
_QWORD = (r"(?:who|whom|whose|what|what's|whats|when|where|which|why|how|is|are|was|were|do|does|did|will|would|can|"
          r"could|has|have|had|should)")
_CLAUSE = re.compile(
    r"(?:^|(?<=[\s,:;.!?-]))(?P<start>(?:by|on|at|until|till|in|for|from|to|of) (?:when|what|which|whom)\b|if\b|"
    r"whether\b|" + _QWORD + r"\b)", re.IGNORECASE)
# The clause openers a mid-sentence question word may follow without punctuation ("... but who", "... know when").
# The verbs both _EMBEDS and _EMBEDDING take a question after ("... wondering when", "Wondering who will send it.").
_QUESTION_VERBS = r"know|wondering|wonder|confirm|remember|recall|forget|check|clarify|explain|verify"
_EMBEDS = re.compile(r"(?:^|[,:;.!?\-\u2013\u2014]\s*|\b(?:but|so|and|then|me|us|out|" + _QUESTION_VERBS + r"|"
                     r"(?<!whose )idea|clue|curious(?=\s+(?:whether|if)\b)|ask|asking|sure|see|first|firstly|second|"
                     r"secondly|third|thirdly|finally|lastly)\s+)$",
                     re.IGNORECASE)
# An auxiliary that opens a request to the assistant, not the question: "do you know ...", "can u tell me ...".
_REQUEST = re.compile(
    r"(?:do|does|did|can|could|would|will)\s+(?:you|u|ya|anyone|anybody|someone|somebody|we|the (?:meeting|transcript|"
    r"notes|minutes|recording|record|summary|call))\s+(?:\w+\s+){0,2}?(?:know|remember|recall|idea|tell|remind|find|"
    r"check|confirm|see|help|mind|say|show|mention|clarify|explain|verify|share|look)\b|"
    r"what\s+(?:i|we)\s+(?:\w+\s+){0,3}?(?:know|ask|find out|understand|hear)\s+is\b|(?:my|the|our)\s+question\s+is\b",
    re.IGNORECASE)


# A question word that asks for something (not an auxiliary): where an unpunctuated question starts.
_WH = re.compile(r"\b(?:who|whom|whose|what|what's|when|where|which|why|how)\b", re.IGNORECASE)
# An auxiliary addressed to the assistant ("can you ...", "could u ..."): a request, when a question word follows.
_TO_YOU = re.compile(r"(?:do|does|did|can|could|would|will)\s+(?:you|u|ya)\b", re.IGNORECASE)


# A request whose subject is not "you": "Would it be possible to check ...", "is possible you check ...", "Is there any
# way to find out ...": the question is what follows it.
_POSSIBLE = re.compile(r"(?:would|will|could|can|is|was)\s+(?:it\s+)?(?:be\s+)?possible\b|"
                       r"(?:is|would|could)\s+there\s+(?:any\s+)?(?:way|chance)\b", re.IGNORECASE)
# A yes/no question said after other words without punctuation ("ok listen did they agree to ..."): an auxiliary
# and its subject.
_AUX_SUBJECT = re.compile(
    r"\b(?:did|does|do|was|were|is|are|will|would|has|have|had|can|could|should)\s+(?:they|we|it|he|she|i|you|the|a|"
    r"an|our|their|someone|anyone|everyone|somebody|anybody|there|that|this|these|those)\b", re.IGNORECASE)
# Where a question opens: a question word ("what a mess" is none), "by when", or an auxiliary and its subject, but not
# "does anyone remember" with no question after it (a plea for the question before).
_OPENS = (r"(?!(?:do|does|did|can|could|would|will)\s+(?:you|u|ya|anyone|anybody|someone|somebody)\s+(?:\w+\s+)?"
          r"(?:know|remember|recall)\b(?!\s+(?:who|whom|whose|what|when|where|which|why|how|if|whether)\b))"
          r"(?:(?!what an?\s)(?:who|whom|whose|what|when|where|which|why|how)\b|(?:by|on|until|in|at|for|from|to|of)\s+"
          r"(?:when|what|which|whom)\b|(?:did|does|was|were|is|are|will|would|can|could|should|has|have|had|do)\s+"
          r"(?:they|we|it|he|she|i|you|there|anyone|someone|everyone|anybody|somebody)\b|(?:did|does|was|were|is|are|will|"
          r"would|can|could|should)\s+(?:the|a|an|our|their|this|that)\b)")
# After a dash, what comes before a second question ("... — and while I'm at it, who ..."): a joining word, a short
# aside, or both ("... - which starts in May?" and "... (which room)?" say more about the first question).
_ASIDE = r"(?:while (?:i'?m|you'?re|we'?re) at it|one more thing|on another note|separately|unrelated)\s*,?\s*"
_JOIN_ASIDE = r"\s*(?:(?:and|also|plus|oh and)\s+(?:" + _ASIDE + r")?|" + _ASIDE + r")"
# Where a sentence ends (after a word of two letters or more that is no abbreviation: "Mr. Okafor", "etc.").
_SENTENCE_END = r"(?<=\w\w)(?<!\bmr)(?<!\bms)(?<!\bdr)(?<!\bst)(?<!\bvs)(?<!\bjr)(?<!\bsr)(?<!\bmrs)(?<!\betc)"
# What people say after a question they do not punctuate: which meeting they mean, a hedge, a sign-off ("... from the
# meeting we just had", "... i think someone brought it up", "... and then im done").
_TRAILING = re.compile(
    r"\s+(?:(?:from|in|during|at|on|of)\s+(?:the|this|that|today'?s|todays|our|yesterday'?s|yesterdays|last|earlier)"
    r"\s+(?:\w+\s+){0,2}?(?:meeting|call|session|sync|standup|stand-up)\b|(?:and\s+)?then\s+(?:i'?m|im|i am|we'?re)\s+"
    r"(?:done|good|set)\b|(?:and\s+)?while\s+(?:i'?m|im|you'?re|we'?re)\s+at\s+it[\s.!]*$|(?<!while )(?<!when )(?<!after )(?<!before )(?<!since )(?<!that )(?<!what )(?<!which )"
    r"(?<!as )(?<!if )(?<!where )(?:(?:and|but|so)\s+)?i\s+(?:(?:honestly|really|just|still|actually|totally)\s+)?"
    r"(?:think|guess|believe|remember|recall|didn'?t|did not|don'?t|do not|can'?t|cannot|couldn'?t|missed|forgot|"
    r"wasn'?t|was not|was|had|have|need|needed)\b|(?:i'?m|im)\s+(?:pretty\s+)?sure\b|(?:i'?m|im|i am)\s+\w+ing\b|"
    r"(?:because|cause|cuz|bc)\b|[-\u2013\u2014]+\s(?!" + _JOIN_ASIDE + _OPENS + r")|(?:(?:lol|lmao|rofl|haha+|hehe)\b|"
    r"[\U0001F300-\U0001FAFF\u2600-\u27BF])(?=\s*(?:$|[^\w\s]|(?:i|i'?m|im|we|u|you|my|was|were|sorry|ok|okay|so|but|"
    r"and|just|totally|no|nobody|need|asking|thanks|thx)\b))|"
    r"(?:you know|or something|or what)\s*[.!?]*$|(?:(?:ok|okay|alright)[\s,]+(?=(?:thanks|thank you|thx|ty|cheers)[\s,.!]+bye\b))?(?:please|pls|plz|thx|thanks|"
    r"thank you|ty|cheers|asap|urgent(?:ly)?|lol|lmao|haha+|hehe|rofl|tia|(?:yeah|yep|ok|okay|so)\s+that'?s (?:it|all))\b"
    r"[\s.!,:)(]*(?:bye\b[\s.!]*)?$|"
    r"[:;]-?[)(dp]\s*$|and\s+(?-i:[A-Z][a-z]+)\s+(?:from\s+\w+\s+)?(?:keeps|kept|(?:is|was)\s+(?:asking|waiting|chasing|"
    r"bugging|pinging|pestering)|wants to know|needs to know|asked (?:me|us))\b)"
    r".*$|\s*,\s*(?:otherwise(?!\s+" + _OPENS + r")|(?:i\s+)?(?:need|needed|want|have to|gotta|couldn'?t|can'?t|cannot|could not|didn'?t|did not|"
    r"don'?t|do not|not sure|no idea|my\s+(?:\w+\s+){0,2}?(?:is|are|was|were|got|went|died|crashed|dropped|"
    r"broke|froze|cut)|if (?:anyone|anybody|someone|somebody|you|u) (?:\w+ )?(?:knows?|remembers?|recalls?|"
    r"caught it|has it|have it)|if (?:it|that|this|they) (?:\w+ )?(?:came up|come up|was (?:said|mentioned|discussed|"
    r"covered))))\b.*$|" + _SENTENCE_END + r"\s?[.!]+\s+\S.*$",
    re.IGNORECASE)


# Punctuation said aloud in a dictated message ("... question mark thanks", "... comma and then who ..."); "comma" only
# before a joining word or a question word, where no topic says it.
_SPOKEN_MARK = re.compile(r"\s+(?:question mark(?=\s*$|\s*[.!,]|\s+(?:thanks|thank|thx|ty|please|pls|bye|cheers|and|also|"
                          r"plus|then|so|btw|oh|ok|okay|" + _QWORD + r")\b)|(?P<comma>comma)(?=\s+(?:and|then|also|"
                          r"plus|so|btw|or|but|" + _QWORD + r")\b))", re.IGNORECASE)
# A greeting asked as a question ("hey, how are you?", "how was the trip?"): nothing to find in the meeting.
_HOW_ARE_YOU = (r"(?:how are (?:you|u|ya|things)(?: doing)?|how'?s it going|how have you been|how'?s (?:everything|life|"
                r"your (?:day|week))|how was (?:your|the) (?:weekend|trip|holiday|vacation|day|week|flight))")
_GREETS = re.compile(r"\W*(?:\w+\W+){0,3}?" + _HOW_ARE_YOU + r"\W*", re.IGNORECASE)
_GREETING_ENDS = re.compile(r"(?:^|[.!?,]\s*)(?:(?:hey|hi|hello|so|and|also)\W+)*" + _HOW_ARE_YOU + r"\s*\?$",
                            re.IGNORECASE)
# What someone does not know or care about, said before the question ("no idea who was there, but ...").
_UNKNOWN = re.compile(r"\b(?:no idea|no clue|not sure|unsure|(?:don'?t|do not|didn'?t|did not)\s+(?:know|remember|care|"
                      r"recall|see)|never mind|whatever)\s+$", re.IGNORECASE)
# A sentence that ends before the question mark.
_STOP = re.compile(_SENTENCE_END + r"[.!]+\s+(?=\S)", re.IGNORECASE)


def _greeting_only(prefix: str) -> bool:
    """Whether ``prefix`` (up to a question mark) ends in a greeting and asks nothing else: "Hope you had a good
    weekend! How was the trip?"."""
    found = _GREETING_ENDS.search(prefix)
    return found is not None and "?" not in prefix[: found.start()] and not _WH.search(prefix[: found.start()])


def _marks_said(text: str) -> str:
    """``text`` with its spoken marks as marks, where it has no typed question mark ("the question mark in the logo" and
    "the comma and the dash" are topics)."""
    if "?" in text:
        return text

    def mark(found: re.Match[str]) -> str:
        if re.search(r"\b(?:the|a|an|this|that|marked)$", text[: found.start()], re.IGNORECASE):
            return found.group(0)
        return "," if found.group("comma") else "?"

    return _SPOKEN_MARK.sub(mark, text)


def _statement_before(q: str, at: int, starts: list[int]) -> bool:
    """Whether the clause at ``at`` is a statement before the question: "..., which isn't easy. Would you happen to
    know who ...?" (its sentence ends before the question mark), or "on behalf of Kenji, who's on leave and asked me to
    check: when ...?" (a relative clause after a name, the question after a colon or a verb that embeds one)."""
    later = [s for s in starts if s > at and not _requests(q, s) and not _pleads(q[s:])]
    if not later:
        return False
    stop = _STOP.search(q, at)
    if q.endswith("?") and stop is not None and any(s >= stop.end() for s in later):
        return True
    return bool(re.search(r"(?:^|\w\s+)[A-Z][a-z]+,\s*$", q[:at])) and any(
        re.search(r"(?::|\b(?:know|check|confirm|wondering|ask(?:ed|ing)?))\s*$", q[:s]) for s in later)


def split_question(question: str) -> tuple[str, str]:
    """(the question inside what was typed or said, the aside around it): "sorry, I missed that. who will send the
    contract? thanks" -> ("Who will send the contract?", "sorry, I missed that. thanks"); "Any idea whether they
    hired her?" -> ("Did they hired her?", "Any idea") (asked yes or no)."""
    q = " ".join(_marks_said(str(question)).split())
    after = ""
    mark = q.find("?")
    if _GREETS.fullmatch(q):  # a greeting alone, as asked
        at = re.search(_HOW_ARE_YOU, q, re.IGNORECASE).start()
        return q[at:][:1].upper() + q[at + 1:], q[:at].strip(" ,")
    while 0 <= mark < len(q) - 1 and (_greeting_only(q[:mark + 1]) or not _WH.search(q[:mark]) and (
            not _CLAUSE.search(q[:mark]) or _pleads(q[:mark]))) and "?" in q[mark + 1:]:
        # "Sorry? Who will ...", "Can someone help? Who will ...": the question is the first part that asks something
        mark = q.find("?", mark + 1)
    if 0 <= mark < len(q) - 1 and re.search(r"\w", q[mark + 1:]):
        q, after = q[: mark + 1], q[mark + 1:].strip(" ?!.")
    label = LEAD_IN.match(q)  # "recap question: who ...": a label, not a request for a recap
    if label is not None:
        q = q[label.end():]
    if SUMMARY_REQUEST.search(q.lower()):  # a request for a summary is itself the question
        return q, after
    starts = []
    for found in _CLAUSE.finditer(q):
        at = found.start("start")
        if at and not _EMBEDS.search(q[:at]):
            continue  # a question word inside a clause ("the person who ...")
        if found.group("start").lower() in ("if", "whether") and (
                not at or (re.search(r"[.!]\s*$", q[:at]) and "?" not in q[at:]
                           and re.match(r"\w+\b[^.!?]*,\s*\w", q[at:]))):
            # "If Dana is away, who will run the demo?", "... . If you can point me to it, even better.": a condition,
            # not a yes/no question
            continue
        if re.match(r"what an?\s+\w+\s*(?:[.!)\]\-\u2013\u2014]|$" + (r"|," if at else "") + ")", q[at:], re.IGNORECASE):
            continue  # "(stuck in traffic, what a mess) - who ...": an exclamation, not a question
        courtesy = re.match(r"(?:when|whenever)\s+(?:you|u)\b", q[at:], re.IGNORECASE)  # "when you get a sec: who ..."
        if (found.group("start").lower() in ("if", "whether") or courtesy) and re.search(
                r"(?:\b(?:but|so)\s+|[,:;]\s*)(?:(?:by|on|until|in|at|for|from|to|of)\s+(?:when|what|which|whom)\b|"
                + _QWORD + r"\b)", q[found.end():], re.IGNORECASE):
            continue  # "Not sure if this came up, but who ...": a hedge (or a courtesy) before the question
        starts.append(at)
    wh = [m.start() for m in _WH.finditer(q)]
    later_wh = [at for at in wh if at > 0]
    aux = [m.start() for m in _AUX_SUBJECT.finditer(q)]  # "did they", "is the": where a yes/no question may open
    for at in starts:
        if re.match(_HOW_ARE_YOU + r"\s*(?:[?!.,]|$)", q[at:], re.IGNORECASE) or _statement_before(q, at, starts):
            continue
        if _UNKNOWN.search(q[:at]):
            but = [w for w in later_wh + aux if w > at and re.search(r"\bbut\s+(?:[\w']+\s+){0,4}$", q[:w])]
            if but:  # "no idea who was there and don't care, but when ...?": before "but" it is said, not asked
                return _inner(q, but[0], after)
        if _without_subject(q, at) and (_opens_later(q, at) or re.match(r"\w+n?['\u2019]?t\b", q[at:], re.IGNORECASE)
                                        and any(w < at for w in wh + aux)):
            # "was out sick tuesday 🤒 how much ...", "yo who will ..., can't find it" (a negative auxiliary after a
            # question): an auxiliary that opens no question of its own
            continue
        if re.match(r"(?:is|was|are)\s+" + _WH.pattern, q[at:], re.IGNORECASE):
            continue  # "what I need to know is who ...": "is" before a question word asks nothing itself
        if _requests(q, at) or (_TO_YOU.match(q, at) and any(w > at for w in later_wh)):
            continue  # "do you know ...", "can you look this up for me: who ..." ask the assistant, not the meeting
        for w in sorted(w for w in later_wh + aux if w < at and not _STOP.search(q, w, at)
                        and not re.search(r"\b(?:the|a|an|this|that|our|their|his|her|my|your)\s+\w+\s+$", q[:w],
                                          re.IGNORECASE)):
            joined = _SECOND.search(q, w)
            if joined is not None and joined.end() == at:
                return _inner(q, w, after)  # "for the meeting earlier who ..., and then when ...": from the first one
        return _inner(q, at, after)
    for at in aux:  # "what I need to know is did they ...": a yes/no question after "is"
        if re.search(r"\b(?:is|was)\s+$", q[:at]) and not any(w < at for w in later_wh):
            return _inner(q, at, after)
    if later_wh:  # said without punctuation ("right so basically who will ..."): from its first question word
        return _inner(q, later_wh[0], after)
    for at in aux:  # "ok listen did they agree ...": from its auxiliary
        if at and not _requests(q, at):
            return _inner(q, at, after)
    return q, after


# Words that can follow an auxiliary that opens a yes/no question (besides a name): "did they", "is the", "was there".
_SUBJECT = re.compile(r"(?:they|we|it|he|she|i|you|u|the|a|an|our|their|his|her|its|this|that|these|those|there|"
                      r"any|anyone|someone|everyone|anybody|somebody|everybody|all|both|each|every|no)\b", re.IGNORECASE)
_AUXILIARY = re.compile(r"(?:is|are|was|were|do|does|did|will|would|can|could|has|have|had|should)(?:n?['\u2019]?t)?\s+"
                        r"(?P<next>\S)",
                        re.IGNORECASE)


def _opens_later(q: str, at: int) -> bool:
    """Whether a question opens after ``at`` right after a mark that is not a word ("... 🤒 did they ...")."""
    later = [m.start("start") for m in _CLAUSE.finditer(q)] + [m.start() for m in _AUX_SUBJECT.finditer(q)]
    return any(w > at and re.search(r"[^\w\s]\s*$", q[:w]) for w in later)


def _without_subject(q: str, at: int) -> bool:
    """Whether an auxiliary at ``at`` has no subject after it ("was out sick"): no yes/no question starts there."""
    found = _AUXILIARY.match(q, at)
    if found is None:
        return False
    start = found.start("next")
    return not (_SUBJECT.match(q, start) or q[start].isupper() or q[start].isdigit())


def _unmarked(text: str) -> str:
    """``text`` without a quote mark or a bullet before it ("> who ...", "• who ...")."""
    return re.sub(r"^[^\w\s]+\s*", "", text)


def _pleads(text: str) -> bool:
    """Whether ``text`` only asks for help: "Can you help?", "could someone check?", or a request quoted from someone
    else ("> Can someone confirm the numbers?"). "Can you tell me the launch date?" asks for something."""
    rest = _unmarked(text)
    found = _REQUEST.match(rest) or _POSSIBLE.match(rest)
    if found is None or _WH.search(rest):
        return False
    return text.lstrip().startswith(">") or len(re.findall(r"\w+", rest[found.end():])) <= 1


def _requests(q: str, at: int) -> bool:
    """Whether the clause at ``at`` asks something of the assistant ("do you know", "would it be possible to")."""
    return bool(_REQUEST.match(q, at) or _POSSIBLE.match(q, at))


def _inner(q: str, at: int, after: str) -> tuple[str, str]:
    inner = q[at:]
    if "?" not in re.split(r"(?<=\w)\s?[.!]+\s", inner, maxsplit=1)[0]:
        # unpunctuated (or only a later sentence has the mark: "... dont know. help?"): what is said after the
        # question is an aside
        tail = _TRAILING.search(inner, 1)
        if tail is not None:
            inner, after = inner[: tail.start()], " ".join(p for p in (inner[tail.start():].strip(), after) if p)
    inner = re.sub(r"^(?:if|whether)\s+", "did ", inner, flags=re.IGNORECASE)
    inner = re.sub(r"[\s,.!-]*,\s*(?:thanks?(?: you)?|thx|ty|cheers|please|pls|lmk|asap|(?:is it|it is|it'?s|if) possible)"
                   r"[\s.!]*(?=\?|$)", "", inner,
                   flags=re.IGNORECASE)
    aside = " ".join(p for p in (q[:at].strip(" ,:;.!-"), after) if p)
    return inner[:1].upper() + inner[1:], aside


# Where a second question starts inside the first: ", and when ...", "; did they ...", " also who ...", " / how much".
_SECOND = re.compile(
    r"(?:,?\s+(?:and|oh and|plus|also|and also|btw|as well as|n|&|(?:and\s+)?(?:furthermore|moreover|additionally)|"
    r"and then(?: also)?|(?:and\s+)?(?:then\s+)?the other (?:thing|question|one) (?:was|is))\s+"
    r"(?:(?:also|second(?:ly)?|third(?:ly)?|finally|lastly)\s*,?\s+)?|"
    r"\s*;\s*(?:and\s+)?|,\s+(?:also|plus|btw|furthermore|moreover|additionally)\s+|\s+\+\s+|"
    r"\s+[-\u2013\u2014(]+" + _JOIN_ASIDE + r")(?=" + _OPENS + r")", re.IGNORECASE)
_FIRST_WH = re.compile(r"^(?:(?:by|on|until) )?(?:who|whom|whose|what|when|where|which|why|"
                       r"how(?: much| many| long)?)\b|^" + _QWORD + r"\b", re.IGNORECASE)
# Items of a list ("1. ...", "a) ...", "- ...") and " / ": each may be a question of its own.
_ITEM = re.compile(r"(?:^|\s)(?:\d{1,2}[.)]|[a-e]\)|\((?:\d{1,2}|[a-e]|i{1,3}|iv|v)\))\s+|(?:^|\n)\s*(?:[-*\u2022]|"
                   r"(?:i{1,3}|iv|vi{0,3})[.)]|q\d{1,2}\s*[:.)-])\s+|\s+/\s+", re.IGNORECASE)
# Words that open a later question in a message ("oh and ...", "second, ...", "btw ...").
_THEN = re.compile(r"^(?:(?:and|oh|also|btw|plus|so|then|first off|first of all|to start|first|firstly|second|secondly|"
                   r"next|lastly|finally|one more|"
                   r"another one)[\s,:;-]+){0,3}", re.IGNORECASE)


def split_questions(question: str) -> list[str]:
    """The questions asked in one message: "How much will the pilot cost? And who signs?", "Did they hire her, and
    when does she start?", "first, who ... second, did ...", "1. ... 2. ..." and "How much will it cost and who
    pays?" are two each; "Who will send the contract and when?" asks when of the same thing ("When will send the
    contract?"). One question comes back as it was asked."""
    text = _ITEM.sub("\n", _marks_said(str(question)))
    pieces = [" ".join(p.split()) for p in re.split(r"\n+|(?<=[?.!])\s+", text)]
    asked: list[str] = []
    holds: list[bool] = []  # whether each of them holds a question yet ("two things:" does not)
    for piece in filter(None, pieces):
        is_question = _is_question(piece)
        if asked and (not is_question or not holds[-1]):
            # "... ? thanks", "Sorry? Who ...": not a question of its own; a line after an unpunctuated question ends
            # it ("who will send it\nSent from my iPhone")
            ends = holds[-1] and not is_question and not re.search(r"[?.!:;,]$", asked[-1])
            asked[-1] = f"{asked[-1]}{'.' if ends else ''} {piece}"
            holds[-1] = holds[-1] or is_question
        else:
            asked.append(piece)
            holds.append(is_question)
    questions: list[str] = []
    for piece in asked:
        inner, aside = split_question(piece)
        found = _SECOND.search(inner) if _asks(inner) and not SUMMARY_REQUEST.search(inner.lower()) else None
        first = inner[: found.start()].rstrip(" ,;") if found else ""
        if found is None or len(_WH.findall(first)) > 1 or not _asks(first):
            questions.append(piece)  # one question ("who said what and when" asks it loosely)
            continue
        second = inner[found.end():].rstrip(" ?.!")
        if second.endswith(")") and "(" not in second:  # "... (and while you're at it, who ...)", "... (and when)?"
            second = second[:-1].rstrip(" ?.!")
        if not re.search(r"\w", re.sub(r"^(?:(?:by|until|till)\s+)?\w+", "", second)):  # "... and (by) when?": of the same thing
            if not _WH.match(first):
                questions.append(piece)  # "Did they decide who will send it and when?": no second question to make
                continue
            second = f"{second} {_FIRST_WH.sub('', first).strip()}"
        tail = f" {aside}" if aside else ""
        questions += [f"{first.rstrip(' ?.!')}?{tail}", f"{second[:1].upper()}{second[1:]}?"]
    if len(questions) == 1:  # as asked, but with a line that ended an unpunctuated question ended by a full stop
        return [questions[0] if len(asked) == 1 else " ".join(str(question).split())]
    return questions


def _is_question(piece: str) -> bool:
    """Whether a piece of a message is a question of its own: asked with a question mark, or opening with a question
    word ("The client needs it by noon." is not; "oh and who ..." is)."""
    if _pleads(piece) or _GREETS.fullmatch(piece):
        return False  # "Can you help?" after a question, "hey, how are you?" ask nothing of the meeting
    rest = _unmarked(piece)
    if piece.startswith(">") and "?" not in piece and piece.endswith((".", "!")) and not (
            _FIRST_WH.match(rest) or _AUX_SUBJECT.match(rest)):
        return False  # a statement quoted from someone else's message ("> Let me know if anything is unclear.")
    if "?" in piece:
        return _asks(piece)
    rest = rest[_THEN.match(rest).end():]
    if _FIRST_WH.match(rest) or _AUX_SUBJECT.match(rest) or SUMMARY_REQUEST.match(rest.lower()) or _BUT_ASKS.match(rest):
        return True
    # "Wondering who will send it.": a question after a verb that embeds one
    return any(_EMBEDDING.search(rest[:found.start("start")]) for found in _CLAUSE.finditer(rest) if found.start("start"))


_EMBEDDING = re.compile(r"\b(?:" + _QUESTION_VERBS + r"|curious|(?:wanted|want|meant|like|have) to ask|"
                        r"(?:(?:just|also|i'?m|was)\s+|^)asking|tell me|tell us|idea)\s+$", re.IGNORECASE)
# "unrelated but what ...": a few words, "but", then a question word that does not open a clause of a statement ("... but
# when I checked it was gone")
_BUT_ASKS = re.compile(r"^(?:\S+\s+){0,3}?but\s+(?:who|whom|whose|what|when|where|which|why|how)\b"
                       r"(?!\s+(?:i|we|you|he|she|they|it)\b)", re.IGNORECASE)


def _asks(piece: str) -> bool:
    """Whether a piece of a message holds a question (a question word, or a summary request)."""
    return bool(SUMMARY_REQUEST.search(piece.lower())) or bool(_CLAUSE.search(piece))


def plain_question(question: str) -> str:
    """The question inside what was typed or said (see :func:`split_question`)."""
    return split_question(question)[0]
