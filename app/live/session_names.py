"""Who speaks in a live meeting: the names its diarizer labels go by, and a user's renames."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from app.text.speakers import checked_name, is_anonymous, rename_speakers, speaker_label, speaker_names
from app.text.transcript import Transcript, TranscriptWord, realign_to_sentences, turns_from_words
from encoders.errors import InputError

if TYPE_CHECKING:
    from threading import RLock


class SpeakerNames:
    """The names a meeting gives its speakers' labels: those people call each other (app/text/speakers.py), with
    those known beforehand (``kept``: a bot room's participants, a rename, names held before a forget) given first
    and a forgotten speaker's (``forgotten``) given to no one.

    Works on the session's word list under the session's lock; the named transcript is built once per session
    ``version`` (a change here moves it on with ``bump``), since every line closed and every snapshot reads it.
    """

    def __init__(self, lock: RLock, words: list[TranscriptWord], hotwords: Sequence[str], *,
                 version: Callable[[], int], bump: Callable[[], None], source: Callable[[], str],
                 heard: Callable[[], float], forgotten: tuple[str, ...] = (),
                 kept: dict[str, str] | None = None) -> None:
        """``source`` and ``heard`` (stream seconds) are the transcript's; ``hotwords``: names the meeting expects."""
        self._lock = lock
        self._words = words
        self._hotwords = hotwords
        self._version = version
        self._bump = bump
        self._source = source
        self._heard = heard
        self.forgotten: tuple[str, ...] = forgotten  # speakers forgotten from this meeting: their names go to no one
        self.kept: dict[str, str] = {} if kept is None else kept  # label -> name known before: given first
        self._cache: tuple[int, Transcript, dict[str, str]] | None = None

    def names(self) -> dict[str, str]:
        """Label -> name, for the labels the meeting names."""
        return self._named()[1]

    def transcript(self) -> Transcript:
        """Committed turns with the names people call each other (SPEAKER_xx until someone is named)."""
        return self._named()[0]

    def _named(self) -> tuple[Transcript, dict[str, str]]:
        """The committed transcript with speaker names, and the label -> name map."""
        with self._lock:
            if self._cache is None or self._cache[0] != self._version():
                raw = self._raw_transcript()
                names = speaker_names(raw, self._hotwords, self.forgotten, self.kept)
                self._cache = (self._version(), rename_speakers(raw, names), names)
            return self._cache[1], self._cache[2]

    def _raw_transcript(self) -> Transcript:
        words = list(self._words)
        turns = turns_from_words(realign_to_sentences(words)) if words else []
        return Transcript(turns=turns, source=self._source(), duration=round(self._heard(), 3))

    def speakers(self) -> dict[str, str | None]:
        """Each diarizer label that has spoken, with the name the meeting gives it (None until named)."""
        names = self.names()
        with self._lock:
            return {label: names.get(label) for label in dict.fromkeys(w.speaker for w in self._words)}

    def label(self, speaker: str, speakers: dict[str, str | None] | None = None) -> str:
        """The label ``speaker`` (a label, or the name it goes by now) means; InputError listing the speakers."""
        speakers = self.speakers() if speakers is None else speakers
        return speaker_label(speaker.strip(), list(speakers), {k: v for k, v in speakers.items() if v})

    def keep(self, names: dict[str, str]) -> None:
        """Labels that already are people's names (a bot room's named participants): theirs before any vote."""
        with self._lock:
            self.kept = {**self.kept, **names}
            self._bump()

    def keep_named(self, labels: Iterable[str]) -> None:
        """A transcript's speakers that are names already stay so ("Hi guys" does not rename them); a rename stays."""
        given = {label: label for label in labels
                 if label.strip() and not is_anonymous(label) and label not in self.kept}
        if given:
            self.keep(given)

    def rename(self, speaker: str, name: str) -> tuple[str, str | None, float]:
        """Call ``speaker`` (a label, or the name it goes by now) ``name`` from now on; returns the label, what the
        note for the KV says (None when nothing changed: no note) and the meeting time it goes at (the last word's
        end). Lines already in the KV keep the speaker as they were written, so the model reads the rename in a
        note after them, where it reads the meeting."""
        name = checked_name(name)
        speakers = self.speakers()
        label = self.label(speaker, speakers)
        if name in speakers or any(v == name for k, v in speakers.items() if k != label):
            raise InputError(f"{name!r} already names another speaker of this meeting")
        with self._lock:
            kept = {k: v for k, v in self.kept.items() if v != name and k != label}
            self.kept = {**kept, label: name}
            self.forgotten = tuple(n for n in self.forgotten if n != name)
            self._bump()
            at = self._words[-1].end if self._words else 0.0
        if speakers.get(label) == name:
            return label, None, at
        written = [n for n in dict.fromkeys((speakers.get(label), label)) if n and n != name]
        return label, f"The speaker written above as {' or '.join(written)} is {name}.", at
