"""What one browser tab of the live page is watching (its meeting, its feed, what it last showed), and the feed
its replay goes through, which a forget can point at a rebuilt session mid-meeting."""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ui import render
from ui.asked import AskedQuestions
from ui.inputs import user_message

if TYPE_CHECKING:
    from app.live.runtime import Runtime
    from app.live.session import MeetingSession

@dataclass
class Tab:
    """What one browser tab is watching."""

    history_points: int
    session: MeetingSession | None = None
    runtime: Runtime | None = None
    source: str = ""
    stop: threading.Event = field(default_factory=threading.Event)
    feeder: threading.Thread | None = None
    feed: TabFeed | None = None  # the replay's way into the current session
    history: render.KVHistory = field(init=False)
    last_version: int = -1
    notice: str | None = None
    shown_notice: str | None = None
    shown_status: str | None = None
    shown_engine: str | None = None  # the Engine tab's figures as last sent (the cost moves while nothing is said)
    summary_md: str = "_No summary yet._"  # shown: without action items, which have a panel of their own
    summary_obj: Any = None  # the MeetingSummary shown (exported with the action items as they are then)
    summary_of: int = -1  # the session version the summary was made from: a finished meeting's is kept current
    summary_version: int = 0
    shown_summary: int = -1
    summary_at: float = 0.0
    summary_busy: threading.Lock = field(default_factory=threading.Lock)
    started: float = 0.0  # time.monotonic() when the current session began (the dashboard's x axis)
    overrides: dict = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    feed_lock: threading.Lock = field(default_factory=threading.Lock)  # held by a forget while it swaps sessions
    search: str = ""  # the transcript search box's words, marked in every render
    player: str = ""  # the recording's player (ui/player.py), "" when there is none
    shown_player: str | None = None
    media: Path | None = None  # the folder holding the player's copy of the recording
    ended: bool = False  # the page went away: no input starts a meeting here again
    asked: AskedQuestions = field(default_factory=lambda: AskedQuestions(render.answer_markdown, user_message))
    shown_asked: int = -1  # the questions' version last sent to the page
    pending_forget: str | None = None  # a forget asked for once (label or SCREEN): a second press confirms it
    pending_since: float = 0.0
    exported: bool = False  # the files panel shows this meeting's exports
    exports_stale: bool = False  # ... of a meeting no longer shown (a new one began, a forget): emptied at the next tick

    def __post_init__(self) -> None:
        self.history = render.KVHistory(self.history_points)

    def reset_views(self) -> None:
        """A new meeting: nothing of the last one shown, its plots and questions included."""
        self.history = render.KVHistory(self.history_points)
        self.notice = None
        self.asked.clear()
        self.reset_after_forget()

    def reset_after_forget(self) -> None:
        """What a forget makes stale: the views are drawn again, the summary and exports go; the plots stay."""
        self.last_version = -1
        self.shown_notice = self.shown_status = self.shown_engine = None
        self.summary_md, self.summary_version, self.shown_summary, self.summary_at = "_No summary yet._", 0, -1, 0.0
        self.summary_obj, self.summary_of = None, -1
        self.exports_stale, self.exported = self.exported, False

    def drop_player(self) -> None:
        """No player, and its copy of the recording deleted (a new meeting, or a forgotten speaker's voice)."""
        if self.media is not None:
            shutil.rmtree(self.media, ignore_errors=True)
        self.media, self.player = None, ""

    def close(self) -> None:
        """The page went away: end its meeting, and take no more input."""
        with self.lock:
            self.ended = True
            self.end()

    def end(self) -> None:
        """Stop the feed and close the session (the runtime forgets it)."""
        with self.lock:
            self.stop.set()
            if self.feeder is not None:
                self.feeder.join(timeout=10)
            if self.session is not None and self.runtime is not None:
                try:
                    self.runtime.close_session(self.session.session_id)
                except KeyError:
                    pass
            self.session, self.feeder, self.feed, self.stop = None, None, None, threading.Event()


class TabFeed:
    """What a tab's replay feeds: the tab's current session, which a forget may replace mid-meeting (the feed waits
    while the meeting is rebuilt, then goes on into the rebuilt session)."""

    def __init__(self, tab: Tab) -> None:
        self.tab = tab
        self.fixed_steps = False

    def decode_in_fixed_steps(self) -> None:
        self.fixed_steps = True
        self.tab.session.decode_in_fixed_steps()

    def feed_audio(self, samples: Any, sample_rate: int, wait: bool = False) -> None:
        with self.tab.feed_lock:
            self.tab.session.feed_audio(samples, sample_rate, wait=wait)

    def feed_video(self, frame: Any, t: float | None = None, wait: bool = False) -> None:
        with self.tab.feed_lock:
            self.tab.session.feed_video(frame, t, wait=wait)

    def finish(self) -> None:
        with self.tab.feed_lock:
            session = self.tab.session
        session.finish()
