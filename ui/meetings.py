"""The page's Meetings tab: the meetings in the library (app/library) listed, searched, opened, and asked across.

Each call opens the library and closes it again, so a meeting recorded by another command (a batch, a saved live
meeting) shows at the next press of Refresh, and nothing here holds the file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gradio as gr

from app.text.transcript import format_day as _day, format_time, to_markdown
from encoders.errors import InputError

if TYPE_CHECKING:
    from app.live.runtime import Runtime

COLUMNS = ["id", "title", "date", "length", "speakers"]
NOTHING_YET = ("_The library is empty: a meeting is recorded here when `minutia summarize` or `minutia batch` reads "
               "it, or a saved live meeting ends._")


def _md(text: str) -> str:
    """Text said in a meeting, shown as Markdown without turning into markup."""
    return "".join("\\" + ch if ch in "\\`*_[]<>#|" else ch for ch in text)


class MeetingsTab:
    """What the tab's buttons do, over the library of ``runtime``'s MINUTIA_HOME."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def _open(self, embedder: bool = False):
        from app.library.record import open_library
        from app.platform.store import library_path

        if not library_path(self.runtime.settings).exists():
            return None
        return open_library(self.runtime.settings, create_key=False, embedder=embedder)

    def _since(self, since: str) -> float | None:
        from app.library.record import parse_date

        return parse_date(since) if since and since.strip() else None

    def listed(self, since: str = "") -> tuple[list[list[str]], str]:
        """The table's rows (newest first) and a line above it."""
        try:
            library = self._open()
            if library is None:
                return [], NOTHING_YET
            try:
                heads = library.meetings(self._since(since))
            finally:
                library.close()
        except InputError as exc:
            return [], f"**{_md(str(exc))}**"
        rows = [[h.id, h.title, _day(h.started), format_time(h.duration or 0), ", ".join(h.speakers)] for h in heads]
        return rows, f"{len(rows)} meeting{'s' if len(rows) != 1 else ''}" + (f" from {since.strip()} on" if since else "")

    def search(self, query: str, since: str = "", speaker: str = "") -> str:
        """The sentences that best match ``query`` across the library, each with its meeting, date and time."""
        if not (query or "").strip():
            return "_Type words to look for._"
        try:
            library = self._open(embedder=True)
            if library is None:
                return NOTHING_YET
            try:
                found = library.search(query, limit=12, since=self._since(since), speaker=(speaker or "").strip() or None)
            finally:
                library.close()
        except InputError as exc:
            return f"**{_md(str(exc))}**"
        if not found:
            return "_No sentence in the library matches._"
        return "\n".join(f"- **{_md(f.title)}** {_day(f.started)} "
                         f"{format_time(f.sentence.start) if f.sentence.start is not None else ''} "
                         f"· {_md(f.sentence.speaker)}: {_md(f.sentence.text)}" for f in found)

    def open(self, meeting: str) -> str:
        """One meeting: its summary, decisions, action items and transcript."""
        meeting = (meeting or "").strip()
        if not meeting:
            return "_Pick a meeting in the table (or type its id)._"
        from app.library.record import transcript_of

        try:
            library = self._open()
            if library is None:
                return NOTHING_YET
            try:
                record = library.get(meeting)
            finally:
                library.close()
            transcript = to_markdown(transcript_of(record))
        except InputError as exc:
            return f"**{_md(str(exc))}**"
        parts = [f"### {_md(record.title)}", f"{_day(record.started)} · {format_time(record.duration or 0)} · "
                 f"{_md(', '.join(record.speakers))}", "", _md(record.summary or "(no summary)")]
        for heading, items in (("Decisions", record.decisions), ("Action items", record.action_items)):
            parts += ["", f"**{heading}**" + ("" if items else ": none found")] + [f"- {_md(i)}" for i in items]
        parts += ["", "<details><summary>Transcript</summary>", "", _md(transcript), "", "</details>"]
        return "\n".join(parts)

    def ask(self, question: str, since: str = "", speaker: str = "", meeting_like: str = "") -> str:
        """The answer across the library, with the meeting it comes from and the lines it rests on."""
        from app.answering.questions import checked_question
        from app.library.ask import ask_library
        from app.llm.assistant import Assistant

        try:
            question = checked_question(question or "")
            library = self._open(embedder=True)
            if library is None:
                return NOTHING_YET
            try:
                found = ask_library(library, question, Assistant(self.runtime.engine).ask, since=self._since(since),
                                    speaker=(speaker or "").strip() or None,
                                    meeting_like=(meeting_like or "").strip() or None)
            finally:
                library.close()
        except InputError as exc:
            return f"**{_md(str(exc))}**"
        lines = [f"**{_md(found.text)}**" if "\n" not in found.text else _md(found.text)]  # a list stays a list
        if found.period is not None:
            lines.append(f"_asked of the meetings {_md(found.period.describe())} ({_md(found.period.said)})_")
        if found.meeting is not None:
            lines.append(f"_from {_md(found.meeting.title)}, {_day(found.meeting.started)}_")
        lines += [f"- {c.label} {_md(c.speaker)}: {_md(c.text)}" for c in found.answer.citations]
        lines += [f"- also in {_md(r.title)} ({_day(r.started)}): {_md(a.text)}" for r, a in found.also]
        return "\n".join(lines)


