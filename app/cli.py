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
) -> None:
    """Recording -> speaker-attributed transcript with word times (JSON, SRT, VTT, Markdown)."""
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
    if as_json:
        print(to_json(transcript), end="")
        return
    for index, turn in enumerate(transcript.turns):
        from app.text.transcript import turn_label

        out.print(f"[dim]{turn_label(index, turn)}[/] [bold]{turn.speaker}[/]: {turn.text}")
    err.print(f"[green]wrote[/] {', '.join(str(p) for p in written)}")


def _assistant(settings: Settings):
    from app.llm.assistant import Assistant
    from app.llm.engine import LLMEngine

    with err.status(f"loading the LLM ({settings.llm.model})"):
        return Assistant(LLMEngine.from_settings(settings.llm, settings.home, settings.kv))


def _at(start: float | None, turn_index: int) -> str:
    from app.text.transcript import format_time

    return format_time(start) if start is not None else f"turn {turn_index + 1}"


@app.command()
def summarize(
    meeting: Annotated[Path, typer.Argument(help="a recording, a transcript (minutia JSON, QMSum JSON, text) or a folder")],
    out_dir: OutOpt = None, config: ConfigOpt = None, llm: LLMOpt = None, asr_model: ASROpt = None,
    diarization_model: DiarOpt = None, num_speakers: SpeakersOpt = None, hotwords: HotwordsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Summary, decisions and action items (owner, task, due date) as Markdown and JSON."""
    from app.batch.exports import for_the_model, write_summary
    from app.batch.pipeline import load_meeting

    settings = _settings(config, llm, asr_model, diarization_model, num_speakers, hotwords)
    folder, stem = _out_dir(out_dir, meeting), _stem(meeting)
    transcript = for_the_model(load_meeting(meeting, settings, err), settings)
    assistant = _assistant(settings)
    with err.status("summarising"):
        summary = assistant.summarize(transcript)
    markdown, payload, _ = write_summary(summary, transcript.source, settings, folder, stem)
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
    diarization_model: DiarOpt = None, num_speakers: SpeakersOpt = None, hotwords: HotwordsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question about a meeting, citing the turns (times, speakers) it rests on."""
    from app.batch.exports import for_the_model
    from app.batch.pipeline import load_meeting
    from app.answering.questions import checked_question

    question = checked_question(question)  # before the meeting is read: a bad question fails at once
    settings = _settings(config, llm, asr_model, diarization_model, num_speakers, hotwords)
    transcript = for_the_model(load_meeting(meeting, settings, err), settings)
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

    from app.batch.jobs import find_jobs
    from app.batch.cluster import BatchOptions, run_batch

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
                  f"in {data['wall_seconds']:.0f} s on {data['workers']} worker(s)"
                  + (f"; {rate:.2f} recording-hours per hour" if rate else "") + f"; report: {folder / 'report.json'}")
    if data["failed"]:
        raise typer.Exit(1)


