"""The page's "Forget a speaker" (issues 18 and 49): the first press says what will go and changes nothing; a second
press within FORGET_CONFIRM_S rebuilds the meeting without what they said or showed so far (transcript, slides, the
model's memory, app/live/forget.py). On the page the questions that name them, the summary and the exported files go;
a question whose answer quoted them is asked again of the rebuilt meeting (nothing asked is lost); the player keeps
the recording with a forgotten speaker's voice muted. The slides, the plots and the others' answers stay.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from app.live.forget import FORGET_CONFIRM_S
from app.text.textnorm import counted
from app.text.transcript import SLIDE_SPEAKER
from encoders.errors import InputError
from ui.player import muted_copy, player_html
from ui.tab import Tab

if TYPE_CHECKING:
    from app.live.session import MeetingSession

log = logging.getLogger(__name__)

def forget_warning(session: MeetingSession, label: str) -> str:
    """What a forget will remove, said before it is done."""
    from app.live.lineage import SCREEN

    snapshot = session.snapshot()
    if label == SCREEN:
        return (f"forget the screen? This removes the {counted(len(snapshot.slides), 'slide')} read so far from the "
                "page and the model's memory, the summary and exported files; a question whose answer quoted them "
                "is answered again without them. The transcript and the others' answers stay. Press Forget again "
                "to confirm.")
    name = session.speakers().get(label)
    who = name or label  # the name people know them by; the label only for one with no name
    lines = sum(1 for turn in snapshot.transcript.turns if turn.speaker in {label, name})
    kept = "the recording" if snapshot.state == "finished" else "the recording up to now"
    return (f"forget {who}? This removes what they said ({counted(lines, 'line')}) from the transcript and the model's "
            "memory, the summary and exported files, and mutes their voice in the player, which keeps "
            f"{kept}. A question that names them goes; one whose answer quoted them is answered again without them. "
            "The slides and the others' answers stay. Press Forget again to confirm.")


def forget_in_tab(tab: Tab, speaker: str, export_root: Path, media_root: Path) -> bool:
    """Forget ``speaker`` (a name, a label or "screen") from the tab's meeting, live or finished; True once done,
    False when this press only asked for the confirmation. Either way ``tab.notice`` says what happened."""
    import gradio as gr

    from app.live.forget import forget_in_live_meeting
    from app.live.lineage import SCREEN, is_screen

    if not (speaker or "").strip():
        raise InputError("type the name or label (e.g. SPEAKER_01) of the speaker to forget, or 'screen'")
    with tab.lock, tab.feed_lock:  # the replay and the microphone wait while the meeting is rebuilt
        old = tab.session
        if old is None or tab.runtime is None:
            raise InputError("start a meeting first")
        label = SCREEN if is_screen(speaker) else old.speaker_label(" ".join(speaker.split()))
        if tab.pending_forget != label or time.monotonic() - tab.pending_since > FORGET_CONFIRM_S:
            tab.pending_forget, tab.pending_since = label, time.monotonic()
            tab.notice = forget_warning(old, label)
            gr.Warning(tab.notice)  # also beside the page, where it is seen: the status line is far above
            return False
        tab.pending_forget = None
        name = old.speakers().get(label) if label != SCREEN else None
        # said at the next tick while the meeting is rebuilt (a few seconds), not the question just answered
        tab.notice = f"forgetting {'the screen' if label == SCREEN else name or label}: rebuilding the meeting without them…"
        heard = old.snapshot()
        spans = [(w.start, w.end) for w in heard.transcript.words if w.speaker in {label, name}]
        was_finished = old.state == "finished"
        session, report = forget_in_live_meeting(tab.runtime, old, label)
        if tab.feed is not None and tab.feed.fixed_steps:
            session.decode_in_fixed_steps()
        tab.session = session
        if was_finished:  # a replay or microphone that ended finishes the rebuilt meeting too
            session.finish()
        shutil.rmtree(export_root / session.session_id, ignore_errors=True)
        tab.reset_after_forget()
        quoted = {label, name} - {None} if label != SCREEN else {SLIDE_SPEAKER, SCREEN}
        removed, again = tab.asked.renew_about(quoted, session)
        muted = mute_player(tab, media_root, spans, heard.stream_seconds) if label != SCREEN else tab.media is not None
    player = (f"the player keeps the recording{'' if was_finished else ' up to now'} with their voice muted" if muted
              else "the recording's player was removed") if label != SCREEN else "the player is unchanged"
    asked = [f"{counted(again, 'question')} whose answer quoted them {'is' if again == 1 else 'are'} answered again "
             "without them"] if again else []
    asked += [f"{counted(removed, 'question')} that named them {'was' if removed == 1 else 'were'} removed"] if removed else []
    tab.notice = (f"forgot {report.name or report.forgotten}: {report.removed()} removed from the transcript and the "
                  f"model's memory; {'; '.join([*asked, 'the exported files were removed'])}, the summary is made "
                  f"again without them; {player}")
    return True


def mute_player(tab: Tab, media_root: Path, spans: list[tuple[float, float]], until: float) -> bool:
    """The player's recording, the forgotten speaker's voice muted and nothing after ``until``; on any failure no
    player at all (their voice must not stay). Returns whether a player is left."""
    if tab.media is None:
        return False
    recording = next(iter(sorted(tab.media.glob("recording.*"))), None)
    folder = media_root / uuid.uuid4().hex
    try:
        html_ = player_html(muted_copy(recording, folder, spans, until))
    except Exception:
        log.exception("the player could not be muted: it is removed")
        shutil.rmtree(folder, ignore_errors=True)
        tab.drop_player()
        return False
    tab.drop_player()
    tab.media, tab.player = folder, html_
    return True
