"""Spoken sentences as minutes: "I think we should go with rubber." -> "Marketing thought the group should
go with rubber."

A summary stitched from quotes says "I" for five different people and "we" for nobody in particular. Minutes
report speech: the speaker by name, the group as "the group", the past tense. The rewrite is shallow and
rule-based (a 270M model cannot be trusted to paraphrase without changing facts): first-person pronouns
become the speaker or "the group", the verb right after such a subject and every present auxiliary ("is",
"can", "it's") go into the past tense, spoken forms are written out ("gonna", "L_C_D_s") and empty
intensifiers ("really", "basically") go. Nothing else of the speaker's wording changes. On QMSum validation
the rewrite raised query-based summaries' ROUGE-Lsum by 1.5 to 3 points, for minutia's selection and for both
baselines alike (bench/qmsum_summary.py, docs/benchmarks.md).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from app.answering.spoken import capitalise, tidy

if TYPE_CHECKING:
    from app.text.sentences import Sentence

GROUP = "the group"

# The verb right after a first-person subject, put into the past tense ("I think" -> "Marketing thought").
_PAST = {
    "am": "was", "is": "was", "are": "was", "have": "had", "has": "had", "do": "did", "don't": "didn't",
    "doesn't": "didn't", "can": "could", "can't": "couldn't", "cannot": "could not", "will": "would",
    "won't": "wouldn't", "shall": "would", "think": "thought", "guess": "guessed", "know": "knew", "want": "wanted",
    "need": "needed", "say": "said", "mean": "meant", "feel": "felt", "like": "liked", "agree": "agreed",
    "disagree": "disagreed", "suggest": "suggested", "believe": "believed", "see": "saw", "go": "went",
    "get": "got", "find": "found", "prefer": "preferred", "propose": "proposed", "remember": "remembered",
    "hope": "hoped", "expect": "expected", "understand": "understood", "reckon": "reckoned", "try": "tried",
    "wonder": "wondered", "doubt": "doubted", "plan": "planned", "worry": "worried", "recommend": "recommended",
    "haven't": "hadn't", "hasn't": "hadn't",
}
# "I'd" is "I had" before these and before a word in -ed ("I'd seen it", "we'd already decided").
_HAD = frozenset("been seen done gone had got known taken given made said thought already never just better".split())
# An auxiliary before the subject: a question or an inversion ("Do we need it?"), whose verb stays as said.
_INVERTED = re.compile(r"\b(?:do|does|did|can|ca|wo|could|will|would|should|shall|may|might|must|am|are|is|"
                       r"have|has|had|was|were)(?:n't)?\s+$", re.I)
# "I" as a numeral ("World War I", "phase I"), not the speaker.
_NUMERAL = re.compile(r"\b(?:war|phase|part|type|class|stage|level|grade|chapter|section|act|volume|henry|louis|"
                      r"george|elizabeth|charles|edward|james|william)\s+$", re.I)
# Any other present-tense auxiliary goes into the past too ("The remote is too big" -> "was"): minutes tell
# what was said.
_TENSE = {
    "is": "was", "are": "were", "will": "would", "can": "could", "don't": "didn't", "doesn't": "didn't",
    "won't": "wouldn't", "can't": "couldn't", "isn't": "wasn't", "aren't": "weren't", "has": "had",
    "it's": "it was", "that's": "that was", "there's": "there was", "they're": "they were", "you're": "you were",
    "they'll": "they would", "it'll": "it would", "that'll": "that would", "you'll": "you would",
}
_AUXILIARIES = frozenset(w for w in _TENSE if " " not in _TENSE[w])  # not "it's" -> "it was"
_PRESENT = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in sorted(_TENSE, key=len, reverse=True)) + r")(?!')\b",
                      re.I)
_CONTRACTED = {"'m": "am", "'ve": "have", "'ll": "will", "'d": "would", "'re": "are"}
# A first-person subject, an optional adverb, and the word after it (the verb, when there is one).
_SUBJECT = re.compile(
    r"\b(I|[Ww]e)\b('m|'ve|'ll|'d|'re)?(?:(\s+(?:also|just|really|actually|still|never|always|all|definitely|"
    r"certainly|probably|already)\s+|\s+)([A-Za-z']+))?")
_OBJECTS = [
    (re.compile(r"\bmy\b", re.I), "{s}'s"), (re.compile(r"\bmine\b"), "{s}'s"),
    (re.compile(r"\b(?:me|myself)\b"), "{s}"), (re.compile(r"\bour\b", re.I), f"{GROUP}'s"),
    (re.compile(r"\bours\b"), f"{GROUP}'s"), (re.compile(r"\b(?:us|ourselves)\b"), GROUP),
    (re.compile(r"\blet's\b", re.I), f"{GROUP} should"),
]
_SPOKEN = [
    (re.compile(r"\bgonna\b", re.I), "going to"), (re.compile(r"\bwanna\b", re.I), "want to"),
    (re.compile(r"\bgotta\b", re.I), "got to"), (re.compile(r"\bkinda\b", re.I), "kind of"),
    (re.compile(r"\bsorta\b", re.I), "sort of"), (re.compile(r"(?<!\w)'cause\b", re.I), "because"),
    (re.compile(r"\bdunno\b", re.I), "don't know"),
]
_SPELLED = re.compile(r"\b((?:[A-Za-z]_)+)(s?)\b")  # AMI's spelled-out acronyms: "L_C_D_s" -> "LCDs"
_EMPTY = re.compile(r"\b(?:really|actually|basically)\b,?\s*", re.I)
# A word cut off after its first letter and said again ("the w- window"); never "a" or "i", nor next to a digit.
_FRAGMENT = re.compile(r"(?<![\w'-])([b-hj-z])\s+(?=\1[a-z])", re.I)


# Words that fill speech and say nothing in minutes (an answer keeps them: "a kind of bug"), and the words that open
# a turn ("So, yeah,").
_SPOKEN_FILLER = re.compile(r"\b(?:you know|I mean|sort of|kind of),?\s*", re.I)
_OPENER = re.compile(r"^(?:(?:so|and|but|yeah|yes|okay|ok|well|oh|right|alright|now|then|like)\b[,.]?\s*)+", re.I)


def as_minutes(text: str) -> str:
    """A spoken sentence made readable for minutes: tidied as an answer quotes it (app/answering/spoken.tidy:
    hesitations, stutters, cut-off words), without fillers ("you know") and the words that open it ("So, yeah,").
    Wording is otherwise the speaker's."""
    text = _OPENER.sub("", _SPOKEN_FILLER.sub("", tidy(text))).strip(" ,")
    return capitalise(re.sub(r"\s+([,.?!])", r"\1", re.sub(r"\s{2,}", " ", text)))


