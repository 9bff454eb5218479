"""Commands on a live meeting: live (a recording replayed as one) and resume (a saved one continued)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from app.cli.common import (
    ASROpt,
    ConfigOpt,
    HotwordsOpt,
    JsonOpt,
    LLMOpt,
    OutOpt,
    _at,
    _out_dir,
    _settings,
    _stem,
    _with_store,
    app,
    err,
    out,
    print_answer,
)
from encoders.audio import cut_off
from encoders.errors import InputError


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

    from app.batch.exports import write_transcript
    from app.batch.pipeline import resolve_input
    from app.live.events import Failed, LineClosed, SessionEvent, SlideShown
    from app.live.runtime import Runtime
    from app.live.replay import replay
    from app.text.transcript import SLIDE_SPEAKER, WRITERS

    if speed < 0:
        raise InputError("--speed must be >= 0")
    if until is not None and until <= 0:
        raise InputError("--until must be > 0 seconds")
    source = resolve_input(recording).recording
    if source is None:
        raise InputError(f"{recording} is a transcript; `minutia live` replays a recording")
    if (why := cut_off(source)) is not None:  # the replay would just stop early, unsaid
        err.print(f"[yellow]warning:[/] {escape(why)}; replaying what there is", soft_wrap=True)
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
    session = runtime.new_session(session_id, source=source.name, autosave=save, replace=replace, library=True)
    session.title = session_id if save and session_id else source.name  # as the meeting library lists it
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
                print_answer(session.ask(q))
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
        held, full = snap.kv.get("tiered_kv_bytes", 0), snap.kv.get("full_precision_bytes", 0)
        index = snap.kv.get("bytes_by_tier", {}).get("metadata", 0)
        err.print(f"[dim]words shown {p50:.2f} s after they were said (half of the {len(lags)} words; 95% within "
                  f"{p95:.2f} s); the model holds the meeting in {held / 1e6:.2f} MB: {(held - index) / 1e6:.2f} MB of "
                  f"it ({full / 1e6:.2f} MB uncompressed) and {index / 1e6:.2f} MB of index to find what a question "
                  f"needs[/]")
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
    from app.live.replay import replay
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
        print_answer(answer)
