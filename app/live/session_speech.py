"""The speech side of a meeting session: the parts it is made of, and what the session needs from each."""

from __future__ import annotations

import bisect
import time
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, Sequence

from app.llm.context import ContextLine
from app.live.events import LineClosed, SessionOutput, TentativeChanged, WordsCommitted
from app.text.transcript import TranscriptWord, Turn, join_words
from encoders.asr import ends_sentence
from encoders.audio import SAMPLE_RATE

if TYPE_CHECKING:
    from threading import Event

    import numpy as np

    from app.live.events import Slide
    from app.platform.config import ASRSettings
    from encoders.asr import Segment, TranscribeOptions, Word
    from encoders.online_diarize import LabelChange
    from encoders.ring import RingBuffer
    from encoders.streaming import StreamingTranscriber, StreamUpdate

MAX_LINE_WORDS = 40  # a line the LLM reads is closed at a sentence end, a speaker change, or this
RELABEL_WINDOW_SECONDS = 60.0  # a closed line's speaker may still be corrected this long after it ended


class LagHistogram:
    """Seconds from a word's end to its commit, counted into fixed buckets for the whole meeting (the counts only
    grow, as a Prometheus histogram's must; ``commit_lags`` keeps only the recent values)."""

    BUCKETS = (0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 60.0)

    def __init__(self) -> None:
        self.counts = [0] * len(self.BUCKETS)  # per bucket, not cumulative
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        i = bisect.bisect_left(self.BUCKETS, seconds)
        if i < len(self.counts):
            self.counts[i] += 1
        self.total += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, words committed within it) per bucket, as Prometheus' ``le`` buckets count."""
        running, out = 0, []
        for bound, n in zip(self.BUCKETS, self.counts):
            running += n
            out.append((bound, running))
        return out


class SpeechRecogniser(Protocol):
    """What the streaming recogniser calls on its model (encoders.asr.Transcriber; a stand-in in tests)."""

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions | None = None) -> Iterator[Segment]: ...


class StreamingDiarizer(Protocol):
    """What a session calls on its online diarizer (encoders.online_diarize.OnlineDiarizer; a stand-in in tests):
    audio in as it comes, each committed word labelled, relabellings taken. Not encoders.diarize.Diarizer, which
    splits a whole recording into speaker turns for the batch path."""

    def insert_audio(self, samples: np.ndarray) -> None: ...

    def label_words(self, words: Sequence[Word]) -> list[str]: ...

    def take_changes(self) -> list[LabelChange]: ...


