"""``minutia library``: list, show, search and forget the meetings minutia has recorded (app/library)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from app.cli.common import ConfigOpt, JsonOpt, _settings, app, err, out
from app.text.textnorm import counted
from app.text.transcript import format_day as _day, format_time
from encoders.errors import InputError

library_app = typer.Typer(no_args_is_help=True, help="The meeting library: every meeting summarised here, sealed.")
app.add_typer(library_app, name="library")

SinceOpt = Annotated[Optional[str], typer.Option("--since", help="only meetings from this date on (YYYY-MM-DD)")]


@library_app.command("list")
def list_meetings(since: SinceOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """The meetings in the library, newest first."""
    import json

    from app.library.record import open_library, parse_date

    settings = _settings(config)
    with open_library(settings, create_key=False, embedder=False) as library:
        records = library.meetings(parse_date(since) if since else None)
    if as_json:
        print(json.dumps([{"id": r.id, "title": r.title, "started": r.started, "duration": r.duration,
                           "speakers": r.speakers} for r in records], indent=2, ensure_ascii=False))
        return
    if not records:
        err.print("the library holds no meeting" + (f" from {since} on" if since else ""))
        return
    table = Table("id", "title", "date", "length", "speakers")
    for r in records:
        table.add_row(escape(r.id), escape(r.title), _day(r.started), format_time(r.duration or 0),
                      escape(", ".join(r.speakers)))
    out.print(table)


@library_app.command("show")
def show(meeting: Annotated[str, typer.Argument(help="a meeting's id (minutia library list)")],
         transcript: Annotated[bool, typer.Option("--transcript", help="print the whole transcript too")] = False,
         config: ConfigOpt = None) -> None:
    """One meeting: its speakers, summary, decisions and action items (and transcript)."""
    from app.library.record import open_library, transcript_of
    from app.text.transcript import to_markdown

    with open_library(_settings(config), create_key=False, embedder=False) as library:
        record = library.get(meeting)
    out.print(f"[bold]{escape(record.title)}[/] ({escape(record.id)}), {_day(record.started)}, "
              f"{format_time(record.duration or 0)}, speakers: {escape(', '.join(record.speakers))}")
    out.print(escape(record.summary or "(no summary)"))
    for heading, items in (("Decisions", record.decisions), ("Action items", record.action_items)):
        out.print(f"\n[bold]{heading}[/]" + ("" if items else ": none found"))
        for item in items:
            out.print(f"- {escape(item)}")
    if transcript:
        out.print("")
        out.print(escape(to_markdown(transcript_of(record))))


@library_app.command("search")
def search(query: Annotated[str, typer.Argument(help="words to look for, across every meeting")],
           since: SinceOpt = None,
           speaker: Annotated[Optional[str], typer.Option("--speaker", help="only what this speaker said")] = None,
           limit: Annotated[int, typer.Option("--limit", min=1, max=100, help="sentences shown")] = 10,
           config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """The sentences across the library that best match the words (BM25 over the sealed index, and meaning)."""
    import json

    from app.answering.questions import checked_question
    from app.library.record import open_library, parse_date

    query = checked_question(query)
    with open_library(_settings(config), create_key=False) as library:
        found = library.search(query, limit=limit, since=parse_date(since) if since else None, speaker=speaker)
    if as_json:
        print(json.dumps([{"meeting": f.meeting, "title": f.title, "speaker": f.sentence.speaker,
                           "start": f.sentence.start, "text": f.sentence.text, "score": round(f.score, 4)}
                          for f in found], indent=2, ensure_ascii=False))
        return
    if not found:
        err.print("no sentence in the library matches")
        return
    for f in found:
        at = format_time(f.sentence.start) if f.sentence.start is not None else f"turn {f.sentence.turn_index + 1}"
        out.print(f"[dim]{escape(f.title)} {_day(f.started)} {at}[/] {escape(f.sentence.speaker)}: "
                  f"{escape(f.sentence.text)}")


@library_app.command("forget")
def forget(meeting: Annotated[str, typer.Argument(help="a meeting's id (minutia library list)")],
           speaker: Annotated[Optional[str], typer.Option("--speaker", help="forget only this speaker's words")] = None,
           config: ConfigOpt = None) -> None:
    """Remove a meeting from the library (its rows and its data key), or one speaker's words from it (the meeting
    is recorded again without them, its summary rebuilt). The audit log records it."""
    from app.library.record import forget_speaker, open_library

    settings = _settings(config)
    if speaker is not None and _saved_session(settings, meeting):
        raise InputError(f"{meeting} is a saved meeting: minutia forget --session {meeting} --speaker {speaker} "
                         "forgets them in it and in the library (here they would come back at its next save)")
    with open_library(settings, create_key=False, embedder=speaker is not None) as library:
        if speaker is not None:
            removed = forget_speaker(library, meeting, speaker)
            out.print(f"forgot {escape(speaker)} in {escape(meeting)}: {counted(removed, 'turn')} removed, "
                      "the summary rebuilt without them")
            return
        if not library.forget(meeting):
            raise InputError(f"the library has no meeting {meeting!r} (minutia library list shows them)")
        out.print(f"forgot meeting {escape(meeting)}: its rows and its key are gone from the library")


def _saved_session(settings, meeting: str) -> bool:
    """Whether ``meeting`` is also a saved live meeting in the session store (its library id is its session id)."""
    from app.platform.store import open_session_store

    try:
        store = open_session_store(settings, create_key=False)
    except InputError:  # no master key, no store: nothing saved
        return False
    try:
        return bool(store.sources(meeting))
    finally:
        store.close()
