"""Who, in a meeting's lines: who said a line where the transcript does not tell its speakers apart, whom a line
has do something ("Anna and Peter should pick the video"; "But try sending him an e-mail" is the listener's), whom
it is said to, who commits ("I will...", "Maria, can you...") and whose action items are whose.

Read from the lines' grammar (app/answering/question_parse.py) and the turn order, for the answer finder's who-
questions (app/answering/answers.py).
"""

from __future__ import annotations

import re
from typing import Sequence

from app.answering.actions import ActionItem, extract_action_items
from app.answering.agents import LISTENER, SPEAKER, task_doer
from app.answering.meeting_record import join_names
from app.answering.question_parse import addressed, named_subjects, tells_the_listener
from app.answering.questions import STOPWORDS
from app.answering.retrieval import stems
from app.text.sentences import Sentence
from app.text.speakers import is_a_name, is_anonymous
from app.text.transcript import SLIDE_SPEAKER, Transcript


class People:
    """One meeting's lines, read for who does, says and is told what."""

    def __init__(self, transcript: Transcript, sentences: Sequence[Sentence]):
        self.transcript = transcript
        self.sentences = sentences
        self._items: list[ActionItem] | None = None

    @property
    def items(self) -> list[ActionItem]:
        """The meeting's action items, extracted at the first need."""
        if self._items is None:
            self._items = extract_action_items(self.transcript)
        return self._items

    def said(self, item: ActionItem) -> Sentence | None:
        """The sentence an action item was given in: of its turn, the one that says most of its task."""
        said = [s for s in self.sentences if s.turn_index == item.turn_index]
        task = set(stems(item.task))
        return max(said, key=lambda s: len(task & set(stems(s.text))), default=None)

    def doer(self, sentence: Sentence, question: str) -> str:
        """Who a line has do something: the people it names as doing it ("Anna and Peter should pick the video"),
        else someone it names, else the one it tells to ("But try sending him an e-mail": the person spoken to),
        else who said it."""
        asked = [n for n in named_subjects(sentence.text)
                 if not re.search(rf"\b{re.escape(n.strip('[]'))}\b", question, re.IGNORECASE)]
        if asked:
            return join_names([n.strip("[]") for n in asked])
        speaker = self.speaker(sentence, question)
        about = person_in(sentence, self.transcript.speakers, question, speaker)
        if about == speaker and tells_the_listener(sentence.text):
            return self.listener(sentence, question) or speaker
        return about

    def task_doer(self, sentence: Sentence, question: str, task: str) -> str | None:
        """Who the line's grammar has do ``task`` (app/answering/agents.py), named: the speaker, the one spoken to,
        or the person it names; None when its grammar says no one."""
        doer = task_doer(sentence.text, task)
        if doer == SPEAKER:
            doer = self.speaker(sentence, question)
        elif doer == LISTENER:
            doer = self.listener(sentence, question)
        named = (doer or "").replace("[", "").replace("]", "")  # "[PERSON3]" is answered as "PERSON3", as doer() does
        if named and not re.search(rf"\b{re.escape(named)}\b", question, re.IGNORECASE):
            return named
        return None  # nobody, or the one the question names ("Who is Anna waiting for?" is not Anna)

    def listener(self, sentence: Sentence, question: str) -> str | None:
        """The one a line is said to: the person it calls by name, else who spoke last before it (the line
        answers them); None where the transcript tells no speakers apart."""
        called = [n.strip("[]") for n in addressed(sentence.text)
                  if not re.search(rf"\b{re.escape(n.strip('[]'))}\b", question, re.IGNORECASE)]
        if called:
            return called[0]
        if len(set(self.transcript.speakers)) < 2:
            return None
        at = next((i for i, s in enumerate(self.sentences) if s is sentence), None)
        for earlier in reversed(self.sentences[max(0, (at or 0) - _NAMED_BEFORE):at or 0]):
            if earlier.speaker != sentence.speaker and earlier.speaker != SLIDE_SPEAKER:
                return earlier.speaker
        return None

    def speaker(self, sentence: Sentence, question: str) -> str:
        """Who said a line. A transcript that names no speaker at all (one anonymous label: a text without names, a
        recording without a diarizer) still names people: the one who speaks is usually the last person spoken to by
        name shortly before ("So now Anna, if you can describe..." - "I was busy with exams"), so that person, else
        the label."""
        if not (is_anonymous(sentence.speaker) and len(set(self.transcript.speakers)) == 1):
            return sentence.speaker
        at = next((i for i, s in enumerate(self.sentences) if s is sentence), None)
        if at is None:
            return sentence.speaker
        for earlier in reversed(self.sentences[max(0, at - _NAMED_BEFORE):at]):
            names = [n.strip("[]") for n in addressed(earlier.text) if is_a_name(n.strip("[]"))
                     and not re.search(rf"\b{re.escape(n.strip('[]'))}\b", question, re.IGNORECASE)]
            if names:
                return names[-1]
        return sentence.speaker


_COMMIT = re.compile(r"\b(?:I will|I'll|I am going to|I'm going to|I can|I'll take|let me)\b", re.IGNORECASE)
_NAMED_COMMIT = re.compile(r"\b(?P<name>[A-Z][a-z]+)(?:,\s+(?:can|could|would|will) you|\s+will|'ll|\s+is going to)\b")


def committer(sentence: Sentence, speakers: Sequence[str]) -> str | None:
    """Who commits in this sentence: the speaker ("I will..."), or a participant asked or named."""
    match = _NAMED_COMMIT.search(sentence.text)
    if match and match["name"] in speakers:
        return match["name"]
    if _COMMIT.search(sentence.text):
        return sentence.speaker
    return None


# Names a transcript writes for people it does not name: "[PERSON3]", as anonymised meeting corpora write them.
_BRACKETED = re.compile(r"\[([A-Z][A-Za-z]*\d+)\]")  # "[PERSON3]", not "[Inaudible]"
_NAMED_BEFORE = 12  # sentences before a line of an unnamed speaker searched for the person spoken to
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I'll|I've|I'd)\b")  # the speaker as subject ("send it to me" is not)


def names_in(text: str, speakers: Sequence[str], question: str) -> list[str]:
    """The people a line names (participants, bracketed names, a name asked or committing), in order, less those
    the question already names."""
    names = [m["name"] for m in _NAMED_COMMIT.finditer(text)
             if m["name"].lower() not in STOPWORDS and is_a_name(m["name"])]  # "Monday will be fine" names nobody
    names += [m.group(1) for m in _BRACKETED.finditer(text)]
    names += [s for s in speakers if not is_anonymous(s) and re.search(rf"\b{re.escape(s)}\b", text)]
    return [n for n in dict.fromkeys(names) if not re.search(rf"\b{re.escape(n)}\b", question, re.IGNORECASE)]


def person_in(sentence: Sentence, speakers: Sequence[str], question: str, speaker: str | None = None) -> str:
    """The person a line is about: one it names (a participant, or a bracketed name) that the question does not
    already name, unless the speaker talks of themself; else its speaker (``speaker`` where known better than the
    line's label)."""
    speaker = speaker or sentence.speaker
    named = [n for n in names_in(sentence.text, speakers, question) if n not in (sentence.speaker, speaker)]
    if named and not _FIRST_PERSON.search(sentence.text):
        return named[0]
    return speaker
