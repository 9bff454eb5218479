"""Who is talking in a room whose peers joined with their names: their own audio track tells, not their voice.

A peer that joins a bot room with a display name has a microphone of its own; in each 20 ms frame of the mixed
room audio the mixer records the loudest speaking lane (app/rooms/mixer.py). Words spoken while a named participant's
lane was the loudest are theirs, whatever the voice diarizer thinks; words from peers without a name (a meeting
room's shared microphone, several people on one track) keep the diarizer's labels. The named participant's
label *is* their name, so it shows in captions, answers and action items, and ``forget: <name>`` removes exactly
what came from their microphone.

Frames travel with the audio: the bot queues a chunk's frames just before the session takes the chunk, and the
session's diarizer takes them back as the recogniser's audio reaches it, in the same order. Known limit: when the
recogniser falls so far behind that the session's audio ring drops its oldest audio, the frames queued for that
audio are not dropped with it, and later words are matched to frames that many seconds early.
"""

from __future__ import annotations

import collections
import math
import re
import threading
from collections import Counter
from typing import TYPE_CHECKING, Sequence

from app.rooms.mixer import ASR_RATE, MIX_FRAME
from app.text.speakers import checked_name
from encoders.errors import InputError

if TYPE_CHECKING:
    import numpy as np

    from app.live.session_speech import StreamingDiarizer
    from encoders.asr import Word
    from encoders.online_diarize import LabelChange

FRAMES_PER_SECOND = ASR_RATE / MIX_FRAME
UNNAMED = ""  # a frame whose loudest lane belongs to a peer without a name: the voice diarizer decides
_RESERVED = re.compile(r"^speaker[_ ]?\d+$", re.IGNORECASE)  # the diarizer's labels


def display_name(name: str) -> str:
    """A participant's name as given at join, spaces collapsed; InputError when it cannot be a speaker's name."""
    name = checked_name(name, "a participant's name")
    if not name.isprintable():
        raise InputError("a participant's name is printable characters only")
    if _RESERVED.match(name):
        raise InputError(f"{name!r} looks like a diarizer label; join with the name people know you by")
    return name


class Participants:
    """A room's named participants (peer id -> name) and the frames of speech attributed to them, queued
    in the order their audio reaches the meeting."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # peer id -> display name (kept after the peer leaves: queued frames)
        self.present: set[str] = set()  # peer ids in the room now
        self._frames: collections.deque[str | None] = collections.deque()
        self._lock = threading.Lock()  # the bot's loop queues, a session's recogniser thread takes

    def add(self, peer_id: str, name: str) -> str:
        """Register a joining peer's name; a name another peer in the room has now is refused."""
        name = display_name(name)
        with self._lock:
            if any(self.names[p].lower() == name.lower() for p in self.present if p != peer_id):
                raise InputError(f"{name!r} is already in this room; join with another name")
            self.names[peer_id] = name
            self.present.add(peer_id)
        return name

    def leave(self, peer_id: str) -> None:
        with self._lock:
            self.present.discard(peer_id)

    def speakers_of(self, lanes: Sequence[str | None]) -> list[str | None]:
        """Mixer lanes ("<peer id>:<track id>") as speakers: a name, UNNAMED or None (nobody spoke)."""
        with self._lock:
            return [None if lane is None else self.names.get(lane.split(":", 1)[0], UNNAMED) for lane in lanes]

    def queue(self, frames: Sequence[str | None]) -> None:
        """Frames of audio about to be given to the room's session."""
        with self._lock:
            self._frames.extend(frames)

    def unqueue(self, count: int) -> None:
        """The last ``count`` queued frames' audio never reached the session (it refused the chunk)."""
        with self._lock:
            for _ in range(min(count, len(self._frames))):
                self._frames.pop()

    def __len__(self) -> int:
        """Frames queued and not yet taken by a session."""
        with self._lock:
            return len(self._frames)

    def clear(self) -> None:
        """Drop the queued frames (their audio went to a session that is done)."""
        with self._lock:
            self._frames.clear()

    def take(self, count: int) -> list[str | None]:
        """The next ``count`` frames (None where none was queued: audio fed around the bot, as in a resume)."""
        with self._lock:
            return [self._frames.popleft() if self._frames else None for _ in range(count)]

    def diarizer(self, voices: StreamingDiarizer) -> TrackDiarizer:
        return TrackDiarizer(voices, self)


class TrackDiarizer:
    """A session's diarizer in a room with named participants: their words by track, the rest by voice."""

    def __init__(self, voices: StreamingDiarizer, participants: Participants) -> None:
        self.voices = voices
        self.participants = participants
        self._timeline: list[str | None] = []  # per 20 ms frame of the audio inserted so far
        self._remainder = 0  # samples inserted past the last whole frame
        self._words = 0  # words labelled so far (the voice diarizer's word numbering)
        self._by_track: set[int] = set()  # word numbers labelled by track: re-clusterings do not move them

    def insert_audio(self, samples: np.ndarray) -> None:
        self.voices.insert_audio(samples)
        whole, self._remainder = divmod(self._remainder + len(samples), MIX_FRAME)
        self._timeline.extend(self.participants.take(whole))

    def label_words(self, words: Sequence[Word]) -> list[str]:
        labels = list(self.voices.label_words(words))
        for i, word in enumerate(words):
            name = self.speaker_at(word.start, word.end)
            if name:
                labels[i] = name
                self._by_track.add(self._words + i)
        self._words += len(words)
        return labels

    def take_changes(self) -> list[LabelChange]:
        return [c for c in self.voices.take_changes() if c.index not in self._by_track]

    def speaker_at(self, start: float, end: float, widen: float = 0.3) -> str | None:
        """The named participant who spoke most of [start, end] (seconds of inserted audio), if a named one
        did; a word with no speaking frame (its times are the recogniser's estimate) looks ``widen`` s around."""
        for pad in (0.0, widen):
            a = max(0, int((start - pad) * FRAMES_PER_SECOND))
            b = max(a + 1, math.ceil((end + pad) * FRAMES_PER_SECOND))
            spoke = Counter(f for f in self._timeline[a:b] if f is not None)
            if spoke:
                name, _ = spoke.most_common(1)[0]
                return name or None  # UNNAMED: the voice diarizer's label stands
        return None
