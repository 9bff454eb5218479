"""The page never shows stale state (issue 49): a finished meeting's summary is made again when what it was made
from changes (a rename), an export's action items are the panel's, a new meeting clears the last one's exports,
and a recording that breaks off mid-way is said in plain words. On the stand-in parts (tests/scripted_parts.py)."""

from __future__ import annotations

import shutil
import time

import gradio as gr
import pytest

from tests.scripted_parts import scripted_meeting

pytestmark = pytest.mark.filterwarnings("ignore:.*:UserWarning")  # gr.Warning outside a request warns instead


@pytest.fixture
def page(scripted_runtime, tmp_path):
    from ui.app import LivePage
    from ui.settings import UISettings

    meeting = scripted_meeting([
        ("SPEAKER_00", "Good morning. The pilot will cost twelve thousand dollars."),
        ("SPEAKER_01", "Fine. Maria will send the contract on Friday."),
    ])
    runtime = scripted_runtime(meeting, tmp_path / "home")
    live = LivePage(runtime, UISettings(export_dir=tmp_path / "exports", summary_every_s=600.0))
    yield live, meeting.write_wav(tmp_path / "meeting.wav"), gr.Request(session_hash="tab")
    live.close()
    runtime.close()


def _until(check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _finished(live, wav, request):
    live.start_replay(None, str(wav), 0.0, request)
    tab = live.tab(request)
    _until(lambda: tab.session is not None and tab.session.state == "finished")
    return tab


def test_a_finished_meetings_summary_follows_a_rename(page):
    live, wav, request = page
    tab = _finished(live, wav, request)
    live.refresh(request)  # the tick that sees the meeting finished
    _until(lambda: tab.summary_obj is not None and tab.summary_of == tab.session.snapshot().version)
    made = tab.summary_version
    live.rename("SPEAKER_01", "Dana", request)
    live.refresh(request)
    _until(lambda: tab.summary_version > made and tab.summary_of == tab.session.snapshot().version)


def test_an_export_has_the_panels_action_items_and_a_new_meeting_clears_the_exports(page):
    live, wav, request = page
    tab = _finished(live, wav, request)
    tab.summary_obj = tab.session.summary()
    tab.summary_obj.action_items.clear()  # a summary made before the commitment was said
    files = live.export(request)
    summary = next(f for f in files if f.endswith("summary.md"))
    assert "Maria" in open(summary).read()  # the panel's action item, not the older summary's "none"
    assert live.refresh(request)[-1] is not None  # (the tick's other outputs)
    live.start_replay(None, str(wav), 0.0, request)
    outputs = live.refresh(request)
    assert outputs[11] is None  # the files panel is emptied for the new meeting


def test_a_recording_that_breaks_off_is_said_in_plain_words(page, tmp_path):
    import os
    import subprocess

    live, wav, request = page
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is needed to make an mp3")
    mp3 = tmp_path / "half.mp3"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(wav), "-c:a", "libmp3lame", str(mp3)], check=True)
    data = bytearray(mp3.read_bytes())
    data[len(data) // 3:] = os.urandom(len(data) - len(data) // 3)
    mp3.write_bytes(bytes(data))
    live.start_replay(None, str(mp3), 0.0, request)
    tab = live.tab(request)
    _until(lambda: tab.notice is not None and "could not be read" in tab.notice)
    assert "Errno" not in tab.notice and str(tmp_path) not in tab.notice and "avcodec" not in tab.notice
