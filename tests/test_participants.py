"""Named participants of a bot room (app/rooms/participants.py): their words by their own track, the rest by voice."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from app.rooms.mixer import MIX_FRAME
from app.rooms.participants import UNNAMED, Participants, display_name
from encoders.errors import InputError
from encoders.online_diarize import LabelChange


class Voices:
    """A voice diarizer stand-in: everyone is SPEAKER_00; a re-clustering moves every word so far to SPEAKER_01."""

    def __init__(self) -> None:
        self.samples, self.words = 0, 0

    def insert_audio(self, samples):
        self.samples += len(samples)

    def label_words(self, words):
        self.words += len(words)
        return ["SPEAKER_00"] * len(words)

    def take_changes(self):
        return [LabelChange(i, "SPEAKER_00", "SPEAKER_01") for i in range(self.words)]


def _word(start: float, end: float):
    return SimpleNamespace(text="w", start=start, end=end, probability=1.0)


def test_display_names_are_checked():
    assert display_name("  Ana   Lima ") == "Ana Lima"
    for bad in ("", "   ", "1234", "x" * 41, "SPEAKER_01", "speaker 3", "Ana\x00"):
        with pytest.raises(InputError):
            display_name(bad)


def test_a_name_is_one_peer_at_a_time():
    room = Participants()
    room.add("p1", "Alice")
    with pytest.raises(InputError, match="already in this room"):
        room.add("p2", "alice")
    room.leave("p1")
    assert room.add("p2", "Alice") == "Alice"  # she left: the name is free (e.g. she rejoins from another device)
    assert room.speakers_of(["p2:track", "p9:track", None]) == ["Alice", UNNAMED, None]


def test_words_follow_the_named_track_and_the_rest_the_voices():
    room = Participants()
    room.add("a", "Alice")
    second = 50  # frames
    # 0-1 s Alice's track, 1-2 s an unnamed peer, 2-3 s nobody, then the queue runs dry (audio fed around the bot)
    room.queue(room.speakers_of(["a:t"] * second + ["z:t"] * second + [None] * second))
    diarizer = room.diarizer(Voices())
    for _ in range(4):  # the recogniser's thread inserts audio in pieces that are not whole frames
        diarizer.insert_audio(np.zeros(int(0.9 * 16000), np.float32))
    assert len(room) == 0 and len(diarizer._timeline) == int(3.6 * 16000) // MIX_FRAME
    labels = diarizer.label_words([_word(0.1, 0.4), _word(1.2, 1.5), _word(2.3, 2.6), _word(1.9, 2.1),
                                   _word(2.5, 2.8)])
    # Alice by track; the unnamed peer by voice; a word in silence near nobody by voice; one that straddles the
    # unnamed peer and silence by voice; a word whose window is silent but near no named frame by voice
    assert labels == ["Alice", "SPEAKER_00", "SPEAKER_00", "SPEAKER_00", "SPEAKER_00"]
    # a word the recogniser timed just after Alice stopped: the widened window finds her
    room.queue(room.speakers_of(["a:t"] * 10 + [None] * 40))
    diarizer.insert_audio(np.zeros(MIX_FRAME * 50, np.float32))
    assert diarizer.label_words([_word(3.6 + 0.25, 3.6 + 0.4)]) == ["Alice"]
    # re-clusterings of the voices never move a word the track gave
    moved = {c.index for c in diarizer.take_changes()}
    assert moved == {1, 2, 3, 4}


def test_frames_of_refused_audio_are_taken_back():
    room = Participants()
    room.queue(["x", "y"])
    room.queue(["z"] * 3)
    room.unqueue(3)
    assert room.take(4) == ["x", "y", None, None]
