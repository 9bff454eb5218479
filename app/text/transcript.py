"""The speaker-attributed transcript: one data model, its readers and its writers.

Readers: minutia's own JSON (``minutia.transcript/1``), QMSum JSON, and plain text
(``Speaker: text`` per line, optionally prefixed with ``[mm:ss]``; or ``(Speaker) text`` opening a turn whose
next lines are the same speaker's, as ELITR's minuting transcripts write it). Writers: JSON, SRT, VTT,
Markdown. Every writer goes through :func:`atomic_write`, so a failure never leaves a half file.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from encoders.asr import ends_sentence
from encoders.errors import InputError

FORMAT = "minutia.transcript/1"
TRANSCRIPT_SUFFIXES = {".json", ".txt", ".md"}


SLIDE_SPEAKER = "Slide"  # who a slide read from the screen is, placed among the spoken turns (no person)


@dataclass
class TranscriptWord:
    text: str
    start: float
    end: float
    speaker: str
    probability: float = 1.0


UNSURE = 0.5  # a word the recogniser gave less probability than this is uncertain: shown so, wherever it is quoted


def unsure_words(turn: "Turn", within: str | None = None) -> list[str]:
    """The turn's words heard with low confidence (those inside ``within``, a sentence of it, when given), in the
    order said: a dropped or misheard word ("can" for "cannot") is where a reader should doubt the line (issue 49)."""
    found = [w.text.strip(".,;:!?\"'") for w in turn.words if w.probability < UNSURE]
    if within is not None:
        found = [w for w in found if w and re.search(rf"(?<!\w){re.escape(w)}(?!\w)", within, re.IGNORECASE)]
    return [w for w in dict.fromkeys(found) if w]


@dataclass
class Turn:
    """Consecutive speech of one speaker. Times are seconds; None when the source had no times."""

    speaker: str
    text: str
    start: float | None = None
    end: float | None = None
    words: list[TranscriptWord] = field(default_factory=list)


@dataclass
class Transcript:
    turns: list[Turn]
    source: str = ""
    duration: float | None = None

    @property
    def speakers(self) -> list[str]:
        seen: dict[str, None] = {}
        for turn in self.turns:
            seen.setdefault(turn.speaker, None)
        return list(seen)

    @property
    def words(self) -> list[TranscriptWord]:
        return [w for t in self.turns for w in t.words]

    @property
    def has_times(self) -> bool:
        return bool(self.turns) and all(t.start is not None for t in self.turns)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "source": self.source,
            "duration": self.duration,
            "speakers": self.speakers,
            "turns": [asdict(t) for t in self.turns],
        }


def unsure_note(words: Sequence[str], lines: str) -> str:
    """The Markdown line that says which quoted words were heard with low confidence ("" when none)."""
    if not words:
        return ""
    return f"_Heard with low confidence in {lines}: " + ", ".join(f'"{w}"' for w in words) + \
        ". Check them in the recording._"


def format_day(when: float | None, missing: str = "-") -> str:
    """A date (epoch seconds) as ``YYYY-MM-DD`` in UTC, or ``missing`` when there is none (an undated meeting)."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%d") if when else missing