class SpeechLines:
    """The committed words of one stream and the lines they close: each word gets its diarizer label, and lines
    close at a sentence end, a held speaker change or a length cap.

    What a reader sees stays put: a closed line's words all carry the line's speaker (no one-word fragments of
    another speaker inside a sentence), and when the diarizer re-clusters, a closed line changes speaker only as
    a whole (when most of it moved) and only within ``RELABEL_WINDOW_SECONDS`` of its end.

    Works on the session's word list under the session's lock; closed lines and events go to ``output``.
    """

    def __init__(self, output: SessionOutput, words: list[TranscriptWord], *, last_speaker: str | None,
                 stream_seconds: Callable[[], float], time_offset: Callable[[], float],
                 names: Callable[[], dict[str, str]]) -> None:
        self._lock, self._append_line, self._emit, self._bump = output
        self._words = words  # committed, with diarizer labels
        self._stream_seconds = stream_seconds
        self._time_offset = time_offset
        self._names = names
        self.last_speaker = last_speaker  # label of the last line closed (a change starts a new turn)
        self.line: list[TranscriptWord] = []  # committed words of the line not yet closed
        self._line_positions: list[int] = []  # where each of them is in the word list
        self._closed: list[tuple[int, int, float]] = []  # closed lines of this stream: (first, past-last position, end)
        self.tentative = ""
        self.commit_lags: list[float] = []
        self.commit_lag_histogram = LagHistogram()
        # A recording fed as fast as it goes is decoded in steps of exactly this much audio, so its words do
        # not depend on how fast or busy the machine is (None: live, steps follow what has arrived).
        self.fixed_step_seconds: float | None = None
        self.decoded_seconds = 0.0  # meeting time up to which the recogniser has decoded the audio
        # Reads of the audio ring that came back empty: one that starts after the input stopped coming and finds
        # nothing means every word the recogniser will give without more audio (or the end) has been committed.
        self.empty_reads = 0
        self._diarized: list[int] = []  # the diarizer's word number -> index in the word list

    @property
    def committed_seconds(self) -> float:
        """Meeting time up to which words are committed."""
        with self._lock:
            return self._words[-1].end if self._words else 0.0

    def wait_until_committed(self, seconds: float, input_ended: Callable[[], bool], poll: float,
                             failed: Callable[[], bool], done: Event) -> bool:
        """Wait until words are committed up to ``seconds``, the session ``failed`` or the recogniser is ``done``.
        Once ``input_ended()``, a read of the audio that finds nothing means the words the recogniser still holds
        come only with the end of input; returns whether the input must end for them (short of ``seconds``)."""
        seen: int | None = None  # empty reads counted when the input was first seen ended
        while self.committed_seconds < seconds and not failed() and not done.is_set():
            if seen is None and input_ended():
                seen = self.empty_reads
            elif seen is not None and self.empty_reads > seen:  # a read after the end found nothing
                break
            time.sleep(poll)
        return self.committed_seconds < seconds and not failed()

    def wait_for_audio(self, audio: RingBuffer, closed: Event) -> bool:
        """Wait until audio arrives (True), or the input ends or the session closes without any (False). Call it
        before :meth:`run`: ``fixed_step_seconds`` is set before the first write, so run's first read sees it."""
        while not audio.wait_for(1, timeout=0.2):
            self.empty_reads += 1
            if audio.exhausted or closed.is_set():
                self.close_line()
                return False
        return True

    def run(self, audio: RingBuffer, closed: Event, asr: StreamingTranscriber, diarizer: StreamingDiarizer,
            catch_up_seconds: float) -> None:
        """Drain ``audio`` into the recogniser and the diarizer until it is exhausted or ``closed`` is set."""
        step = asr.options.min_chunk_seconds
        piece = int(step * SAMPLE_RATE)
        # A backlog is never skipped over; it is caught up in longer steps, because every decode re-reads the
        # whole buffer (and, unless asr.stream_window_margin_seconds is set, a whole 30 s Whisper window) however
        # little new audio it brings.
        catch_up = max(piece, int(catch_up_seconds * SAMPLE_RATE))
        pending = 0.0
        inserted = 0  # samples given to the recogniser
        while not closed.is_set():
            if self.fixed_step_seconds is not None:
                fixed = int(self.fixed_step_seconds * SAMPLE_RATE)
                chunk = audio.read(max_items=fixed, timeout=0.2, at_least=fixed)
            else:
                behind = audio.available >= 2 * piece
                chunk = audio.read(max_items=catch_up if behind else piece, timeout=0.2)
            if not len(chunk.data):
                self.empty_reads += 1
            else:
                asr.insert_audio(chunk.data)
                diarizer.insert_audio(chunk.data)
                pending += len(chunk.data) / SAMPLE_RATE
                inserted += len(chunk.data)
            if pending >= step:
                pending = 0.0
                self._commit(asr.process(), diarizer)
                self.decoded_seconds = self._time_offset() + inserted / SAMPLE_RATE
            if audio.exhausted:
                self._commit(asr.finish(), diarizer, final=True)
                self.decoded_seconds = self._time_offset() + inserted / SAMPLE_RATE
                break
        self.close_line()

    def add_turns(self, turns: Sequence[Turn], clock: float, words_per_second: float, slides: Sequence[Slide],
                  add_slide: Callable[[Slide], None]) -> float:
        """An earlier part of the meeting as text: each turn committed as one line, its words' times kept (an untimed
        turn is timed at ``words_per_second`` from ``clock``, where the meeting is), and each of ``slides`` shown
        (``add_slide``) before the first turn after it; returns where the meeting is after them."""
        waiting = sorted(slides, key=lambda slide: slide.time)
        for turn in turns:
            tokens = turn.text.split()
            if not tokens:
                continue
            start = turn.start if turn.start is not None else clock
            end = turn.end if turn.end is not None else start + len(tokens) / words_per_second
            while waiting and waiting[0].time <= start:
                add_slide(waiting.pop(0))
            self.add_turn(_turn_words(turn, tokens, start, end), turn.speaker, start, end)
            clock = end
        for slide in waiting:
            add_slide(slide)
        return max([clock] + [slide.time for slide in waiting])

    def add_turn(self, words: list[TranscriptWord], speaker: str, start: float, end: float) -> None:
        """Words of an earlier part of the meeting (a transcript's turn), committed as one line."""
        with self._lock:
            self._words.extend(words)
        change = speaker != self.last_speaker
        self.last_speaker = speaker
        text = " ".join(w.text for w in words)
        self._append_line(ContextLine("audio", start, end, speaker, text, speaker_change=change), len(words))

    def _commit(self, update: StreamUpdate, diarizer: StreamingDiarizer, final: bool = False) -> None:
        now_stream = self._stream_seconds()
        words = list(update.committed)
        if words:
            labels = diarizer.label_words(words)
            changes = diarizer.take_changes()  # re-clustering may move earlier words to another speaker
            offset = self._time_offset()
            committed = [
                TranscriptWord(w.text, round(offset + w.start, 3), round(offset + w.end, 3), label, round(w.probability, 4))
                for w, label in zip(words, labels)
            ]
            with self._lock:
                moved = {self._diarized[c.index]: c.new for c in changes if c.index < len(self._diarized)}
                self._relabel(moved, newest=committed[-1].end)
                first = len(self._words)
                self._diarized.extend(range(first, first + len(committed)))
                self._words.extend(committed)
                self._bump()  # the lines closed below read the names of this transcript
                lags = [max(0.0, now_stream - w.end) for w in committed]
                self.commit_lags = (self.commit_lags + lags)[-2000:]
                for lag in lags:
                    self.commit_lag_histogram.observe(lag)
            for pos, word in enumerate(committed, first):
                self._add_to_line(word, pos)
            self._emit(WordsCommitted(tuple(committed)))
        tentative = " ".join(w.text for w in update.tentative)
        with self._lock:
            changed = tentative != self.tentative
            self.tentative = "" if final else tentative
        if changed or words:
            self._bump()
            self._emit(TentativeChanged(self.tentative))

    def _relabel(self, moved: dict[int, str], newest: float) -> None:
        """Apply the diarizer's corrections (word position -> label; under the lock): words of the open line
        one by one (it is unified when it closes), a recent closed line as a whole when most of it moved."""
        if not moved:
            return
        open_from = self._line_positions[0] if self._line_positions else len(self._words)
        for pos, label in moved.items():
            if pos >= open_from:
                self._set_speaker(pos, label)
                k = pos - open_from
                if k < len(self.line):
                    self.line[k] = self._words[pos]
        starts = [first for first, _, _ in self._closed]
        for index in sorted({bisect.bisect_right(starts, pos) - 1 for pos in moved if pos < open_from}):
            if index < 0:
                continue
            first, last, end = self._closed[index]
            if end < newest - RELABEL_WINDOW_SECONDS:
                continue  # the reader has moved on: this line keeps its speaker
            words = [self._words[p] for p in range(first, last)]
            now = _majority([TranscriptWord(w.text, w.start, w.end, moved.get(p, w.speaker), w.probability)
                             for p, w in zip(range(first, last), words)])
            if now != _majority(words):
                for p in range(first, last):
                    self._set_speaker(p, now)

    def _set_speaker(self, pos: int, label: str) -> None:
        old = self._words[pos]
        if old.speaker != label:
            self._words[pos] = TranscriptWord(old.text, old.start, old.end, label, old.probability)

    def _add_to_line(self, word: TranscriptWord, pos: int) -> None:
        """Lines are sentences. An online diarizer flips labels for a word or two inside a sentence, so
        a line is split at a speaker change only once the new label has held for three words."""
        self.line.append(word)
        self._line_positions.append(pos)
        if ends_sentence(word.text) or len(self.line) >= MAX_LINE_WORDS:
            self.close_line()
            return
        tail, tail_positions = self.line[-3:], self._line_positions[-3:]
        if len(self.line) > 3 and len({w.speaker for w in tail}) == 1 and tail[0].speaker != _majority(self.line[:-3]):
            self.line, self._line_positions = self.line[:-3], self._line_positions[:-3]
            self.close_line()
            self.line, self._line_positions = tail, tail_positions

    def close_line(self) -> None:
        if not self.line:
            return
        words, positions, self.line, self._line_positions = self.line, self._line_positions, [], []
        label = _majority(words)
        with self._lock:
            for pos in positions:  # the line's words are the line's speaker's: no fragments inside a sentence
                if pos < len(self._words):
                    self._set_speaker(pos, label)
            if positions:
                self._closed.append((positions[0], positions[-1] + 1, words[-1].end))
            while self._closed and self._closed[0][2] < words[-1].end - RELABEL_WINDOW_SECONDS:
                self._closed.pop(0)  # past correcting: only recent lines are kept
            names = self._names()
        line = ContextLine(
            modality="audio",
            start=words[0].start,
            end=words[-1].end,
            speaker=names.get(label, label),
            text=join_words(w.text for w in words),
            speaker_change=label != self.last_speaker,
        )
        self.last_speaker = label
        self._append_line(line, len(words))
        self._emit(LineClosed(line))


