"""What the room bot tells its peers over the data channel: session events and answers as JSON messages."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

import numpy as np

_DIARIZER_LABEL = re.compile(r"SPEAKER_\d+")


def jsonable(value: Any) -> Any:
    """Dataclasses, numpy values and arrays as plain JSON values (thumbnails are left out)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not isinstance(getattr(value, f.name), np.ndarray)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items() if not isinstance(v, np.ndarray)}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def captions(words: Sequence[Any]) -> list[dict]:
    """Committed words -> one caption per run of one speaker."""
    out: list[dict] = []
    for word in words:
        speaker, text = getattr(word, "speaker", ""), str(getattr(word, "text", word)).strip()
        start, end = getattr(word, "start", None), getattr(word, "end", None)
        if out and out[-1]["speaker"] == speaker:
            out[-1]["text"] = f"{out[-1]['text']} {text}".strip()
            out[-1]["end"] = end
        else:
            out.append({"type": "caption", "speaker": speaker, "start": start, "end": end, "text": text})
    return out


def line_message(line: Any, label: str | None) -> dict:
    """A closed transcript line: ``speaker`` is what to show (the name once people have said it, else the
    diarizer's label), ``name`` is None until the speaker is named, ``label`` matches the captions'."""
    speaker = str(line.speaker or label or "")
    if label is None and _DIARIZER_LABEL.fullmatch(speaker):
        label = speaker
    name = speaker if speaker and speaker != label and not _DIARIZER_LABEL.fullmatch(speaker) else None
    return {"type": "line", "speaker": speaker, "name": name, "label": label,
            "start": line.start, "end": line.end, "text": line.text}


def majority_label(words: Sequence[Any], start: float, end: float) -> str | None:
    """The diarizer label that spoke most of [start, end] among ``words`` (as the session labels a line)."""
    spoken: dict[str, float] = {}
    for word in words:
        if word.start >= start - 0.01 and word.end <= end + 0.01:
            spoken[word.speaker] = spoken.get(word.speaker, 0.0) + max(word.end - word.start, 0.01)
    return max(spoken, key=spoken.__getitem__) if spoken else None


def answer_message(answer: Any, seconds: float) -> dict:
    return {
        "type": "answer",
        "question": answer.question,
        "text": answer.text,
        "citations": [{"start": c.start, "label": c.label, "speaker": c.speaker, "text": c.text,
                       **({"check": c.check} if getattr(c, "check", "") else {})} for c in answer.citations],
        "seconds": round(seconds, 3),
    }
