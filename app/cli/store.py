"""Commands on saved meetings and their audit trail: forget, cost, audit verify."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from app.cli.common import ConfigOpt, LLMOpt, _settings, _with_store, app, err, out
from app.platform.config import Settings
from app.text.textnorm import counted
from encoders.errors import InputError

audit_app = typer.Typer(no_args_is_help=True, help="The hash-chained audit log of KV operations.")
app.add_typer(audit_app, name="audit")


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
    out.print(f"forgot {escape(source)} in session {escape(session)}: {counted(report.keys_destroyed, 'key')} destroyed, "
              f"{counted(report.blocks_deleted, 'block')} deleted{left}")
    _forget_in_library(settings, session)


def _forget_in_library(settings: Settings, session: str) -> None:
    """A shredded key source took words the library cannot tell apart from the rest of the meeting: the library's
    copy of that meeting goes with it."""
    from app.platform.store import library_path

    if not library_path(settings).exists():
        return
    from app.library.record import open_library

    with open_library(settings, create_key=False, embedder=False) as library:
        if library.forget(session):
            out.print(f"forgot meeting {escape(session)} in the library too")


@app.command()
def cost(
    session: Annotated[str, typer.Argument(help="a saved meeting's session id")],
    backend: Annotated[Optional[str], typer.Option("--store", help="disk or redis (default: the config's store)")] = None,
    config: ConfigOpt = None,
) -> None:
    """What a saved meeting cost at the config's prices (`cost:`): its share of the machine while it ran, what it
    keeps in the session store, what its KV moved over the network; per meeting-hour (app/platform/cost.py)."""
    from rich.table import Table

    from app.live.forget import saved_usage
    from app.platform.cost import GIB, meeting_cost
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
              f"(held in {counted(report.blocks, 'KV block')}, {report.shared_blocks} shared with another source), "
              f"{counted(report.words_kept, 'word')} and {counted(report.slides, 'slide')} kept, "
              f"{counted(report.tokens, 'token')} prefilled again as source {escape(report.source)}; "
              f"{counted(keys, 'old key')} destroyed")


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
