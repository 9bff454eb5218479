"""What a reader of the live transcript sees stays put (issue 23): a closed line's words all carry its speaker,
and a re-clustering moves a closed line only as a whole, only when most of it moved, and only while it is recent."""

from __future__ import annotations

from threading import RLock

from app.live.events import SessionOutput
from app.live.session_speech import RELABEL_WINDOW_SECONDS, SpeechLines
from app.text.transcript import turns_from_words
from encoders.asr import Word
from encoders.online_diarize import LabelChange
from encoders.streaming import StreamUpdate


class ScriptedLabels:
    """A diarizer that gives the labels and corrections a test scripts (the online diarizer's calls)."""

    def __init__(self) -> None:
        self.labels: list[str] = []  # the labels the next label_words call returns
        self.changes: list[LabelChange] = []

    def insert_audio(self, samples) -> None:
        pass

    def label_words(self, words):
        labels, self.labels = self.labels, []
        return labels

    def take_changes(self):
        changes, self.changes = self.changes, []
        return changes


def _lines() -> tuple[SpeechLines, list, list]:
    words, lines = [], []
    output = SessionOutput(RLock(), lambda line, n: lines.append(line), lambda event: None, lambda: None)
    speech = SpeechLines(output, words, last_speaker=None, stream_seconds=lambda: 0.0, time_offset=lambda: 0.0,
                         names=dict)
    return speech, words, lines


def _say(speech: SpeechLines, diarizer: ScriptedLabels, text: str, labels: list[str], start: float) -> float:
    tokens = text.split()
    assert len(tokens) == len(labels)
    diarizer.labels = labels
    words = [Word(t, start + 0.4 * i, start + 0.4 * i + 0.3, 0.9) for i, t in enumerate(tokens)]
    speech._commit(StreamUpdate(words, [], words[-1].end), diarizer)
    return words[-1].end + 0.5


def test_a_closed_line_has_no_fragment_of_another_speaker():
    speech, words, lines = _lines()
    diarizer = ScriptedLabels()
    a, b = "SPEAKER_00", "SPEAKER_01"
    _say(speech, diarizer, "The login page is finished and tested.", [a, a, a, b, a, a, a], 0.0)
    assert [line.speaker for line in lines] == [a]
    assert {w.speaker for w in words} == {a}  # the one-word flip did not survive the line's close
    assert len(turns_from_words(words)) == 1


def test_a_correction_moves_a_recent_line_whole_or_not_at_all():
    speech, words, lines = _lines()
    diarizer = ScriptedLabels()
    a, b = "SPEAKER_00", "SPEAKER_01"
    t = _say(speech, diarizer, "Good morning everyone.", [a] * 3, 0.0)  # words 0-2
    t = _say(speech, diarizer, "The budget is fifty thousand dollars.", [a] * 6, t)  # words 3-8
    # The re-clustering says one word of the first line and most of the second were Bob's.
    diarizer.changes = [LabelChange(1, a, b)] + [LabelChange(i, a, b) for i in (3, 4, 5, 6)]
    _say(speech, diarizer, "Thanks.", [b], t)
    assert [w.speaker for w in words[:3]] == [a, a, a]  # a minority moved: the line keeps its speaker
    assert [w.speaker for w in words[3:9]] == [b] * 6  # most moved: the whole line, not four of its words
    assert [turn.speaker for turn in turns_from_words(words)] == [a, b]  # no split/merge flicker


def test_a_line_the_reader_has_left_behind_keeps_its_speaker():
    speech, words, lines = _lines()
    diarizer = ScriptedLabels()
    a, b = "SPEAKER_00", "SPEAKER_01"
    _say(speech, diarizer, "We will ship on Friday.", [a] * 5, 0.0)  # words 0-4
    later = RELABEL_WINDOW_SECONDS + 10.0
    diarizer.changes = [LabelChange(i, a, b) for i in range(5)]
    _say(speech, diarizer, "Okay.", [b], later)
    assert [w.speaker for w in words[:5]] == [a] * 5


def test_words_of_the_open_line_follow_the_corrections_until_it_closes():
    speech, words, lines = _lines()
    diarizer = ScriptedLabels()
    a, b = "SPEAKER_00", "SPEAKER_01"
    t = _say(speech, diarizer, "so the plan", [a, a, a], 0.0)  # no sentence end: the line stays open
    diarizer.changes = [LabelChange(i, a, b) for i in range(3)]
    _say(speech, diarizer, "is fine.", [b, b], t)
    assert [line.speaker for line in lines] == [b] and {w.speaker for w in words} == {b}