def minutes_line(sentence: "Sentence") -> str:
    """One said sentence as a line of minutes."""
    return reported(as_minutes(sentence.text), sentence.speaker)


def _past(m: re.Match[str]) -> str:
    said, past = m.group(0), _TENSE[m.group(0).lower()]
    before = m.string[:m.start()].rstrip(" \"'(")
    if said.lower() in _AUXILIARIES and (not before or before[-1] in ".?!"):
        return said  # the sentence starts with it: a command or a question ("Don't press the red button.")
    return past[:1].upper() + past[1:] if said[:1].isupper() else past


def speaker_name(label: str) -> str:
    """A speaker label as minutes name it: "Mr. Ian Blackford (Ross, Skye, Lib.)" -> "Mr. Ian Blackford"."""
    return re.sub(r"\s*\([^)]*\)", "", label).strip() or label


def reported(text: str, speaker: str) -> str:
    """``text`` (one spoken sentence, already tidied) as a line of minutes attributed to ``speaker``."""
    name = speaker_name(speaker) or "the speaker"
    text = _SPELLED.sub(lambda m: m.group(1).replace("_", "") + m.group(2), text)
    for pattern, written in _SPOKEN:
        text = pattern.sub(written, text)
    text = _FRAGMENT.sub("", _EMPTY.sub("", text))

    def subject(m: re.Match[str]) -> str:
        before = m.string[:m.start()]
        if m.group(1) == "I" and _NUMERAL.search(before):
            return m.group(0)
        who = name if m.group(1) == "I" else GROUP
        gap, word = m.group(3) or "", m.group(4) or ""
        if m.group(2):  # "I'm", "we'll": the contraction is the verb
            verb = _CONTRACTED[m.group(2).lower()]
            if verb == "would" and (word.lower() in _HAD or word.lower().endswith("ed")):
                verb = "had"
            return f"{who} {_PAST.get(verb, verb)}{gap}{word}"
        if _INVERTED.search(before):  # "Do we need it?": the verb after the subject stays
            return f"{who}{gap}{word}"
        return f"{who}{gap}{_PAST.get(word.lower(), word)}"

    text = _SUBJECT.sub(subject, text)
    for pattern, written in _OBJECTS:
        text = pattern.sub(lambda _, line=written.format(s=name): line, text)
    text = _PRESENT.sub(_past, text)
    text = re.sub(r"\s{2,}", " ", text).strip(" ,")
    text = re.sub(rf"([.?!]\s+){GROUP}\b", rf"\1{GROUP.capitalize()}", text)
    return text[:1].upper() + text[1:]