def build_meetings_tab(runtime: Runtime) -> MeetingsTab:
    """The tab's components and events (call inside ``gr.Tab``); the object behind them."""
    tab = MeetingsTab(runtime)
    rows, line = tab.listed()
    gr.Markdown("Every meeting minutia has read: listed, searched and asked across. Stored sealed on this machine.")
    with gr.Row():
        since = gr.Textbox(placeholder="from date (YYYY-MM-DD), optional", show_label=False, scale=2, elem_id="mt-lib-since")
        refresh = gr.Button("Refresh", size="sm", scale=1, elem_id="mt-lib-refresh")
    count = gr.Markdown(line, elem_id="mt-lib-count")
    table = gr.Dataframe(value=rows, headers=COLUMNS, interactive=False, wrap=True, elem_id="mt-lib-table")
    with gr.Row():
        with gr.Column(scale=1):
            query = gr.Textbox(placeholder="Search all meetings (words), then Enter", show_label=False, elem_id="mt-lib-search")
            speaker = gr.Textbox(placeholder="only this speaker, optional", show_label=False, elem_id="mt-lib-speaker")
            found = gr.Markdown(elem_id="mt-lib-found")
            asked = gr.Textbox(placeholder="Ask across meetings, e.g. What did we decide about the budget?",
                               show_label=False, elem_id="mt-lib-question")
            like = gr.Textbox(placeholder="only meetings titled like, optional", show_label=False, elem_id="mt-lib-like")
            ask_button = gr.Button("Ask across meetings", elem_id="mt-lib-ask")
            answer = gr.Markdown(elem_id="mt-lib-answer")
        with gr.Column(scale=1):
            chosen = gr.Textbox(placeholder="meeting id (click a row)", show_label=False, elem_id="mt-lib-id")
            shown = gr.Markdown("_Pick a meeting in the table._", elem_id="mt-lib-meeting")

    def picked(evt: gr.SelectData, current):
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        try:
            meeting = current.iloc[row, 0] if hasattr(current, "iloc") else current[row][0]
        except (IndexError, KeyError, TypeError):
            return "", "_Pick a meeting in the table._"
        return meeting, tab.open(meeting)

    refresh.click(tab.listed, inputs=[since], outputs=[table, count], show_progress="hidden")
    since.submit(tab.listed, inputs=[since], outputs=[table, count], show_progress="hidden")
    query.submit(tab.search, inputs=[query, since, speaker], outputs=[found], show_progress="hidden")
    table.select(picked, inputs=[table], outputs=[chosen, shown], show_progress="hidden")
    chosen.submit(tab.open, inputs=[chosen], outputs=[shown], show_progress="hidden")
    ask_button.click(tab.ask, inputs=[asked, since, speaker, like], outputs=[answer])
    asked.submit(tab.ask, inputs=[asked, since, speaker, like], outputs=[answer])
    return tab
