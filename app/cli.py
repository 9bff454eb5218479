"""The `minutia` command. Every flag can also come from the config preset or MINUTIA_* variables."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape

from app.config import Settings, load_settings
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
JsonOpt = Annotated[bool, typer.Option("--json", help="print machine-readable JSON to stdout")]
OutOpt = Annotated[Optional[Path], typer.Option("--out", "-o", help="output folder (default: next to the input)")]


def _settings(config: str | None, llm: str | None = None, asr: str | None = None, diar: str | None = None,
              speakers: int | None = None) -> Settings:
    overrides = {
        "llm": {"model": llm},
        "asr": {"model": asr},
        "diarization": {"model": diar, "num_speakers": speakers},
    }
    return load_settings(config, overrides)


def _out_dir(out_dir: Path | None, source: Path) -> Path:
    if out_dir is not None:
        return out_dir
    return source if source.is_dir() else source.parent


def _stem(source: Path) -> str:
    return source.name if source.is_dir() else source.stem


@app.command()
def models(config: ConfigOpt = None) -> None:
    """Provision the embedded default models (idempotent)."""
    from app.models import describe, provision

    settings = _settings(config)
    for model in provision(settings.home):
        info = describe(model.path)
        state = "provisioned" if model.created else "already present"
        err.print(f"[green]{model.name}[/]: {state} at {model.path} ({info['bytes'] / 1e6:.0f} MB)")


@app.command()
def transcribe(
    recording: Annotated[Path, typer.Argument(help="wav, mp3, m4a, mp4, webm, ogg ... or a folder with one")],
    out_dir: OutOpt = None,
    formats: Annotated[str, typer.Option(help="comma-separated: json,srt,vtt,md")] = "json,srt,vtt,md",
    config: ConfigOpt = None, asr_model: ASROpt = None, diarization_model: DiarOpt = None,
    num_speakers: SpeakersOpt = None, as_json: JsonOpt = False,
) -> None:
    """Recording -> speaker-attributed transcript with word times (JSON, SRT, VTT, Markdown)."""
    from app.pipeline import load_meeting, resolve_input
    from app.transcript import WRITERS, to_json, write_all

    wanted = [f.strip() for f in formats.split(",") if f.strip()]
    unknown = [f for f in wanted if f not in WRITERS]
    if unknown or not wanted:
        raise InputError(f"unknown format(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(WRITERS)}")
    settings = _settings(config, asr=asr_model, diar=diarization_model, speakers=num_speakers)
    if resolve_input(recording).recording is None:
        raise InputError(f"{recording} is not a recording")
    transcript = load_meeting(recording, settings, err)
    written = write_all(transcript, _out_dir(out_dir, recording), f"{_stem(recording)}.transcript", wanted)
    if as_json:
        print(to_json(transcript), end="")
        return
    for index, turn in enumerate(transcript.turns):
        from app.transcript import turn_label

        out.print(f"[dim]{turn_label(index, turn)}[/] [bold]{turn.speaker}[/]: {turn.text}")
    err.print(f"[green]wrote[/] {', '.join(str(p) for p in written)}")


def _assistant(settings: Settings):
    from app.assistant import Assistant
    from app.llm import LLMEngine

    with err.status(f"loading the LLM ({settings.llm.model})"):
        return Assistant(LLMEngine.from_settings(settings.llm, settings.home, settings.kv))


def _at(start: float | None, turn_index: int) -> str:
    from app.transcript import format_time

    return format_time(start) if start is not None else f"turn {turn_index + 1}"


def _summary_markdown(summary, source: str) -> str:
    lines = [f"# Meeting summary: {source}", "", summary.summary, ""]
    if summary.key_facts:
        lines += ["## Key facts", ""]
        lines += [f"- [{_at(f.start, f.turn_index)}] {f.speaker}: {f.text}" for f in summary.key_facts]
        lines.append("")
    if summary.decisions:
        lines += ["## Decisions", ""]
        lines += [f"- [{_at(d.start, d.turn_index)}] {d.speaker}: {d.text}" for d in summary.decisions]
        lines.append("")
    lines += ["## Action items", ""]
    if summary.action_items:
        lines += ["| Owner | Task | Due | Said at |", "|---|---|---|---|"]
        lines += [f"| {a.owner} | {a.task} | {a.due or '-'} | {_at(a.start, a.turn_index)} |" for a in summary.action_items]
    else:
        lines.append("None found.")
    return "\n".join(lines) + "\n"


@app.command()
def summarize(
    meeting: Annotated[Path, typer.Argument(help="a recording, a transcript (minutia JSON, QMSum JSON, text) or a folder")],
    out_dir: OutOpt = None, config: ConfigOpt = None, llm: LLMOpt = None, asr_model: ASROpt = None,
    diarization_model: DiarOpt = None, num_speakers: SpeakersOpt = None, as_json: JsonOpt = False,
) -> None:
    """Summary, decisions and action items (owner, task, due date) as Markdown and JSON."""
    from app.pipeline import load_meeting
    from app.transcript import atomic_write

    settings = _settings(config, llm, asr_model, diarization_model, num_speakers)
    transcript = load_meeting(meeting, settings, err)
    assistant = _assistant(settings)
    with err.status("summarising"):
        summary = assistant.summarize(transcript)
    folder, stem = _out_dir(out_dir, meeting), _stem(meeting)
    markdown = _summary_markdown(summary, transcript.source)
    payload = json.dumps(summary.to_dict(), indent=2, ensure_ascii=False) + "\n"
    atomic_write(folder / f"{stem}.summary.md", markdown)
    atomic_write(folder / f"{stem}.summary.json", payload)
    if as_json:
        print(payload, end="")
    else:
        out.print(Markdown(markdown))
        err.print(f"[green]wrote[/] {folder / f'{stem}.summary.md'}, {folder / f'{stem}.summary.json'}")


@app.command()
def ask(
    meeting: Annotated[Path, typer.Argument(help="a recording, a transcript or a folder")],
    question: Annotated[str, typer.Argument(help="the question")],
    config: ConfigOpt = None, llm: LLMOpt = None, asr_model: ASROpt = None,
    diarization_model: DiarOpt = None, num_speakers: SpeakersOpt = None, as_json: JsonOpt = False,
) -> None:
    """Answer a question about a meeting, citing the turns (times, speakers) it rests on."""
    from app.pipeline import load_meeting

    if not question.strip():
        raise InputError("the question is empty")
    settings = _settings(config, llm, asr_model, diarization_model, num_speakers)
    transcript = load_meeting(meeting, settings, err)
    assistant = _assistant(settings)
    with err.status("thinking"):
        answer = assistant.ask(transcript, question)
    if as_json:
        print(json.dumps(answer.to_dict(), indent=2, ensure_ascii=False))
        return
    out.print(f"[bold]{answer.text}[/]")
    for c in answer.citations:
        text = c.text if len(c.text) <= 240 else c.text[:237] + "..."
        out.print(f"  [dim]{escape(c.label)}[/] {escape(c.speaker)}: {escape(text)}")


@app.command()
def demo(config: ConfigOpt = None, out_dir: OutOpt = None) -> None:
    """Run the batch path on the bundled sample: transcript, summary, action items, one answer."""
    sample = Path(__file__).resolve().parent.parent / "samples" / "standup"
    target = out_dir or Path("out") / "demo"
    err.rule("[bold]1. transcript with speakers")
    transcribe(sample, out_dir=target, config=config)
    err.rule("[bold]2. summary and action items")
    summarize(sample, out_dir=target, config=config)
    question = "How much will the pilot cost?"
    err.rule(f"[bold]3. question: {question}")
    ask(sample, question, config=config)


def main() -> None:
    import warnings

    warnings.filterwarnings("ignore", message="pkg_resources is deprecated")  # webrtcvad, via resemblyzer
    try:
        app()
    except InputError as exc:
        # One line, whatever the console width; paths and messages are text, never console markup.
        err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("[red]interrupted[/]")
        sys.exit(130)


if __name__ == "__main__":
    main()
