"""The live meeting page's handlers: one MeetingSession per browser tab, refreshed by a timer (the layout that
wires them: ui/page.py).

Each tab (Gradio session hash) owns a :class:`Tab`: its current meeting, the replay/microphone
feed, and the per-tab KV history. Every handler only touches its own tab and turns any failure into a
message on that tab, so one tab's bad input or broken meeting never reaches another tab or the server.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gradio as gr

from app.text.transcript import WRITERS, Transcript, atomic_write
from encoders.audio import cut_off
from encoders.errors import InputError
from ui import render
from ui.inputs import check_upload, user_message
from ui.forget import forget_in_tab
from ui.player import playable_copy, player_html
from ui.settings import UISettings, bundled_samples
from ui.tab import Tab, TabFeed

if TYPE_CHECKING:
    from app.live.runtime import Runtime
    from app.live.session import MeetingSession, SessionSnapshot

log = logging.getLogger(__name__)

GONE_PAGES_KEPT = 10_000  # closed pages remembered, so their late microphone / webcam chunks are dropped
TAB_OUTPUTS = 12  # status, transcript, tier plot, modality plot, ratio plot, kv stats, slides, actions, summary, player,
# chat, exported files


class LivePage:
    """The page's behaviour, independent of the widgets: one method per user action."""

    def __init__(self, runtime: Runtime, ui_settings: UISettings | None = None) -> None:
        self.runtime = runtime
        self.ui = ui_settings or UISettings()
        self.samples = bundled_samples()
        self.tabs: dict[str, Tab] = {}
        # Pages gone (closed, reloaded): a microphone or webcam chunk still in flight must not open a meeting
        # for them again (the session would live on with nobody to see it). Newest last, bounded.
        self._gone: OrderedDict[str, None] = OrderedDict()
        self._extra_runtimes: dict[tuple, Runtime] = {}
        self._lock = threading.Lock()
        self.export_root = Path(self.ui.export_dir or tempfile.mkdtemp(prefix="minutia-ui-"))
        self.media_root = Path(tempfile.mkdtemp(prefix="minutia-ui-media-"))  # the only folder the browser may read

    # ------------------------------------------------------------------ tabs and sessions
    def tab(self, request: gr.Request) -> Tab:
        with self._lock:
            return self._tab(request.session_hash or "default")

    def streaming_tab(self, request: gr.Request) -> Tab | None:
        """The tab a microphone or webcam chunk goes to; None once its page is gone (chunks may still arrive)."""
        key = request.session_hash or "default"
        with self._lock:
            return None if key in self._gone else self._tab(key)

    def _tab(self, key: str) -> Tab:
        """The page's tab, made on its first event (the caller holds ``_lock``)."""
        if key not in self.tabs:
            self.tabs[key] = Tab(self.ui.kv_history_points)
        return self.tabs[key]

    def close_tab(self, request: gr.Request) -> None:
        """The tab went away (closed, reloaded, disconnected): stop its feed and close its session."""
        key = request.session_hash or "default"
        with self._lock:
            tab = self.tabs.pop(key, None)
            self._gone[key] = None
            while len(self._gone) > GONE_PAGES_KEPT:
                self._gone.popitem(last=False)
        if tab is not None:
            tab.close()

    def runtime_for(self, overrides: dict) -> Runtime:
        """The shared runtime, or one built for this tab's settings (a different model or KV budget)."""
        base = self.runtime.settings
        model = overrides.get("model") or base.llm.model
        ratio = overrides.get("budget_ratio") or base.kv.budget_ratio
        if model == base.llm.model and ratio == base.kv.budget_ratio:
            return self.runtime
        key = (model, ratio)
        with self._lock:
            if key not in self._extra_runtimes:
                from app.live.runtime import Runtime

                settings = base.model_copy(update={
                    "llm": base.llm.model_copy(update={"model": model}),
                    "kv": base.kv.model_copy(update={"budget_ratio": ratio}),
                })
                self._extra_runtimes[key] = Runtime(settings)
            return self._extra_runtimes[key]

    def _begin(self, tab: Tab, source: str) -> MeetingSession:
        tab.end()
        tab.reset_views()
        tab.drop_player()
        runtime = self.runtime_for(tab.overrides)
        tab.session, tab.runtime, tab.source = runtime.new_session(source=source, library=True), runtime, source
        tab.session.title = render.meeting_title(source)  # what the Meetings tab lists it as when it ends
        tab.started = time.monotonic()
        return tab.session

    def close(self) -> None:
        for key in list(self.tabs):
            self.tabs.pop(key).close()
        for runtime in self._extra_runtimes.values():
            runtime.close()
        self._extra_runtimes.clear()
        shutil.rmtree(self.media_root, ignore_errors=True)

    # ------------------------------------------------------------------ actions
    def start_replay(self, sample: str | None, upload: str | None, speed: float, request: gr.Request) -> tuple:
        """Replay the chosen sample (or the uploaded recording) into a new session, paced at ``speed``."""
        tab = self.tab(request)
        try:
            if upload:
                path, name = check_upload(upload, self.ui.max_upload_mb), Path(upload).name
            elif sample in self.samples:
                path, name = self.samples[sample], sample
            else:
                raise InputError("choose a sample meeting or upload a recording")
            with tab.lock:
                session = self._begin(tab, source=f"replay:{name}")
                stop = tab.stop
                tab.feed = TabFeed(tab)
                tab.feeder = threading.Thread(
                    target=self._replay, args=(tab, tab.feed, path, float(speed), stop), name=f"replay-{session.session_id}", daemon=True
                )
                tab.feeder.start()
                pace = "as fast as it goes" if float(speed) == 0 else (
                    "at real speed" if float(speed) == 1 else f"at {float(speed):g} times real speed")
                tab.notice = f"replaying {name} {pace}"
                if upload and (why := cut_off(path)) is not None:  # the replay would just stop early, unsaid
                    tab.notice += f" ({why})"
            threading.Thread(target=self._prepare_player, args=(tab, session, path), daemon=True).start()
        except Exception as exc:
            return self._fail(tab, exc), []
        return render.status_line(tab.session.snapshot(), tab.notice), []

    def _prepare_player(self, tab: Tab, session: MeetingSession, path: Path) -> None:
        """Put a playable copy of the replayed recording beside the transcript (off the request: a long
        upload in a format the browser cannot play is decoded first)."""
        folder = self.media_root / uuid.uuid4().hex
        try:
            html_ = player_html(playable_copy(path, folder))
        except Exception:
            log.exception("no player for %s", path.name)
            shutil.rmtree(folder, ignore_errors=True)
            return
        with tab.lock:
            if tab.session is session:
                tab.media, tab.player = folder, html_
                return
        shutil.rmtree(folder, ignore_errors=True)  # the meeting was replaced (or rebuilt) meanwhile

    @staticmethod
    def _replay(tab: Tab, session: TabFeed, path: Path, speed: float, stop: threading.Event) -> None:
        from app.live.replay import replay

        try:
            replay(session, path, speed=speed, stop=stop, finish=False)
            if not stop.is_set():  # a replaced or closed meeting is not worth finishing
                session.finish()
                tab.notice = None  # "replaying ... at 4x" is over; the state says finished
        except Exception as exc:  # shown on this tab only, in plain words; the detail goes to the log
            log.warning("replay of %s stopped: %r", path, exc)
            tab.notice = ("⚠️ the recording could not be read to its end (it may be damaged); what was heard "
                          "before that is kept")

    def _live(self, tab: Tab, restart_finished: bool) -> MeetingSession | None:
        """The tab's live (microphone/webcam) meeting, started on first use; a finished one is
        restarted only when asked (the microphone starting again), else None."""
        if tab.session is None or tab.source != "live":
            self._begin(tab, source="live")
            tab.notice = "live: streaming from this browser"
        elif tab.session.state in ("finished", "error"):
            if not restart_finished:
                return None
            self._begin(tab, source="live")
            tab.notice = "live: streaming from this browser"
        return tab.session

    def feed_microphone(self, chunk: tuple | None, request: gr.Request) -> None:
        """One streamed microphone chunk (rate, samples) into the tab's live meeting."""
        tab = None if chunk is None else self.streaming_tab(request)
        if tab is None:
            return
        try:
            rate, samples = chunk
            with tab.lock:
                if not tab.ended:
                    self._live(tab, restart_finished=True).feed_audio(samples, int(rate))
        except Exception as exc:
            self._fail(tab, exc)

    def stop_microphone(self, request: gr.Request) -> str:
        """Recording stopped: commit what was heard; the meeting stays on the page."""
        tab = self.tab(request)
        if tab.session is not None and tab.source == "live":
            threading.Thread(target=self._finish, args=(tab, tab.session), daemon=True).start()
            tab.notice = "microphone stopped: finishing the transcript"
        return render.status_line(tab.session.snapshot() if tab.session else None, tab.notice)

    @staticmethod
    def _finish(tab: Tab, session: MeetingSession) -> None:
        try:
            session.finish()
        except Exception as exc:
            tab.notice = f"⚠️ {user_message(exc)}"

    def feed_webcam(self, frame: Any, request: gr.Request) -> None:
        """One webcam frame into the tab's live meeting, at the time since that meeting started."""
        tab = None if frame is None else self.streaming_tab(request)
        if tab is None:
            return
        try:
            with tab.lock:
                session = None if tab.ended else self._live(tab, restart_finished=False)
                if session is not None:
                    session.feed_video(frame, time.monotonic() - tab.started)
        except Exception as exc:
            self._fail(tab, exc)

    def refresh(self, request: gr.Request) -> tuple:
        """Timer tick: re-render what changed since the last tick (gr.skip() for the rest)."""
        tab = self.tab(request)
        session = tab.session
        if session is None:
            if tab.notice != tab.shown_notice:
                tab.shown_notice = tab.notice
                return (render.status_line(None, tab.notice),) + (gr.skip(),) * (TAB_OUTPUTS - 1)
            return (gr.skip(),) * TAB_OUTPUTS
        try:
            snapshot = session.snapshot()
        except Exception as exc:
            return (self._fail(tab, exc),) + (gr.skip(),) * (TAB_OUTPUTS - 1)
        self._maybe_summarize(tab, snapshot)
        changed = snapshot.version != tab.last_version or tab.notice != tab.shown_notice
        summary = tab.summary_md if tab.summary_version != tab.shown_summary else gr.skip()
        tab.shown_summary = tab.summary_version
        player = tab.player if tab.player != tab.shown_player else gr.skip()
        tab.shown_player = tab.player
        status = render.status_line(snapshot, tab.notice)
        engine = render.kv_stats_markdown(snapshot.kv, snapshot.commit_lag, self._cost(session, snapshot))
        if not changed:  # the progress line and the Engine figures (its cost) still move while nothing is committed
            moved, engine_moved = status != tab.shown_status, engine != tab.shown_engine
            tab.shown_status, tab.shown_engine = status, engine
            return ((status if moved else gr.skip(),) + (gr.skip(),) * 4 + (engine if engine_moved else gr.skip(),)
                    + (gr.skip(),) * (TAB_OUTPUTS - 10) + (summary, player, self._chat(tab), self._files(tab)))
        tab.last_version, tab.shown_notice, tab.shown_status, tab.shown_engine = snapshot.version, tab.notice, status, engine
        tab.history.add(round(snapshot.stream_seconds, 1), snapshot.kv)  # meeting time: the axis ends with the meeting
        try:
            actions = render.action_items_markdown(session.action_items())
        except Exception as exc:
            actions = f"_action items unavailable: {exc}_"
        return (
            status,
            render.transcript_html(snapshot.transcript, snapshot.tentative, tab.search),
            *self._plots(tab.history),
            engine,
            render.slide_items(snapshot.slides),
            actions,
            summary,
            player,
            self._chat(tab),
            self._files(tab),
        )

    @staticmethod
    def _files(tab: Tab) -> Any:
        """None (an empty panel) once after the exports shown stopped being of the meeting shown."""
        if not tab.exports_stale:
            return gr.skip()
        tab.exports_stale = False
        return None

    @staticmethod
    def _chat(tab: Tab) -> Any:
        """The questions and answers when they changed since the last tick (an answer came, a question was asked)."""
        version = tab.asked.version
        if version == tab.shown_asked:
            return gr.skip()
        tab.shown_asked = version
        return tab.asked.messages()

    @staticmethod
    def _cost(session: MeetingSession, snapshot: SessionSnapshot) -> Any:
        """The meeting's cost so far at its settings' prices (app/platform/cost.py), or None before it was measured."""
        from app.platform.cost import Usage, meeting_cost

        usage = (snapshot.counters or {}).get("usage")
        return meeting_cost(Usage.from_dict(usage), session.settings.cost) if usage else None

    @staticmethod
    def _plots(history: render.KVHistory) -> tuple[Any, Any, Any]:
        """The Engine tab's three plots, their x axis bounded to the meeting so far."""
        x_lim = history.time_range()
        return (gr.LinePlot(history.bytes_frame("bytes_by_tier"), x_lim=x_lim),
                gr.LinePlot(history.bytes_frame("bytes_by_modality"), x_lim=x_lim),
                gr.LinePlot(history.ratio_frame(), x_lim=x_lim))

    def _maybe_summarize(self, tab: Tab, snapshot: SessionSnapshot) -> None:
        every = self.ui.summary_every_s
        if every is None or not snapshot.transcript.turns:
            return
        # every so many seconds of the meeting transcribed, not heard: a fast replay is heard long before it is
        # transcribed, and a summary made then holds its first line for the rest of the replay
        due = snapshot.decoded_seconds - tab.summary_at >= every
        # A finished meeting's summary is of all of it: made again whenever what it was made from changed (the
        # last words committed after a fast replay's last summary began, a rename, a forget).
        stale = snapshot.state == "finished" and tab.summary_of != snapshot.version
        if (due or stale) and not tab.summary_busy.locked():
            tab.summary_at = snapshot.decoded_seconds
            threading.Thread(target=self._summarize, args=(tab, tab.session, snapshot.version), daemon=True).start()

    @staticmethod
    def _summarize(tab: Tab, session: MeetingSession, version: int | None = None) -> None:
        if not tab.summary_busy.acquire(blocking=False):
            return
        try:
            tab.summary_of = session.snapshot().version if version is None else version
            summary = session.summary()
            tab.summary_obj = summary
            tab.summary_md = render.summary_markdown(summary, action_items=False)
        except Exception as exc:
            tab.summary_md = f"_summary failed: {exc}_"
        finally:
            tab.summary_version += 1
            tab.summary_busy.release()

    def refresh_summary(self, request: gr.Request) -> str:
        tab = self.tab(request)
        if tab.session is None:
            gr.Warning("Start a meeting first.")
            return tab.summary_md
        decoded = tab.session.snapshot().decoded_seconds
        if decoded:
            tab.summary_at = decoded
        self._summarize(tab, tab.session)
        tab.shown_summary = tab.summary_version
        return tab.summary_md

    def ask(self, question: str, request: gr.Request) -> tuple[str, Any]:
        """Queue a question about the meeting so far: it shows at once as being answered, and its answer (citations
        link to the transcript lines) comes on a later tick, in the order asked (ui/asked.py)."""
        tab = self.tab(request)
        try:
            if not (question or "").strip():
                raise InputError("type a question first")
            if tab.session is None:
                raise InputError("start a meeting first (replay the sample, upload a recording or use the microphone)")
            with tab.lock:  # asked of the meeting shown now, not of one a forget is swapping in
                messages = tab.asked.ask(tab.session, question.strip())
        except Exception as exc:
            self._fail(tab, exc)
            return question, gr.skip()
        tab.shown_asked = tab.asked.version
        return "", messages

    def export(self, request: gr.Request) -> list[str] | None:
        """Transcript as Markdown, JSON, SRT and VTT, the summary as Markdown, and the slides (slides.md with their
        times and text, and each slide's image) as downloadable files."""
        tab = self.tab(request)
        try:
            if tab.session is None:
                raise InputError("nothing to export yet: start a meeting first")
            snapshot = tab.session.snapshot()  # its transcript and slides, read once
            transcript, slides = snapshot.transcript, snapshot.slides
            transcript = replace(transcript, source=render.meeting_title(tab.source))  # the title people read
            folder = self.export_root / tab.session.session_id
            paths = [atomic_write(folder / f"transcript.{fmt}", writer(transcript)) for fmt, writer in WRITERS.items()]
            paths.append(atomic_write(folder / "summary.md", self._summary_export(tab)))
            if slides:
                paths.append(atomic_write(folder / "slides.md", render.slides_markdown(slides)))
                paths.extend(_save_image(folder / render.slide_file(i), s.thumbnail)
                             for i, s in enumerate(slides) if s.thumbnail is not None)
        except Exception as exc:
            self._fail(tab, exc)
            return None
        tab.exported = True
        return [str(p) for p in paths]

    @staticmethod
    def _summary_export(tab: Tab) -> str:
        """The summary as exported: its action items as the panel shows them now (the summary may be a few
        seconds older than the last commitment said)."""
        if tab.summary_obj is None or tab.session is None:
            return tab.summary_md  # no summary yet, or why it failed
        return render.summary_markdown(replace(tab.summary_obj, action_items=tab.session.action_items()))

    def search(self, query: str, request: gr.Request) -> str:
        """Mark ``query`` in the tab's transcript now and in every later render (empty: no search)."""
        tab = self.tab(request)
        tab.search = " ".join((query or "").split())[:200]
        try:
            snapshot = tab.session.snapshot() if tab.session is not None else None
        except Exception:  # the next tick shows the failure; the search still holds
            log.exception("search: the session's snapshot failed")
            return gr.skip()
        if snapshot is None:
            return render.transcript_html(Transcript(turns=[]), query=tab.search)
        return render.transcript_html(snapshot.transcript, snapshot.tentative, tab.search)

    def rename(self, speaker: str, name: str, request: gr.Request) -> tuple[str, str, str]:
        """Give a speaker of the tab's meeting the name the user knows them by. Returns (speaker, name, status)."""
        tab = self.tab(request)
        try:
            if not (speaker or "").strip():
                raise InputError("type the speaker to rename (a label such as SPEAKER_01, or their name now)")
            if tab.session is None:
                raise InputError("start a meeting first")
            label = tab.session.rename_speaker(speaker, name)
        except Exception as exc:
            return speaker, name, self._fail(tab, exc)
        typed = " ".join(speaker.split())
        who = label if typed == label else f"{typed} ({label})"
        tab.notice = f"{who} is called {' '.join(name.split())} from now on"
        tab.summary_at = float("-inf")  # the summary says the new name at the next tick
        return "", "", render.status_line(tab.session.snapshot(), tab.notice)

    def forget(self, speaker: str, chat: list, request: gr.Request) -> tuple[str, str, Any]:
        """Forget one speaker of the tab's meeting, or the screen, after a confirmation (ui/forget.py). Returns
        (speaker box, status line, chat)."""
        tab = self.tab(request)
        try:
            done = forget_in_tab(tab, speaker, self.export_root, self.media_root)
        except Exception as exc:
            return speaker, self._fail(tab, exc), gr.skip()
        if not done:  # the first press: what will go is said, nothing changed
            return speaker, render.status_line(tab.session.snapshot(), tab.notice), gr.skip()
        tab.shown_asked = tab.asked.version
        return "", render.status_line(tab.session.snapshot(), tab.notice), tab.asked.messages()

    def apply_settings(self, model: str, budget_ratio: float, request: gr.Request) -> str:
        """Model and KV budget for this tab's next meeting; a model that cannot be found is refused now."""
        from app.platform.models import EMBEDDED_LLM, resolve_model

        tab = self.tab(request)
        model = (model or "").strip() or self.runtime.settings.llm.model
        try:
            resolve_model(model, self.runtime.settings.home, "LLM", EMBEDDED_LLM, "config.json")
            if not 0 < float(budget_ratio) <= 1:
                raise InputError(f"the memory allowance must be in (0, 1], got {budget_ratio}")
        except Exception as exc:
            return self._fail(tab, exc)
        tab.overrides = {"model": model, "budget_ratio": float(budget_ratio)}
        tab.notice = (f"settings saved (LLM {model}, memory allowance {float(budget_ratio):g} of the uncompressed size): "
                      "they apply to the next meeting you start")
        return render.status_line(tab.session.snapshot() if tab.session else None, tab.notice)

    @staticmethod
    def _fail(tab: Tab, exc: Exception) -> str:
        """A clear message on this tab (toast + status line); unexpected errors are logged too."""
        message = user_message(exc)
        tab.notice = f"⚠️ {message}"
        gr.Warning(message)
        return render.status_line(tab.session.snapshot() if tab.session else None, tab.notice)


def _save_image(path: Path, image: Any) -> Path:
    """An RGB array as a PNG, written whole then renamed."""
    from PIL import Image

    partial = path.with_name(f".{path.name}.partial")
    Image.fromarray(image).save(partial, format="PNG")
    os.replace(partial, path)
    return path
