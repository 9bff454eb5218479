"""What the batch commands write: transcripts and summaries, personal data masked per ``pii.policy``.

One place for the rules, so `minutia transcribe`/`summarize` and `minutia batch` write the same files.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.platform.config import Settings
from app.text.transcript import Transcript, atomic_write, write_all


def export_detector(settings: Settings):
    """The PII detector exports are masked with (None when ``pii.policy`` is off)."""
    from app.text.pii import detector_for

    return detector_for(settings.pii) if settings.pii.mask_exports else None


def masked(transcript: Transcript, settings: Settings, detector=None) -> Transcript:
    """``transcript`` as it is written out: personal data masked unless ``pii.policy`` is off
    (``detector``: one already loaded)."""
    from app.text.pii import mask_transcript

    detector = detector or export_detector(settings)
    return transcript if detector is None else mask_transcript(transcript, detector)


def for_the_model(transcript: Transcript, settings: Settings, detector=None) -> Transcript:
    """What the LLM reads and answers from: under ``pii.policy: zero-in-kv`` the masked transcript, so the
    batch path keeps personal data out of the model as the live path keeps it out of the KV."""
    return masked(transcript, settings, detector) if settings.pii.zero_kv else transcript


def write_transcript(transcript: Transcript, settings: Settings, folder: Path, stem: str, formats,
                     detector=None) -> tuple[Transcript, list[Path]]:
    """The masked transcript and the files written (``<stem>.<format>`` for each format)."""
    shown = masked(transcript, settings, detector)
    return shown, write_all(shown, folder, stem, list(formats))


def write_summary(summary, source: str, settings: Settings, folder: Path, stem: str,
                  detector=None) -> tuple[str, str, list[Path]]:
    """Markdown and JSON of ``summary`` (masked), written as ``<stem>.summary.md`` / ``.summary.json``."""
    from app.answering.summary import render_markdown

    markdown = render_markdown(summary, heading=f"Meeting summary: {source}")
    data = summary.to_dict()
    detector = detector or export_detector(settings)
    if detector is not None:
        from app.text.pii import mask_data, mask_text

        markdown, data = mask_text(markdown, detector.find(markdown)), mask_data(data, detector)
    payload = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    paths = [atomic_write(folder / f"{stem}.summary.md", markdown), atomic_write(folder / f"{stem}.summary.json", payload)]
    return markdown, payload, paths
