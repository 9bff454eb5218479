"""What every `minutia` command shares: the Typer app, the consoles, the flags and the few helpers that turn them
into settings and output folders. Every flag can also come from the config preset or MINUTIA_* variables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from app.platform.config import Settings, load_settings
from encoders.errors import InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="minutia: meeting transcripts with speakers, answers, summaries and action items, on your machine.",
)
err = Console(stderr=True)
out = Console()

ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help="preset name (configs/*.yaml) or YAML path")]
LLMOpt = Annotated[Optional[str], typer.Option("--llm", help="LLM: 'gemma-3-270m', a local HF folder or a cached hub id")]
ASROpt = Annotated[Optional[str], typer.Option("--asr-model", help="ASR: 'whisper-base' or a local faster-whisper folder")]
DiarOpt = Annotated[Optional[str], typer.Option("--diarization-model", help="local pyannote.audio pipeline folder")]
SpeakersOpt = Annotated[Optional[int], typer.Option("--num-speakers", help="number of speakers, when known")]
HotwordsOpt = Annotated[Optional[str], typer.Option(
    "--hotwords", help="comma-separated names and terms the meeting uses (the invite's attendees): heard and spelt right")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print machine-readable JSON to stdout")]
OutOpt = Annotated[Optional[Path], typer.Option("--out", "-o", help="output folder (default: next to the input)")]


def _settings(config: str | None, llm: str | None = None, asr: str | None = None, diar: str | None = None,
              speakers: int | None = None, hotwords: str | None = None) -> Settings:
    words = [w.strip() for w in (hotwords or "").split(",") if w.strip()]
    overrides = {
        "llm": {"model": llm},
        "asr": {"model": asr, "hotwords": words or None},
        "diarization": {"model": diar, "num_speakers": speakers},
    }
    return load_settings(config, overrides)


_CREATED: list[Path] = []  # output folders this command made (deepest first)


def _remove_empty_outputs() -> None:
    """A failed command leaves no empty folder it made behind (issue 49)."""
    for folder in _CREATED:
        try:
            folder.rmdir()  # only when empty
        except OSError:
            pass
    _CREATED.clear()


def _out_dir(out_dir: Path | None, source: Path) -> Path:
    """Where the outputs go, checked before any model work: a folder this process can write (a file given
    as --out, or a folder it cannot create or write, used to fail with a traceback after minutes of work)."""
    import os

    folder = out_dir if out_dir is not None else source if source.is_dir() else source.parent
    if out_dir is None and not folder.exists():
        return folder  # no such input: reading it says so
    if folder.exists() and not folder.is_dir():
        raise InputError(f"the output folder {folder} is a file")
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _CREATED.extend(missing)  # removed again if the command fails before writing into them
    except OSError as exc:
        raise InputError(f"cannot create the output folder {folder}: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"the output folder {folder} is not writable")
    return folder


def _formats(text: str) -> list[str]:
    """Transcript formats from a comma-separated list, each one a writer's."""
    from app.text.transcript import WRITERS

    wanted = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in wanted if f not in WRITERS]
    if unknown:
        raise InputError(f"unknown format(s) {', '.join(unknown)}; choose from {', '.join(WRITERS)}")
    return wanted


def _stem(source: Path) -> str:
    return source.name if source.is_dir() else source.stem


def _with_store(settings: Settings, **overrides) -> Settings:
    """``settings`` with the store options a command was given (those not None)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return settings.model_copy(update={"store": settings.store.model_copy(update=given)}) if given else settings


def _at(start: float | None, turn_index: int) -> str:
    from app.text.transcript import format_time

    return format_time(start) if start is not None else f"turn {turn_index + 1}"


def print_answer(answer, heading: str = "answer") -> None:
    """An answer and the lines it rests on (times, speakers), as ask, live and resume print it."""
    out.print(f"[bold green]{heading}:[/] {escape(answer.text)}")
    for c in answer.citations:
        text = c.text if len(c.text) <= 240 else c.text[:237] + "..."
        out.print(f"  [dim]{escape(c.label)}[/] {escape(c.speaker)}: {escape(text)}")
        if getattr(c, "unsure", ()):
            out.print(f"    [yellow]heard with low confidence:[/] {escape(', '.join(c.unsure))}")
        if getattr(c, "check", ""):
            out.print(f"    [yellow]check it in the recording:[/] {escape(c.check)}; a \"not\" may have been missed")