def format_time(seconds: float | None, sep: str = ".") -> str:
    """``[h:]mm:ss`` for people; SRT/VTT stamps use :func:`_stamp`."""
    if seconds is None:
        return "--:--"
    total = int(seconds)
    h, rem = divmod(total, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def turn_label(index: int, turn: Turn) -> str:
    """How a turn is cited in answers: its time when known, else its number."""
    return f"[{format_time(turn.start)}]" if turn.start is not None else f"[turn {index + 1}]"


# ----------------------------------------------------------------------------------------- building


def turns_from_words(words: Sequence[TranscriptWord], max_gap: float = 2.0) -> list[Turn]:
    """Group consecutive words of one speaker into turns; a long pause also starts a new turn."""
    turns: list[Turn] = []
    for word in words:
        last = turns[-1] if turns else None
        if last is not None and last.speaker == word.speaker and word.start - (last.end or 0.0) <= max_gap:
            last.words.append(word)
            last.end = word.end
        else:
            turns.append(Turn(speaker=word.speaker, text="", start=word.start, end=word.end, words=[word]))
    for turn in turns:
        turn.text = join_words(w.text for w in turn.words)
    return turns


def realign_to_sentences(words: Sequence[TranscriptWord], max_tail: int = 3) -> list[TranscriptWord]:
    """Move a dangling sentence start to the next speaker.

    Word times from ASR and turn edges from diarization disagree by a few hundred ms, so the first
    word of a new turn often lands on the previous speaker ("...the pilot? The | pilot will cost").
    When a speaker's run ends with at most ``max_tail`` words after a sentence end, those words
    begin the next speaker's sentence and go to them.
    """
    fixed = list(words)
    for i in range(1, len(fixed)):
        if fixed[i].speaker == fixed[i - 1].speaker:
            continue
        tail = i
        while tail > 0 and i - tail < max_tail and fixed[tail - 1].speaker == fixed[i - 1].speaker:
            if ends_sentence(fixed[tail - 1].text):
                break
            tail -= 1
        if 0 < tail < i and ends_sentence(fixed[tail - 1].text) and fixed[tail - 1].speaker == fixed[i - 1].speaker:
            for j in range(tail, i):
                w = fixed[j]
                fixed[j] = TranscriptWord(w.text, w.start, w.end, fixed[i].speaker, w.probability)
    return fixed


def join_words(tokens: Iterable[str]) -> str:
    text = " ".join(t.strip() for t in tokens if t.strip())
    return re.sub(r"\s+([,.;:!?%])", r"\1", text)


# ----------------------------------------------------------------------------------------- reading


def load_transcript(path: str | Path) -> Transcript:
    """Read any supported transcript file; raise InputError with one clear line otherwise."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"transcript not found: {path}")
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not a UTF-8 text transcript") from exc
    if not raw.strip():
        raise InputError(f"{path} is empty")
    if path.suffix.lower() == ".json" or raw.lstrip().startswith("{"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        transcript = _from_json(data, path)
    elif path.suffix.lower() == ".md":
        transcript = _from_markdown(raw, path)
    else:
        transcript = _from_text(raw, path)
    if not any(t.text.strip() for t in transcript.turns):
        raise InputError(f"{path} contains no speech")
    return transcript


def _from_json(data: object, path: Path) -> Transcript:
    if isinstance(data, dict) and "meeting_transcripts" in data:  # QMSum
        given = data["meeting_transcripts"]
        if not isinstance(given, list):
            raise InputError(f"{path}: 'meeting_transcripts' must be a list of turns, not {type(given).__name__}")
        for number, t in enumerate(given, start=1):
            if not isinstance(t, dict) or not isinstance(t.get("content"), str) or not isinstance(t.get("speaker", ""), str):
                raise InputError(f"{path}: QMSum turn {number} needs a 'speaker' and a 'content' string")
        turns = [Turn(speaker=t.get("speaker") or "?", text=qmsum_text(t["content"])) for t in given]
        return Transcript(turns=turns, source=path.name)
    if isinstance(data, dict) and isinstance(data.get("turns"), list):
        try:
            turns = [
                Turn(
                    speaker=str(t["speaker"]),
                    text=str(t["text"]),
                    start=_opt_float(t.get("start")),
                    end=_opt_float(t.get("end")),
                    words=[_word(w) for w in t.get("words", [])],
                )
                for t in data["turns"]
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path}: malformed turn in transcript JSON ({exc})") from exc
        return Transcript(turns=turns, source=str(data.get("source", path.name)), duration=_opt_float(data.get("duration")))
    raise InputError(f"{path}: unknown JSON transcript (expected minutia's 'turns' or QMSum's 'meeting_transcripts')")


def _word(fields: dict) -> TranscriptWord:
    word = TranscriptWord(**fields)
    start, end = _opt_float(word.start), _opt_float(word.end)  # the same checks as a turn's times
    if start is None or end is None:
        raise ValueError("a word needs a start and an end")
    return TranscriptWord(str(word.text), start, end, str(word.speaker), float(word.probability))


def _opt_float(value: object) -> float | None:
    """A time in seconds, or None; NaN, infinities and negatives are not times."""
    if value is None:
        return None
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{value!r} is not a time in seconds")
    return number


def qmsum_text(text: str) -> str:
    """QMSum is tokenised (``we 're``, ``it .``) and marks disfluencies (``{disfmarker}``): undo both."""
    text = re.sub(r"\{\w+\}", " ", text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"\s+([,.;:!?%)])", r"\1", text)
    text = re.sub(r"\s+('(s|re|ve|ll|d|m|t)\b|n't\b)", r"\1", text)
    return re.sub(r"\(\s+", "(", text).strip()


# minutia's own Markdown: **[mm:ss] Speaker:** text
_MD_LINE = re.compile(r"^\*\*(?:\[(?P<time>(?:\d+:)?\d{1,2}:\d{2}|--:--|turn \d+)\]\s*)?(?P<speaker>[^*]{1,60}):\*\*\s*(?P<text>.+)$")
_TEXT_LINE = re.compile(r"^\s*(?:\[(?P<time>(?:\d+:)?\d{1,2}:\d{2})\]\s*)?(?P<speaker>[^:\[\]]{1,60}):\s*(?P<text>.+)$")


# ELITR's minuting corpus: "(PERSON4) text" opens a turn, the lines after it are the same speaker's; "<laugh/>",
# "<unintelligible/>" are annotators' tags, not words.
_PAREN_LINE = re.compile(r"^\s*\((?P<speaker>[A-Z][A-Za-z0-9_ .'-]{0,40})\)\s*(?P<text>.*)$")
_TAG = re.compile(r"</?[A-Za-z][\w-]*\s*/?>")


def _without_tags(text: str) -> str:
    return " ".join(_TAG.sub(" ", text).split())


def _from_text(raw: str, path: Path) -> Transcript:
    lines = raw.splitlines()
    parenthesised = sum(1 for line in lines if _PAREN_LINE.match(line))
    colon = sum(1 for line in lines if _TEXT_LINE.match(line) and not _PAREN_LINE.match(line))
    if parenthesised >= 2 and parenthesised >= colon:  # "(PERSON4) The plan: two weeks." is a parenthesised turn
        return _from_parenthesised(lines, path)
    turns: list[Turn] = []
    marked = False  # a line named its speaker: a line with no mark then goes on the last turn
    for line in lines:
        line = _without_tags(line)
        if not line or line.startswith("#"):
            continue
        match = _TEXT_LINE.match(line)
        if match:
            start = _parse_clock(match["time"]) if match["time"] else None
            turns.append(Turn(speaker=match["speaker"].strip().strip("*"), text=match["text"].strip(), start=start))
            marked = True
        elif turns and marked:
            turns[-1].text += " " + line
        else:  # a file that names no speaker: each line is a turn, not one turn as long as the meeting
            turns.append(Turn(speaker="SPEAKER_00", text=line))
    return Transcript(turns=turns, source=path.name)


def _from_parenthesised(lines: list[str], path: Path) -> Transcript:
    """``(Speaker) text`` turns; lines before the first mark, or in a file that marks none, are SPEAKER_00's."""
    turns: list[Turn] = []
    for line in lines:
        match = _PAREN_LINE.match(line)
        text = _without_tags(match["text"] if match else line)
        if match:
            turns.append(Turn(speaker=match["speaker"].strip(), text=text))
        elif not text:
            continue
        elif turns:
            turns[-1].text = f"{turns[-1].text} {text}".strip()
        else:
            turns.append(Turn(speaker="SPEAKER_00", text=text))
    return Transcript(turns=[t for t in turns if t.text], source=path.name)


def _from_markdown(raw: str, path: Path) -> Transcript:
    """Turns of minutia's Markdown transcript; other Markdown falls back to the plain-text reader."""
    turns = []
    for line in raw.splitlines():
        match = _MD_LINE.match(line.strip())
        if match:
            stamp = match["time"]
            start = _parse_clock(stamp) if stamp and stamp[0].isdigit() else None
            turns.append(Turn(speaker=match["speaker"].strip(), text=match["text"].strip(), start=start))
    return Transcript(turns=turns, source=path.name) if turns else _from_text(raw, path)


def _parse_clock(stamp: str) -> float:
    parts = [int(p) for p in stamp.split(":")]
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + p
    return float(seconds)


# ----------------------------------------------------------------------------------------- writing


def atomic_write(path: str | Path, text: str) -> Path:
    """Write to a temporary file in the same folder, then rename over the target."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write to a temporary file in the same folder (owner-only, as mkstemp makes it), then rename over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def to_json(transcript: Transcript) -> str:
    return json.dumps(transcript.to_dict(), indent=2, ensure_ascii=False) + "\n"


def _stamp(seconds: float, sep: str) -> str:
    millis = int(round(seconds * 1000))
    h, rem = divmod(millis, 3_600_000)
    m, rem = divmod(rem, 60_000)
    s, ms = divmod(rem, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _cues(transcript: Transcript, max_chars: int = 84) -> list[tuple[float, float, str]]:
    """Caption cues: a turn split into lines of at most ``max_chars``, timed by its words."""
    cues: list[tuple[float, float, str]] = []
    for turn in transcript.turns:
        if turn.start is None or turn.end is None:
            continue
        if not turn.words:
            cues.append((turn.start, turn.end, f"{turn.speaker}: {turn.text}"))
            continue
        line: list[TranscriptWord] = []
        for word in turn.words:
            if line and len(join_words(w.text for w in [*line, word])) > max_chars:
                cues.append((line[0].start, line[-1].end, f"{turn.speaker}: {join_words(w.text for w in line)}"))
                line = []
            line.append(word)
        if line:
            cues.append((line[0].start, line[-1].end, f"{turn.speaker}: {join_words(w.text for w in line)}"))
    return cues


def to_srt(transcript: Transcript) -> str:
    blocks = [
        f"{i}\n{_stamp(start, ',')} --> {_stamp(end, ',')}\n{text}\n"
        for i, (start, end, text) in enumerate(_cues(transcript), start=1)
    ]
    return "\n".join(blocks)


def to_vtt(transcript: Transcript) -> str:
    blocks = [f"{_stamp(start, '.')} --> {_stamp(end, '.')}\n{text}\n" for start, end, text in _cues(transcript)]
    return "WEBVTT\n\n" + "\n".join(blocks)


def to_markdown(transcript: Transcript) -> str:
    lines = [f"# Transcript: {transcript.source}", ""]
    if transcript.duration:
        lines += [f"Duration: {format_time(transcript.duration)} · Speakers: {', '.join(transcript.speakers)}", ""]
    for index, turn in enumerate(transcript.turns):
        lines.append(f"**{turn_label(index, turn)} {turn.speaker}:** {turn.text}")
        lines.append("")
    return "\n".join(lines)


WRITERS = {"json": to_json, "srt": to_srt, "vtt": to_vtt, "md": to_markdown}


def write_all(transcript: Transcript, out_dir: Path, stem: str, formats: Sequence[str] = tuple(WRITERS)) -> list[Path]:
    return [atomic_write(out_dir / f"{stem}.{fmt}", WRITERS[fmt](transcript)) for fmt in formats]
