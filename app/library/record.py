"""Put a meeting into the library, take a speaker or a whole meeting out of it, and open it under MINUTIA_HOME.

A meeting's library id is a digest of what was said, so reading the same meeting again replaces its entry instead
of adding a second one.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from app.answering.summary import MeetingSummary, build_summary
from app.library.store import Library, LibrarySentence, MeetingRecord
from app.platform.config import Settings
from app.text.sentences import split_sentences
from app.text.transcript import Transcript, _from_json, to_json
from encoders.errors import InputError


def open_library(settings: Settings, create_key: bool = True, embedder: bool = True) -> Library:
    """The library of this MINUTIA_HOME, sealed under its master key, its reads and changes in the audit log."""
    from app.platform.store import library_path, load_master_key, meetings_kept, open_audit_log

    path = library_path(settings)
    if not create_key and not path.exists():
        raise InputError(f"no meeting library at {path}: nothing has been recorded here yet")
    master = load_master_key(settings, create_key=create_key, saved_meetings=lambda: meetings_kept(settings))
    encoder = None
    if embedder:
        from app.answering.retrieval import default_embedder

        encoder = default_embedder()
    return Library(path, master.cache_key("library"), master.cache_key("library-index"),
                   audit=open_audit_log(settings, master), embedder=encoder)


def meeting_id(transcript: Transcript) -> str:
    """A digest of what was said and of the source's name: the same meeting read again gets the same id, and the id
    (which the library file shows in clear) tells nothing of the meeting."""
    said = "\n".join(f"{t.speaker}\t{t.text}" for t in transcript.turns)
    return "m" + hashlib.sha256(f"{Path(transcript.source).name}\n{said}".encode()).hexdigest()[:11]


def action_line(owner: str, task: str, due: str | None) -> str:
    """An action item as the library keeps it: "Olek: renew the certificate (by Friday)"."""
    return f"{owner}: {task}" + (f" (by {due})" if due else "")


_ACTION_LINE = re.compile(r"^(?P<owner>[^:]+):\s+(?P<task>.*?)(?:\s+\(by (?P<due>[^)]*)\))?$")


def parse_action_line(line: str) -> tuple[str, str, str | None] | None:
    """(owner, task, due) of a line :func:`action_line` wrote; None for any other line."""
    m = _ACTION_LINE.match(line)
    return (m["owner"], m["task"], m["due"]) if m else None


def parse_date(text: str) -> float:
    """``YYYY-MM-DD`` (or a full ISO time) as epoch seconds, UTC."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"not a date: {text!r} (write it as YYYY-MM-DD)") from None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def library_detector(settings: Settings):
    """The PII detector the library masks what it keeps with: the library is written like an export (``pii.policy``
    mask-in-exports or zero-in-kv), so it holds no phone number or e-mail that an exported transcript would not."""
    from app.text.pii import detector_for

    return detector_for(settings.pii) if settings.pii.mask_exports else None


def record_meeting(library: Library, transcript: Transcript, summary: MeetingSummary | None = None,
                   title: str | None = None, started: float | None = None, meeting: str | None = None,
                   detector=None, forgotten: Sequence[str] = ()) -> str:
    """Record ``transcript`` (and its summary; the extractive one when none is given, knowing the names of the
    speakers ``forgotten`` from it) in ``library``, personal data masked with ``detector`` when one is given; its id."""
    summary = summary or build_summary(transcript, forgotten=forgotten)
    if detector is not None:
        from app.text.pii import mask_text, mask_transcript

        transcript = mask_transcript(transcript, detector)
    meeting = meeting or meeting_id(transcript)  # of what is kept: the same whether it came masked or not
    shown = (lambda text: mask_text(text, detector.find(text))) if detector is not None else (lambda text: text)
    record = MeetingRecord(
        id=meeting, title=title or Path(transcript.source or meeting).name, source=transcript.source,
        started=started, duration=transcript.duration or (transcript.turns[-1].end if transcript.turns else None),
        speakers=list(transcript.speakers), summary=shown(summary.summary),
        decisions=[shown(f"{d.speaker}: {d.text}") for d in summary.decisions],
        action_items=[shown(action_line(a.owner, a.task, a.due)) for a in summary.action_items],
        transcript=json.loads(to_json(transcript)))
    sentences = [LibrarySentence(s.text, s.speaker, s.turn_index, s.start, s.context)
                 for s in split_sentences(transcript)]
    library.put(record, sentences)
    return meeting


def transcript_of(record: MeetingRecord) -> Transcript:
    if record.transcript is None:
        raise InputError(f"the library keeps no transcript of meeting {record.id!r}")
    return _from_json(record.transcript, Path(record.source or record.id))


def forget_speaker(library: Library, meeting: str, speaker: str) -> int:
    """Take one speaker (a label, or a name the transcript gives them) out of a library meeting: the meeting is
    recorded again from its transcript without their turns, its summary rebuilt from what is left. The turns
    removed (an error when the meeting has none of theirs)."""
    from app.text.speakers import speaker_names

    record = library.get(meeting)
    transcript = transcript_of(record)
    names = speaker_names(transcript)  # label -> the name people call them by ("Thanks, Bob")
    label = next((lab for lab in transcript.speakers if speaker.lower() in (lab.lower(), names.get(lab, "").lower())),
                 None)
    kept = [t for t in transcript.turns if t.speaker != label]
    removed = len(transcript.turns) - len(kept)
    if not removed:
        said = ", ".join(f"{lab} ({names[lab]})" if lab in names else lab for lab in transcript.speakers)
        raise InputError(f"meeting {meeting!r} has no speaker {speaker!r}; its speakers: {said}")
    without = Transcript(turns=kept, source=transcript.source, duration=transcript.duration)
    record_meeting(library, without, title=record.title, started=record.started, meeting=meeting)
    return removed