@app.command()
def live(
    recording: Annotated[Path, typer.Argument(help="a recording (audio or video) or a folder with one")],
    speed: Annotated[float, typer.Option(help="replay speed: 1 = real time, 0 = as fast as possible, in fixed 3 s decode steps (the same words on any machine)")] = 1.0,
    until: Annotated[Optional[float], typer.Option("--until", help="replay only the first SECONDS of the recording")] = None,
    question: Annotated[Optional[list[str]], typer.Option("--ask", "-q", help="question(s) to ask mid-replay")] = None,
    ask_at: Annotated[Optional[float], typer.Option(help="meeting second at which to ask (default: 70% through)")] = None,
    save: Annotated[bool, typer.Option("--save", help="save the meeting as it goes (encrypted); `minutia resume` continues it")] = False,
    session_id: Annotated[Optional[str], typer.Option("--session", help="session id to save under (default: a new one)")] = None,
    replace: Annotated[bool, typer.Option("--replace", help="overwrite a meeting already saved under --session")] = False,
    out_dir: OutOpt = None, config: ConfigOpt = None, llm: LLMOpt = None, asr_model: ASROpt = None,
    hotwords: HotwordsOpt = None,
) -> None:
    """Replay a recording as if it were a live meeting: words appear as they are committed, questions are answered mid-meeting."""
    import threading

    from app.batch.pipeline import resolve_input
    from app.live.runtime import Runtime
    from app.live.events import Failed, LineClosed, SessionEvent, SlideShown
    from app.live.session import replay
    from app.batch.exports import write_transcript
    from app.text.transcript import SLIDE_SPEAKER, WRITERS

    if speed < 0:
        raise InputError("--speed must be >= 0")
    if until is not None and until <= 0:
        raise InputError("--until must be > 0 seconds")
    source = resolve_input(recording).recording
    if source is None:
        raise InputError(f"{recording} is a transcript; `minutia live` replays a recording")
    settings = _settings(config, llm, asr_model, hotwords=hotwords)
    duration = _media_duration(source)
    if until is not None:
        duration = min(until, duration) if duration > 0 else until
    if replace and not save:
        raise InputError("--replace goes with --save")
    if out_dir is not None:
        _out_dir(out_dir, source)
    runtime = Runtime(settings)
    # the session first: a saved meeting of that id is refused before seconds of model loading
    session = runtime.new_session(session_id, source=source.name, autosave=save, replace=replace)
    with err.status("loading the models"):
        runtime.warm_up()  # the PII detector too: a missing spaCy model is said before the replay

    def show(event: SessionEvent) -> None:
        match event:
            case LineClosed(line):
                who = SLIDE_SPEAKER if line.modality == "video" else line.speaker
                out.print(f"[dim]{escape(_at(line.start, 0))}[/] [bold]{escape(str(who))}[/]: {escape(line.text)}")
            case SlideShown(slide):
                out.print(f"[magenta]slide at {_at(slide.time, 0)}[/]: {escape(slide.text[:120])}")
            case Failed(message):
                err.print(f"[red]session error:[/] {escape(message)}")

    session.subscribe(show)
    stop = threading.Event()
    failure: list[BaseException] = []

    def run_replay() -> None:
        try:
            replay(session, source, speed=speed, stop=stop, finish=False, until=until)
        except BaseException as exc:  # reported in the main thread
            failure.append(exc)

    feeder = threading.Thread(target=run_replay, daemon=True)
    feeder.start()
    questions = [q for q in (question or []) if q.strip()]
    when = ask_at if ask_at is not None else 0.7 * duration
    try:
        if questions:
            # Asked once the meeting has been *committed* up to that moment (what a listener has heard).
            session.wait_until_committed(when, input_ended=lambda: not feeder.is_alive())
            for q in questions:
                out.print(f"[bold]question at {_at(session.committed_seconds, 0)}:[/] {escape(q)}")
                answer = session.ask(q)
                out.print(f"[bold green]answer:[/] {escape(answer.text)}")
                for c in answer.citations:
                    out.print(f"  [dim]{escape(c.label)}[/] {escape(c.speaker)}: {escape(c.text[:200])}")
        feeder.join()
        if failure:
            raise failure[0]
        session.finish()
    except KeyboardInterrupt:
        stop.set()
        raise
    finally:
        snap = session.snapshot()
        runtime.close()
    if snap.error:
        raise InputError(f"the session failed: {snap.error}")
    if not snap.transcript.turns and not snap.slides:  # (an empty meeting is never saved)
        raise InputError(f"{source.name} contains no speech")
    lags = sorted(session.commit_lags())
    if lags:
        p50, p95 = lags[len(lags) // 2], lags[min(len(lags) - 1, int(0.95 * len(lags)))]
        err.print(f"[dim]commit latency p50 {p50:.2f} s, p95 {p95:.2f} s over {len(lags)} words; "
                  f"KV {snap.kv.get('tiered_kv_bytes', 0) / 1e6:.2f} MB of {snap.kv.get('full_precision_bytes', 0) / 1e6:.2f} MB "
                  f"full-precision[/]")
    if out_dir is not None:
        _, paths = write_transcript(snap.transcript, settings, out_dir, _stem(source), WRITERS, runtime.pii_detector)
        err.print(f"[green]wrote[/] {', '.join(str(p) for p in paths)}")
    if save:
        err.print(f"[green]saved[/] as session {session.session_id}: `minutia resume {session.session_id} --ask ...`")


def _media_duration(path: Path) -> float:
    import av

    try:
        with av.open(str(path)) as container:
            if container.duration:
                return container.duration / 1_000_000
    except (av.error.FFmpegError, ValueError) as exc:
        raise InputError(f"cannot open {path} as a recording: {exc}") from exc
    return 0.0


# ----- begin: room bot and audit log (issue 8; app/rooms/bot.py, app/platform/audit.py) -----
audit_app = typer.Typer(no_args_is_help=True, help="The hash-chained audit log of KV operations.")
app.add_typer(audit_app, name="audit")


def _bot_rooms(rooms: list[str]) -> dict[str, str]:
    import os

    pairs = list(rooms) + [p for p in os.environ.get("MINUTIA_BOT_ROOMS", "").split(",") if p.strip()]
    parsed: dict[str, str] = {}
    for pair in pairs:
        name, sep, token = pair.strip().partition("=")
        if not sep or not name or not token:
            raise InputError(f"room {pair!r} must be NAME=TOKEN")
        parsed[name] = token
    return parsed


@app.command()
def bot(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
    room: Annotated[Optional[list[str]], typer.Option("--room", help="NAME=TOKEN, repeatable (also MINUTIA_BOT_ROOMS)")] = None,
    rooms_file: Annotated[Optional[Path], typer.Option("--rooms", help="YAML bot settings: rooms (name: token) and limits")] = None,
    ice_host: Annotated[Optional[list[str]], typer.Option("--ice-host", help="only these ICE host addresses (default: the --host address unless it is 0.0.0.0)")] = None,
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", help="run each room's meeting as an actor on this Ray cluster (auto or HOST:PORT; 'local' starts one here); the store must be redis")] = None,
    cpus_per_room: Annotated[float, typer.Option("--cpus-per-room", help="CPUs Ray reserves for each room's actor")] = 1.0,
    config: ConfigOpt = None, llm: LLMOpt = None, asr_model: ASROpt = None,
) -> None:
    """Serve WebRTC rooms: captions, slides and answers over a data channel; /metrics for Prometheus."""
    from app.rooms.bot import BotSettings, listen_ice_hosts, run_bot
    from app.platform.metrics import configure_json_logging
    from app.live.runtime import Runtime

    bot_settings = BotSettings.from_file(rooms_file) if rooms_file else BotSettings()
    bot_settings.rooms.update(_bot_rooms(room or []))
    if room:
        err.print("[yellow]note:[/] tokens given with --room show in the process list; MINUTIA_BOT_ROOMS or "
                  "--rooms FILE keep them out of it", soft_wrap=True)
    if ice_host:
        bot_settings.ice_hosts = list(ice_host)
    elif bot_settings.ice_hosts is None:
        bot_settings.ice_hosts = listen_ice_hosts(host)
    if not bot_settings.rooms:
        raise InputError("no rooms: give --room NAME=TOKEN, --rooms FILE or MINUTIA_BOT_ROOMS")
    configure_json_logging()
    settings = _settings(config, llm, asr_model)
    if ray_address is not None:
        run_bot(None, bot_settings, host, port, console=err,
                meetings=_cluster_meetings(settings, ray_address, cpus_per_room))
        return
    runtime = Runtime(settings)
    with err.status("loading models"):
        runtime.warm_up()
    run_bot(runtime, bot_settings, host, port, console=err)


def _cluster_meetings(settings, ray_address: str, cpus_per_room: float):
    """The bot's rooms as Ray actors; they survive a lost node only through a store every node reads (Redis)."""
    from app.rooms.bot_meetings import ClusterMeetings
    from app.rooms.room_fleet import FleetOptions

    if settings.store.backend != "redis" and ray_address != "local":
        raise InputError("rooms on a Ray cluster keep their meetings in Redis: set store.backend: redis and "
                         "store.redis_url (a disk store is not shared between nodes; --ray-address local may use it)")
    options = FleetOptions(ray_address=None if ray_address == "local" else ray_address, cpus_per_room=cpus_per_room)
    with err.status("joining the Ray cluster"):
        return ClusterMeetings(settings, options)


@app.command()
def forget(
    session: Annotated[str, typer.Option("--session", help="a saved meeting's session id")],
    source: Annotated[Optional[str], typer.Option("--source", help="what to forget: a key source of that meeting, "
                                                  "the screen ('screen'), or a speaker (without it, the sources are "
                                                  "listed)")] = None,
    speaker: Annotated[Optional[str], typer.Option("--speaker", help="forget one speaker: a label (SPEAKER_01) or "
                                                   "the name the transcript gives them")] = None,
    backend: Annotated[Optional[str], typer.Option("--store", help="disk or redis (default: the config's store)")] = None,
    config: ConfigOpt = None, llm: LLMOpt = None,
) -> None:
    """Forget one source of a saved meeting. A key source is crypto-shredded: its data keys are destroyed and its
    blocks deleted, so no copy of them (a backup included) can be decrypted again. A speaker, or the screen, is
    taken out of the meeting: it is rebuilt without their words or slides (the KV prefilled again), saved, and its
    old key sources shredded. The audit log records either."""
    from app.live.lineage import is_screen
    from app.platform.store import open_session_store

    settings = _settings(config, llm)
    if speaker is not None and source is not None:
        raise InputError("give --source or --speaker, not both")
    store = open_session_store(settings, create_key=False, backend=backend)
    try:
        sources = store.sources(session)
        if not sources:
            raise InputError(f"no saved session {session!r} in the {backend or settings.store.backend} store")
        if source is None and speaker is None:
            out.print("\n".join(sources))
            _print_lineage(store, session, settings.kv.block_size)
            return
        content = speaker if speaker is not None else None if source in sources else source
        if content is None:
            report = store.shred(source, session)
        elif not is_screen(content) and speaker is None and not _is_speaker(store, session, content):
            raise InputError(f"session {session!r} has no source {source!r}; its sources: "
                             f"{', '.join(sources + _content_sources(store, session, settings.kv.block_size))}")
    finally:
        store.close()
    if content is not None:
        _forget_content(settings, session, content, backend)
        return
    left = "" if sources != [source] else "; nothing is left of the meeting"
    out.print(f"forgot {escape(source)} in session {escape(session)}: {report.keys_destroyed} key(s) destroyed, "
              f"{report.blocks_deleted} block(s) deleted{left}")


@app.command()
def cost(
    session: Annotated[str, typer.Argument(help="a saved meeting's session id")],
    backend: Annotated[Optional[str], typer.Option("--store", help="disk or redis (default: the config's store)")] = None,
    config: ConfigOpt = None,
) -> None:
    """What a saved meeting cost at the config's prices (`cost:`): its share of the machine while it ran, what it
    keeps in the session store, what its KV moved over the network; per meeting-hour (app/platform/cost.py)."""
    from rich.table import Table

    from app.platform.cost import GIB, meeting_cost
    from app.live.forget import saved_usage
    from app.platform.store import open_session_store

    from kvstore.stores import StoreError

    settings = _settings(config)
    store = open_session_store(settings, create_key=False, backend=backend)
    try:
        usage = saved_usage(store, session)
        measured = store.session_nbytes(session)  # in the store, the last save included
        usage.stored_bytes = usage.stored_bytes if measured is None else measured
    except StoreError as exc:  # a wrong key, a store that went away
        raise InputError(f"session {session!r} could not be read: {exc}") from None
    except (TypeError, ValueError, AttributeError):
        raise InputError(f"session {session!r} holds a damaged record of what it used") from None
    finally:
        store.close()
    if not usage.wall_seconds:
        raise InputError(f"session {session!r} was saved before minutia metered what a meeting uses: no cost to show")
    report = meeting_cost(usage, settings.cost)
    prices = settings.cost
    table = Table(title=f"cost of meeting {escape(session)} (USD)")
    for column in ("item", "measured", "price", "cost"):
        table.add_column(column, justify="left" if column == "item" else "right")
    table.add_row("machine share", f"{usage.machine_seconds / 3600:.3f} h of {report.cores} cores, {report.gpus} GPUs",
                  f"{prices.cpu_core_hour:g}/core-h, {prices.gpu_hour:g}/GPU-h", f"{report.compute:.4f}")
    table.add_row("storage (a month)", f"{usage.stored_bytes / GIB * 1024:.2f} MiB", f"{prices.storage_gib_month:g}/GiB-month",
                  f"{report.storage:.4f}")
    table.add_row("network", f"{usage.remote_bytes / GIB * 1024:.2f} MiB", f"{prices.network_gib:g}/GiB", f"{report.network:.4f}")
    table.add_row("total", f"{usage.meeting_seconds / 60:.1f} min of meeting", "", f"{report.total:.4f}")
    hourly = report.per_meeting_hour
    table.add_row("per meeting-hour", "", "", "n/a (no meeting time)" if hourly is None else f"{hourly:.4f}")
    out.print(table)
    out.print(f"KV on the device: {usage.device_kv_byte_seconds / GIB / 3600:.4f} GiB-hours, peak "
              f"{usage.peak_device_kv_bytes / GIB * 1024:.2f} MiB; cold tier in host memory: "
              f"{usage.host_kv_byte_seconds / GIB / 3600:.4f} GiB-hours; wall time {usage.wall_seconds:.0f} s")


def _with_store(settings: Settings, **overrides) -> Settings:
    """``settings`` with the store options a command was given (those not None)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return settings.model_copy(update={"store": settings.store.model_copy(update=given)}) if given else settings


def _lineage(store, session: str, block_size: int):
    """A saved meeting's content sources with their KV blocks (app/live/lineage.py); [] if it holds no meeting."""
    from app.live.forget import saved_lineage
    from kvstore.stores import StoreError

    try:
        return saved_lineage(store, session, block_size)
    except (InputError, StoreError):
        return []


def _content_sources(store, session: str, block_size: int) -> list[str]:
    return [s.source for s in _lineage(store, session, block_size)]


def _is_speaker(store, session: str, speaker: str) -> bool:
    """Whether ``speaker`` is a label, or the name of one, in the saved meeting's transcript (as a forget reads it:
    app.text.speakers.speaker_label)."""
    from app.live.forget import saved_speakers
    from app.text.speakers import speaker_label
    from kvstore.stores import StoreError

    try:
        named = saved_speakers(store, session)
        speaker_label(speaker, list(named), {label: name for label, name in named.items() if name})
    except (InputError, StoreError):
        return False
    return True


def _print_lineage(store, session: str, block_size: int) -> None:
    """The meeting's content sources: what each has in the KV and how many blocks it shares with another."""
    from rich.table import Table

    found = _lineage(store, session, block_size)
    if not found:
        return
    table = Table(title=f"what the KV of {escape(session)} holds, by source (--source SOURCE or --speaker NAME)")
    for column in ("source", "lines", "tokens", "KV blocks", "shared with another source"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for held in found:
        table.add_row(escape(held.shown()), str(held.segments), str(held.tokens), str(len(held.blocks)),
                      str(held.shared))
    out.print(table)


def _forget_content(settings: Settings, session: str, source: str, backend: str | None) -> None:
    """Rebuild a saved meeting without a speaker or the screen (app/live/forget.py) and say what went."""
    from app.live.forget import forget_source
    from app.live.runtime import Runtime

    runtime = Runtime(_with_store(settings, backend=backend))
    try:
        with out.status(f"rebuilding {escape(session)} without {escape(source)}..."):
            report = forget_source(runtime, session, source)
    finally:
        runtime.close()
    keys = sum(r.keys_destroyed for r in report.shredded)
    out.print(f"forgot {escape(report.shown())} in session {escape(session)}: {report.removed()} removed "
              f"(held in {report.blocks} KV block(s), {report.shared_blocks} shared with another source), "
              f"{report.words_kept} word(s) and {report.slides} slide(s) kept, {report.tokens} token(s) prefilled "
              f"again as source {escape(report.source)}; {keys} old key(s) destroyed")


@audit_app.command("verify")
def audit_verify(
    file: Annotated[Path, typer.Argument(help="an audit log (JSON lines)")],
    key_env: Annotated[Optional[str], typer.Option(help="environment variable holding the HMAC key, if keyed")] = None,
    key_file: Annotated[Optional[Path], typer.Option("--key-file", help="the master key file the log's key derives "
                                                     "from (default: the store's, as minutia finds it)")] = None,
    also_key_file: Annotated[Optional[list[Path]], typer.Option("--also-key-file", help="another master key file "
                                                                "whose stores write to this log (repeatable)")] = None,
) -> None:
    """Check the chain; exit 1 and name the first bad line when a record was edited, deleted or reordered, or is
    under a master key this check was not given."""
    import os

    from app.platform.audit import verify
    from app.platform.store import load_master_key

    if not file.is_file():
        raise InputError(f"{file} is not a file")
    key = None
    if key_env:
        if key_env not in os.environ:
            raise InputError(f"environment variable {key_env} is not set")
        key = os.environ[key_env].encode()
    else:  # the session store keys its log with a key derived from the master key
        try:
            key = load_master_key(_settings(None), create_key=False, key_file=key_file).audit_key()
        except InputError:
            if key_file is not None:
                raise
            key = None
    others = [load_master_key(_settings(None), create_key=False, key_file=k).audit_key() for k in also_key_file or ()]
    result = verify(file, key, others)
    if not result.ok and key is None and (result.reason or "").startswith("a keyed record"):
        raise InputError(f"cannot verify {file}: its records are keyed and no master key was found "
                         "(MINUTIA_HOME, --key-file or MINUTIA_MASTER_KEY)")
    if not result.ok and result.torn_at is not None:
        err.print(f"[yellow]torn:[/] {escape(str(file))} line {result.bad_line} is a partial last record (a crash "
                  f"mid-append; the next writer cuts it and records the repair); the {result.records} records before "
                  "it verify", soft_wrap=True)
        raise typer.Exit(1)
    if not result.ok:
        err.print(f"[red]tampered:[/] {escape(str(file))} line {result.bad_line}: {escape(result.reason or '')} "
                  f"({result.records} records before it verify)", soft_wrap=True)
        raise typer.Exit(1)
    keyed = "all keyed" if result.keyed == result.records else (
        f"{result.keyed} keyed, {result.records - result.keyed} unkeyed (anyone can recompute those)")
    if result.foreign:
        keyed += f"; {result.foreign} under the other master key(s) given"
    out.print(f"ok: {result.records} records ({keyed}), head {result.head}")
# ----- end: room bot and audit log -----


@app.command()
def resume(
    session: Annotated[str, typer.Argument(help="session id of a saved meeting (minutia live --save prints it)")],
    question: Annotated[Optional[list[str]], typer.Option("--ask", "-q", help="question(s) to ask the resumed meeting")] = None,
    recording: Annotated[Optional[Path], typer.Option("--continue", help="a recording that continues the meeting")] = None,
    speed: Annotated[float, typer.Option(help="replay speed of --continue (0 = as fast as possible)")] = 1.0,
    backend: Annotated[Optional[str], typer.Option("--store", help="disk or redis (default: the config's store)")] = None,
    path: Annotated[Optional[Path], typer.Option("--path", help="disk store folder")] = None,
    redis_url: Annotated[Optional[str], typer.Option("--redis-url", help="redis://host:port/db")] = None,
    key_file: Annotated[Optional[Path], typer.Option("--key-file", help="master key file (mode 0600)")] = None,
    info_only: Annotated[bool, typer.Option("--info-only", help="read the manifest only, do not load the KV")] = False,
    as_json: JsonOpt = False, config: ConfigOpt = None, llm: LLMOpt = None,
) -> None:
    """Continue a saved meeting after a restart, without prefilling it again: ask it questions or feed it more."""
    from app.live.runtime import Runtime
    from app.live.session import replay
    from kvstore.persist import SessionNotFound, session_info
    from kvstore.stores import StoreError

    settings = _settings(config, llm)
    settings = _with_store(settings, backend=backend, path=path, redis_url=redis_url, key_file=key_file)
    runtime = Runtime(settings)
    try:
        store = runtime.session_store(create_key=False)
        try:
            info = session_info(store, session)
        except SessionNotFound as exc:
            raise InputError(str(exc)) from None
        except StoreError as exc:
            raise InputError(f"session {session!r} cannot be resumed: {exc}") from None
        meta = info.metadata if isinstance(info.metadata, dict) else {}
        report: dict[str, object] = {
            "session": session, "store": settings.store.backend, "seq_length": info.seq_length,
            "saved_at": info.saved_at, "blocks": info.blocks, "stream_seconds": meta.get("stream_seconds"),
            "words": len(meta.get("words", [])), "source": meta.get("source"),
        }
        answers = []
        if not info_only:
            with err.status(f"loading session {session}"):
                live_session = runtime.resume_session(session, autosave=recording is not None)
            report["kv_bytes"] = live_session.kv_stats().get("tiered_kv_bytes")
            if recording is not None:
                replay(live_session, recording, speed=speed)
            for q in question or []:
                answers.append(live_session.ask(q))
            snap = live_session.snapshot()
            report["stream_seconds"] = snap.stream_seconds
            report["turns"] = len(snap.transcript.turns)
    finally:
        runtime.close()
    if as_json:
        report["answers"] = [a.to_dict() for a in answers]
        print(json.dumps(report, default=str, indent=2))
        return
    out.print(f"[bold]session {escape(session)}[/] ({settings.store.backend}): {info.seq_length} tokens in the KV cache, "
              f"{report['words']} words, {report['stream_seconds'] or 0:.0f} s of meeting")
    for answer in answers:
        out.print(f"[bold]Q:[/] {escape(answer.question)}")
        out.print(f"[bold green]answer:[/] {escape(answer.text)}")
        for c in answer.citations:
            out.print(f"  [dim]{escape(c.label)}[/] {escape(c.speaker)}: {escape(c.text[:200])}")


def main() -> None:
    import warnings

    warnings.filterwarnings("ignore", message="pkg_resources is deprecated")  # webrtcvad, via resemblyzer
    try:
        try:
            app()
        except InputError as exc:
            # One line, whatever the console width; paths and messages are text, never console markup.
            err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
            sys.exit(2)
        except KeyboardInterrupt:
            err.print("[red]interrupted[/]")
            sys.exit(130)
    except SystemExit as exit_:  # every failing end (typer's own exits too) leaves no empty folder it made
        if exit_.code not in (0, None):
            _remove_empty_outputs()
        raise


if __name__ == "__main__":
    main()