def stream_recogniser(transcriber: SpeechRecogniser, asr: ASRSettings) -> StreamingTranscriber:
    """The streaming recogniser (LocalAgreement-2) over ``transcriber``, as the config's ``asr`` settings say."""
    from encoders.streaming import StreamingOptions, StreamingTranscriber

    return StreamingTranscriber(
        transcriber,
        StreamingOptions(language=asr.language, beam_size=asr.stream_beam_size,
                         min_chunk_seconds=asr.stream_min_chunk_seconds, hotwords=tuple(asr.hotwords),
                         window_margin_seconds=asr.stream_window_margin_seconds),
    )


def _turn_words(turn: Turn, tokens: list[str], start: float, end: float) -> list[TranscriptWord]:
    """A transcript turn's words: their own times where it has them, else spread evenly over the turn."""
    if turn.words and turn.start is not None:
        return [TranscriptWord(w.text, w.start, w.end, turn.speaker, w.probability) for w in turn.words]
    step = (end - start) / len(tokens)
    return [TranscriptWord(tok, round(start + i * step, 3), round(start + (i + 1) * step, 3), turn.speaker)
            for i, tok in enumerate(tokens)]


def _majority(words: list[TranscriptWord]) -> str:
    """The speaker who spoke most of ``words`` (by duration)."""
    spoken: dict[str, float] = {}
    for w in words:
        spoken[w.speaker] = spoken.get(w.speaker, 0.0) + max(w.end - w.start, 0.01)
    return max(spoken, key=spoken.__getitem__)
