"""Commands on a recording or a transcript: models, transcribe, summarize, ask, demo, batch."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markdown import Markdown
from rich.markup import escape

from app.cli.common import (
    ASROpt,
    ConfigOpt,
    DiarOpt,
    HotwordsOpt,
    JsonOpt,
    LLMOpt,
    OutOpt,
    SpeakersOpt,
    _formats,
    _out_dir,
    _settings,
    _stem,
    app,
    err,
    out,
    print_answer,
)
from app.platform.config import Settings
from app.text.textnorm import counted
from encoders.errors import InputError


@app.command()
def models(config: ConfigOpt = None) -> None:
    """Provision the embedded default models (idempotent)."""
    from app.platform.models import describe, provision

    settings = _settings(config)
    for model in provision(settings.home):
        info = describe(model.path)
        state = "provisioned" if model.created else "already present"
        err.print(f"[green]{model.name}[/]: {state} at {model.path} ({info['bytes'] / 1e6:.0f} MB)")
    from kernels import cpu_decode

    with err.status("building the fused CPU decode kernel (once per machine)"):
        built = cpu_decode.available()
    if built:
        err.print("[green]CPU decode kernel[/]: ready")
    else:
        err.print(f"[yellow]CPU decode kernel[/]: not built ({cpu_decode.build_error()}); decoding uses the torch reference")


@app.command()
def transcribe(
    recording: Annotated[Path, typer.Argument(help="wav, mp3, m4a, mp4, webm, ogg ... or a folder with one")],
    out_dir: OutOpt = None,
    formats: Annotated[str, typer.Option(help="comma-separated: json,srt,vtt,md")] = "json,srt,vtt,md",
    config: ConfigOpt = None, asr_model: ASROpt = None, diarization_model: DiarOpt = None,
    num_speakers: SpeakersOpt = None, hotwords: HotwordsOpt = None, as_json: JsonOpt = False,
    library: Annotated[bool, typer.Option("--library/--no-library", help="record the meeting in the library "
                                          "(minutia library list)")] = True,
) -> None:
    """Recording -> speaker-attributed transcript with word times (JSON, SRT, VTT, Markdown); the meeting is
    recorded in the library."""
    from app.batch.exports import write_transcript
    from app.batch.pipeline import load_meeting, resolve_input
    from app.text.transcript import WRITERS, to_json

    wanted = _formats(formats)
    if not wanted:
        raise InputError(f"unknown format(s) (none); choose from {', '.join(WRITERS)}")
    settings = _settings(config, asr=asr_model, diar=diarization_model, speakers=num_speakers, hotwords=hotwords)
    if resolve_input(recording).recording is None:
        raise InputError(f"{recording} is not a recording")
    folder = _out_dir(out_dir, recording)
    transcript, written = write_transcript(
        load_meeting(recording, settings, err), settings, folder, f"{_stem(recording)}.transcript", wanted)
    recorded = _record_in_library(settings, transcript, None, recording) if library else None
    if as_json:
        print(to_json(transcript), end="")
        return
    for index, turn in enumerate(transcript.turns):
        from app.text.transcript import turn_label

        out.print(f"[dim]{turn_label(index, turn)}[/] [bold]{turn.speaker}[/]: {turn.text}")
    err.print(f"[green]wrote[/] {', '.join(str(p) for p in written)}")
    if recorded:
        err.print(f"[green]recorded[/] in the library as {escape(recorded)}")


def _assistant(settings: Settings):
    from app.llm.assistant import Assistant
    from app.llm.engine import LLMEngine

    with err.status(f"loading the LLM ({settings.llm.model})"):
        return Assistant(LLMEngine.from_settings(settings.llm, settings.home, settings.kv))


@app.command()
def summarize(
    meeting: Annotated[Path, typer.Argument(help="a recording, a transcript (minutia JSON, QMSum JSON, text) or a folder")],
    out_dir: OutOpt = None, config: ConfigOpt = None, llm: LLMOpt = None, asr_model: ASROpt = None,
    diarization_model: DiarOpt = None, num_speakers: SpeakersOpt = None, hotwords: HotwordsOpt = None,
    as_json: JsonOpt = False,
    library: Annotated[bool, typer.Option("--library/--no-library", help="record the meeting in the library "
                                          "(minutia library list)")] = True,
) -> None:
    """Summary, decisions and action items (owner, task, due date) as Markdown and JSON; the meeting is recorded
    in the library."""
    from app.batch.exports import for_the_model, write_summary
    from app.batch.pipeline import load_meeting

    settings = _settings(config, llm, asr_model, diarization_model, num_speakers, hotwords)
    folder, stem = _out_dir(out_dir, meeting), _stem(meeting)
    transcript = for_the_model(load_meeting(meeting, settings, err), settings)
    assistant = _assistant(settings)
    with err.status("summarising"):
        summary = assistant.summarize(transcript)
    markdown, payload, _ = write_summary(summary, transcript.source, settings, folder, stem)
    recorded = _record_in_library(settings, transcript, summary, meeting) if library else None
    if as_json:
        print(payload, end="")
    else:
        out.print(Markdown(markdown))
        err.print(f"[green]wrote[/] {folder / f'{stem}.summary.md'}, {folder / f'{stem}.summary.json'}")
    if recorded:
        err.print(f"[green]recorded[/] in the library as {escape(recorded)}")


def _warm_from_library(settings: Settings, transcript) -> int:
    """A meeting the library holds is read with the sentence vectors kept there, so asking it again embeds none of
    its sentences (embedding them was most of a first answer's time: 4-15 s on ELITR's meetings); how many were
    found. A library that is absent, locked or unreadable costs the question nothing."""
    from app.library.record import library_detector, meeting_id, open_library
    from app.platform.store import library_path
    from app.text.pii import mask_transcript

    if not library_path(settings).exists():
        return 0
    try:
        with open_library(settings, create_key=False) as lib:
            detector = library_detector(settings)  # the library keeps a meeting as it records it: masked
            return lib.warm(meeting_id(mask_transcript(transcript, detector) if detector else transcript))
    except (InputError, sqlite3.Error):
        return 0


def _record_in_library(settings: Settings, transcript, summary, given: Path) -> str | None:
    """The meeting recorded in the library (its id), dated by the file it was read from (its summary: the
    extractive one when ``summary`` is None); a library that cannot be written warns and costs the command
    nothing."""
    from app.library.record import library_detector, open_library, record_meeting

    try:
        with open_library(settings) as lib:
            return record_meeting(lib, transcript, summary, title=given.name, started=given.stat().st_mtime,
                                  detector=library_detector(settings))
    except (InputError, sqlite3.Error) as exc:
        err.print(f"[yellow]warning:[/] the meeting was not recorded in the library: {escape(str(exc))}")
        return None


@app.command()
def ask(
    meeting: Annotated[str, typer.Argument(help="a recording, a transcript or a folder (with --library: the "
                                           "question)", show_default=False)],
    question: Annotated[Optional[str], typer.Argument(help="the question")] = None,
    config: ConfigOpt = None, llm: LLMOpt = None, asr_model: ASROpt = None,
    diarization_model: DiarOpt = None, num_speakers: SpeakersOpt = None, hotwords: HotwordsOpt = None,
    as_json: JsonOpt = False,
    library: Annotated[bool, typer.Option("--library", help="ask across the meetings in the library")] = False,
    since: Annotated[Optional[str], typer.Option("--since", help="with --library: meetings from this date on "
                                                 "(YYYY-MM-DD)")] = None,
    speaker: Annotated[Optional[str], typer.Option("--speaker", help="with --library: meetings where this "
                                                   "speaker said something matching the question")] = None,
    meeting_like: Annotated[Optional[str], typer.Option("--meeting-like", help="with --library: meetings whose "
                                                        "title is like this")] = None,
) -> None:
    """Answer a question about a meeting (or, with --library, across the recorded meetings), citing the turns
    (times, speakers) it rests on."""
    from app.answering.questions import checked_question
    from app.batch.exports import for_the_model
    from app.batch.pipeline import load_meeting

    if library:
        if question is not None:
            raise InputError("with --library, give the question alone: minutia ask --library \"question\"")
        _ask_library(checked_question(meeting), since, speaker, meeting_like, config, llm, as_json)
        return
    if question is None:
        raise InputError("give a meeting and a question: minutia ask MEETING \"question\" (or --library \"question\")")
    if since or speaker or meeting_like:
        raise InputError("--since, --speaker and --meeting-like choose meetings of the library: add --library")
    question = checked_question(question)  # before the meeting is read: a bad question fails at once
    meeting = Path(meeting)
    settings = _settings(config, llm, asr_model, diarization_model, num_speakers, hotwords)
    loaded = load_meeting(meeting, settings, err)
    transcript = for_the_model(loaded, settings)
    assistant = _assistant(settings)
    with err.status("thinking"):
        _warm_from_library(settings, loaded)
        answer = assistant.ask(transcript, question)
    if as_json:
        print(json.dumps(answer.to_dict(), indent=2, ensure_ascii=False))
        return
    print_answer(answer)


def _ask_library(question: str, since, speaker, meeting_like, config, llm, as_json: bool) -> None:
    from app.library.ask import ask_library
    from app.library.record import open_library, parse_date
    from app.text.transcript import format_day as day_of

    settings = _settings(config, llm)
    with open_library(settings, create_key=False) as lib:
        assistant = _assistant(settings)
        with err.status("reading the library"):
            found = ask_library(lib, question, assistant.ask, since=parse_date(since) if since else None,
                                speaker=speaker, meeting_like=meeting_like)
    where = lambda r: {"meeting": r.id, "title": r.title, "started": r.started}  # noqa: E731
    if as_json:
        period = {"period": {"said": found.period.said, "start": found.period.start, "end": found.period.end}} \
            if found.period else {}
        print(json.dumps({**found.answer.to_dict(), **({"from": where(found.meeting)} if found.meeting else {}), **period,
                          "also": [{**where(r), "answer": a.text} for r, a in found.also]},
                         indent=2, ensure_ascii=False))
        return
    print_answer(found.answer)
    if found.period is not None:
        out.print(f"  [dim]asked of the meetings {escape(found.period.describe())} ({escape(found.period.said)})[/]")
    if found.meeting is not None:
        out.print(f"  [dim]from[/] {escape(found.meeting.title)} ({escape(found.meeting.id)}, {day_of(found.meeting.started, 'undated')})")
    for record, answer in found.also:
        out.print(f"  [dim]also in[/] {escape(record.title)} ({day_of(record.started, 'undated')}): {escape(answer.text)}")




@app.command()
def demo(config: ConfigOpt = None, out_dir: OutOpt = None) -> None:
    """Run the batch path on the bundled sample: transcript, summary, action items, one answer."""
    sample = Path(__file__).resolve().parents[2] / "samples" / "standup"
    target = out_dir or Path("out") / "demo"
    err.rule("[bold]1. transcript with speakers")
    transcribe(sample, out_dir=target, config=config)
    err.rule("[bold]2. summary and action items")
    summarize(sample, out_dir=target, config=config)
    question = "How much will the pilot cost?"
    err.rule(f"[bold]3. question: {question}")
    ask(sample, question, config=config)


@app.command()
def batch(
    inputs: Annotated[list[Path], typer.Argument(help="recordings, or folders searched for recordings")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="output folder: one sub-folder per recording, manifest.json, index.jsonl, report.json")] = Path("out/batch"),
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", help="a running Ray cluster: 'auto' or HOST:PORT (default: a local Ray runtime for this run)")] = None,
    workers: Annotated[Optional[int], typer.Option(help="worker processes, each with its own models (default: the cluster's CPUs / --cpus-per-worker)")] = None,
    cpus_per_worker: Annotated[int, typer.Option(help="CPUs Ray reserves for each worker (its threads)")] = 1,
    retries: Annotated[int, typer.Option(help="retries of a recording whose worker died or hit an unexpected error")] = 1,
    summaries: Annotated[bool, typer.Option("--summaries/--no-summaries", help="also write each recording's summary and action items")] = True,
    formats: Annotated[str, typer.Option(help="transcript formats, comma-separated: json,srt,vtt,md")] = "json,srt,vtt,md",
    config: ConfigOpt = None, llm: LLMOpt = None, asr_model: ASROpt = None, diarization_model: DiarOpt = None,
    num_speakers: SpeakersOpt = None, hotwords: HotwordsOpt = None, as_json: JsonOpt = False,
) -> None:
    """Many recordings at once on Ray: transcripts, speakers, summaries and a search index; a rerun skips what is finished."""
    from rich.table import Table

    from app.batch.cluster import BatchOptions, run_batch
    from app.batch.jobs import find_jobs

    wanted = _formats(formats)
    if "json" not in wanted:
        wanted.insert(0, "json")  # the index and a rerun's checks read it
    settings = _settings(config, llm, asr_model, diarization_model, num_speakers, hotwords)
    jobs = find_jobs(inputs)
    folder = _out_dir(out_dir, out_dir)
    options = BatchOptions(folder, ray_address, workers, cpus_per_worker, retries, summaries, wanted)
    report = run_batch(jobs, settings, options, err)
    data = report.to_dict()
    if as_json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        table = Table("recording", "status", "audio", "speakers", "seconds", "note")
        for job in data["jobs"]:
            note = job.get("error") or ("finished in an earlier run" if job["status"] == "skipped" else "")
            audio = f"{job['duration']:.0f} s" if job.get("duration") else ""
            table.add_row(escape(job["name"]), job["status"], audio, str(len(job.get("speakers") or [])) if job["status"] == "done" else "",
                          f"{job['seconds']:.1f}" if job.get("seconds") else "", escape(note))
        out.print(table)
        rate = data["recording_hours_per_wall_hour"]
        err.print(f"[green]{data['done']} done[/], {data['skipped']} skipped, [red]{data['failed']} failed[/] "
                  f"in {data['wall_seconds']:.0f} s on {counted(data['workers'], 'worker')}"
                  + (f"; {rate:.2f} recording-hours per hour" if rate else "") + f"; report: {folder / 'report.json'}")
    if data["failed"]:
        raise typer.Exit(1)
