"""A small text normaliser for scoring transcripts against the sample references.

``normalize("Bob will pay $12,000 on March 14th.")`` and
``normalize("Bob will pay twelve thousand dollars on March fourteenth")`` both give
``"bob will pay 12000 dollars on march 14"``.

Rules (deliberately simple): lowercase; ``$N`` -> ``N dollars``; ``%`` -> ``percent``;
digit separators and ordinal suffixes dropped (``12,000`` -> ``12000``, ``14th`` -> ``14``);
runs of English number words (cardinal or ordinal) -> digits; a few contractions
expanded; all other punctuation removed; whitespace collapsed.
"""

from __future__ import annotations

import re

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
NUMBER_WORDS = frozenset(_UNITS) | frozenset(_TENS) | frozenset(_SCALES)  # the words a spelled-out number is made of
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6,
    "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11,
    "twelfth": 12, "thirteenth": 13, "fourteenth": 14, "fifteenth": 15,
    "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19,
    "twentieth": 20, "thirtieth": 30,
}
_CONTRACTIONS = {
    "let's": "let us", "we'll": "we will", "i'll": "i will", "it's": "it is",
    "that's": "that is", "can't": "cannot", "won't": "will not", "don't": "do not",
    "we're": "we are", "i'm": "i am", "they're": "they are", "isn't": "is not",
    "doesn't": "does not", "didn't": "did not", "haven't": "have not",
    "hasn't": "has not", "we've": "we have", "what's": "what is",
    "okay": "ok",
}
# Words that are numbers only in a numeric run ("one more thing" stays "1 more thing",
# which is fine because both sides are normalised the same way).
_NUMBER_WORDS = set(_UNITS) | set(_TENS) | set(_SCALES) | set(_ORDINALS)


def _words_to_number(words: list[str]) -> int:
    total, current = 0, 0
    for w in words:
        if w in _UNITS:
            current += _UNITS[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w in _ORDINALS:
            current += _ORDINALS[w]
        elif w == "hundred":
            current = max(current, 1) * 100
        else:  # thousand, million
            total += max(current, 1) * _SCALES[w]
            current = 0
    return total + current


_LONE_WORDS = frozenset({"one", "first", "second"})  # alone, these are seldom a figure ("one more week", "a second")


def numbers_as_digits(tokens: list[str]) -> list[str]:
    """Lower-case word tokens with spelled-out numbers as digits (``twelve thousand`` -> ``12000``), so that a
    question and a line match whichever way each wrote the figure; a lone "one", "first" or "second" stays."""
    return _convert_number_words(tokens, keep_lone=True)


def _convert_number_words(tokens: list[str], keep_lone: bool = False) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(tokens):
        if tokens[i] in _NUMBER_WORDS and tokens[i] not in _SCALES:
            j = i
            run: list[str] = []
            while j < len(tokens):
                t = tokens[j]
                if t in _NUMBER_WORDS:
                    run.append(t)
                    j += 1
                    if t in _ORDINALS:  # an ordinal ends the number
                        break
                elif t == "and" and run and run[-1] == "hundred" and j + 1 < len(tokens) \
                        and tokens[j + 1] in _NUMBER_WORDS:
                    j += 1  # "two hundred and five"
                else:
                    break
            if keep_lone and len(run) == 1 and run[0] in _LONE_WORDS:
                out.append(run[0])
                i = j
                continue
            # "twenty twenty five" style years are rare here; a unit after a unit
            # (e.g. "one two") splits into separate numbers.
            chunk: list[str] = []
            for t in run:
                if chunk and (t in _UNITS or t in _TENS or t in _ORDINALS) and \
                        (chunk[-1] in _UNITS or chunk[-1] in _ORDINALS or
                         (chunk[-1] in _TENS and t in _TENS)):
                    out.append(str(_words_to_number(chunk)))
                    chunk = []
                chunk.append(t)
            if chunk:
                out.append(str(_words_to_number(chunk)))
            i = j
        else:
            out.append(tokens[i])
            i += 1
    return out


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """A count as people write it: "1 word", "8 words", "2 people" (``plural`` where it is not noun + s)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def plain_figures(text: str) -> str:
    """Digit groups joined and ordinal suffixes dropped: "12,000" -> "12000", "10th" -> "10"."""
    text = re.sub(r"(\d),(?=\d{3}\b)", r"\1", text)
    return re.sub(r"(\d+)(st|nd|rd|th)\b", r"\1", text)


def normalize(text: str) -> str:
    t = text.lower().replace("\u2019", "'")
    t = re.sub(r"\$\s?(\d[\d,]*(?:\.\d+)?)", r"\1 dollars", t)
    t = plain_figures(t)
    t = t.replace("%", " percent")
    t = re.sub(r"(\d)-(\d)", r"\1 \2", t)
    t = re.sub(r"[a-z]+'[a-z]+", lambda m: _CONTRACTIONS.get(m.group(0), m.group(0)), t)
    t = re.sub(r"\b[a-z]+\b", lambda m: _CONTRACTIONS.get(m.group(0), m.group(0)), t)
    t = t.replace("-", " ")
    t = re.sub(r"\bcan not\b", "cannot", t)
    t = re.sub(r"[^a-z0-9' ]+", " ", t)
    t = t.replace("'", "")
    tokens = _convert_number_words(t.split())
    return " ".join(tokens)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate after :func:`normalize` on both sides (needs ``jiwer``)."""
    import jiwer

    return jiwer.wer(normalize(reference), normalize(hypothesis))


if __name__ == "__main__":  # tiny self-check
    cases = [
        ("It costs $12,000.", "it costs 12000 dollars"),
        ("It costs twelve thousand dollars", "it costs 12000 dollars"),
        ("on Friday, March 14th", "on friday march 14"),
        ("on Friday March fourteenth", "on friday march 14"),
        ("two hundred users", "200 users"),
        ("a five percent discount", "a 5 percent discount"),
        ("a 5% discount", "a 5 percent discount"),
        ("Let's meet at ten", "let us meet at 10"),
        ("twenty one days", "21 days"),
        ("fifty thousand", "50000"),
        ("we can not go", "we cannot go"),
    ]
    for src, want in cases:
        got = normalize(src)
        assert got == want, (src, got, want)
    print("ok")


# A hesitation said as a word ("uhm", "ehm", "hmm", "mm-hmm"): transcribers write it, and a parser takes it for a noun.
_HESITATION = re.compile(r"(?:u+h+m*|u+m+|e+h+m*|e+r+m*|h+m+|m+-?h+m+|a+h+|er)", re.IGNORECASE)


def is_hesitation(word: str) -> bool:
    """"uhm", "Ehm,", "mm-hmm"; not an acronym written in capitals ("HMM", the hidden Markov model)."""
    word = word.strip(".,!?")
    return bool(_HESITATION.fullmatch(word)) and not (len(word) > 1 and word.isupper())
