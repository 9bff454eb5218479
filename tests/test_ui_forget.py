"""The live page's "Forget a speaker" action (issue 18) on the stand-in parts and the tiny Gemma 3: a recording is
replayed into a tab, a speaker is forgotten while it plays, and the replay goes on into the rebuilt meeting."""

from __future__ import annotations

import time

import gradio as gr
from scripted_parts import scripted_meeting

SCRIPT = [
    ("SPEAKER_00", "Good morning. The pilot will cost twelve thousand dollars."),
    ("SPEAKER_01", "Fine. Maria will send the contract on Friday."),
    ("SPEAKER_00", "Thanks. The website launch is on Monday and the budget is fifty thousand dollars."),
]


def _until(check, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_speaker_is_forgotten_from_the_page_while_the_replay_goes_on(scripted_runtime, tmp_path):
    from ui.app import LivePage
    from ui.settings import UISettings

    meeting = scripted_meeting(SCRIPT)
    runtime = scripted_runtime(meeting, tmp_path)
    page = LivePage(runtime, UISettings(export_dir=tmp_path / "exports"))
    tab_request = gr.Request(session_hash="tab")
    try:
        wav = meeting.write_wav(tmp_path / "meeting.wav")
        page.start_replay(None, str(wav), 1.0, tab_request)
        tab = page.tab(tab_request)
        _until(lambda: tab.player != "", 30)  # the recording's player: a copy in the page's media folder
        media = tab.media
        assert (media / "recording.wav").read_bytes() == wav.read_bytes() and media.parent == page.media_root
        assert f"gradio_api/file={media.resolve()}/recording.wav" in tab.player
        assert page.refresh(tab_request)[-1] == tab.player and page.refresh(tab_request)[-1] == gr.skip()  # sent once
        assert page.forget("  ", [], tab_request)[1].endswith("type the name or label (e.g. SPEAKER_01) of the speaker to forget, or 'screen'")
        _until(lambda: "friday" in " ".join(w.text for w in tab.session.transcript().words).lower())
        page.export(tab_request)
        exported = tmp_path / "exports" / tab.session.session_id
        assert any(exported.iterdir())
        old = tab.session
        assert page.rename("SPEAKER_00", "Alice", tab_request)[2].endswith("SPEAKER_00 is called Alice from now on")
        assert "already names another speaker" in page.rename("SPEAKER_01", "Alice", tab_request)[2]
        # typed by the name it goes by now: the notice says which label that is
        assert page.rename(" Alice ", "Alicia", tab_request)[2].endswith("Alice (SPEAKER_00) is called Alicia from now on")
        page.rename("Alicia", "Alice", tab_request)

        chat = [{"role": "user", "content": "Who sends the contract?"}, {"role": "assistant", "content": "Maria."}]
        assert "no speaker 'Zed'" in page.forget("Zed", chat, tab_request)[1]
        box, status, chat_after = page.forget("SPEAKER_01", chat, tab_request)
        assert (box, chat_after) == ("", []) and "forgot SPEAKER_01" in status, status
        assert tab.session is not old and not exported.exists()  # files that quoted the speaker are gone
        assert tab.player == "" and not media.exists()  # so is the recording, which holds their voice

        _until(lambda: tab.session.state == "finished")  # the replay went on into the rebuilt meeting
        said = " ".join(w.text for w in tab.session.transcript().words).lower()
        assert "contract" not in said and "pilot" in said and "website" in said, said
        assert tab.session.speakers().get("SPEAKER_00") == "Alice"  # the user's name stays after the forget
        assert "contract" not in tab.session.ask("Who will send the contract?").text.lower()
    finally:
        page.close()
        runtime.close()


def test_a_microphone_chunk_from_a_closed_page_opens_no_meeting(scripted_runtime, tmp_path):
    """Chunks still in flight when the page goes away (gradio delivers them after the unload) are dropped:
    they used to open a new live meeting that nobody could see or end."""
    import numpy as np

    from ui.app import LivePage
    from ui.settings import UISettings

    runtime = scripted_runtime(scripted_meeting(SCRIPT), tmp_path)
    page = LivePage(runtime, UISettings(export_dir=tmp_path / "exports"))
    request = gr.Request(session_hash="tab")
    chunk = (16000, np.zeros(1600, dtype=np.int16))
    try:
        page.feed_microphone(chunk, request)
        assert [s.source for s in runtime.sessions()] == ["live"]
        tab = page.tab(request)
        page.close_tab(request)
        assert runtime.sessions() == []
        page.feed_microphone(chunk, request)
        page.feed_webcam(np.zeros((8, 8, 3), dtype=np.uint8), request)
        assert runtime.sessions() == [] and "tab" not in page.tabs
        assert tab.ended  # a chunk that got the tab just before the page closed feeds nothing into it
    finally:
        page.close()
        runtime.close()
