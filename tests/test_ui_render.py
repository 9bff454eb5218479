"""The page's rendering helpers and input checks, without a browser or models."""

from __future__ import annotations

import re

import numpy as np
import pytest

from app.answering.actions import ActionItem
from app.llm.assistant import Answer, Citation, MeetingSummary
from app.live.session import Slide
from app.text.transcript import Transcript, Turn
from encoders.errors import InputError
from ui import render
from ui.inputs import check_upload
from ui.server import check_port, is_loopback, serve
from ui.settings import bundled_samples


def _transcript() -> Transcript:
    return Transcript(turns=[
        Turn("Alice", "Good morning <everyone>.", 0.5, 3.0),
        Turn("Bob", "The login page is finished.", 3.5, 6.0),
        Turn("Alice", "Thanks, Bob.", 62.0, 63.0),
        Turn("Carol", "We spent thirty thousand dollars.", 64.0, 68.0),
    ])


def test_transcript_html_lines_anchor_colour_escape_and_tentative():
    html = render.transcript_html(_transcript(), tentative="and the pilot")
    assert html.count('class="mt-line"') == 4
    for start in (50, 350, 6200, 6400):  # anchors are start times in centiseconds
        assert f'id="mt-t-{start}"' in html
    assert "&lt;everyone&gt;" in html and "<everyone>" not in html  # text is escaped
    assert "01:02" in html  # mm:ss stamps
    colours = render.speaker_colours(["Alice", "Bob", "Carol"])
    assert len(set(colours.values())) == 3
    assert html.count(f'color:{colours["Alice"]}') == 2  # the same speaker keeps the same colour
    box, jump = html.rsplit("</div>", 1)
    assert box.endswith('<div class="mt-line mt-tentative"><span class="mt-text">and the pilot</span></div>')
    assert jump == '<button type="button" class="mt-jump" hidden>↓ Jump to live</button>'  # shown by the page script


def test_search_marks_every_occurrence_and_links_the_matching_lines():
    html = render.transcript_html(_transcript(), query="  BOB ")
    head, box = html.split('<div class="mt-transcript">', 1)
    assert head == ('<div class="mt-search-hits">2 lines match “BOB”: <a href="#mt-t-350">00:03 Bob</a> · '
                    '<a href="#mt-t-6200">01:02 Alice</a></div>')  # a speaker's name or the words
    assert box.count("<mark>") == 2 and "<mark>Bob</mark>" in box
    assert box.count('class="mt-line mt-hit"') == 2
    assert "Thanks, <mark>Bob</mark>." in box
    # markup in the query or the text stays text; matches are found on the words, not on their escaping
    tricky = render.transcript_html(_transcript(), query="<every")
    assert "<mark>&lt;every</mark>one&gt;" in tricky and "1 line matches “&lt;every”" in tricky
    assert "<mark>" not in render.transcript_html(_transcript(), query="lt")
    nothing = render.transcript_html(_transcript(), query="budget")
    assert nothing.startswith('<div class="mt-search-hits">No line matches “budget”.</div>') and "<mark>" not in nothing
    assert render.transcript_html(_transcript(), query="   ") == render.transcript_html(_transcript())


def test_colours_are_stable_as_the_meeting_grows():
    before = render.speaker_colours(["Alice", "Bob"])
    after = render.speaker_colours(["Alice", "Bob", "Carol", "Alice"])
    assert {k: after[k] for k in before} == before


def test_empty_transcript_says_how_to_start():
    html = render.transcript_html(Transcript(turns=[]))
    assert "mt-empty" in html and "mt-tentative" not in html


def test_answer_links_jump_to_the_cited_line():
    transcript = _transcript()
    answer = Answer("how much?", "Thirty thousand dollars.", [Citation(3, "Carol", 64.0, "We spent ...")], 1, 0.9)
    md = render.answer_markdown(answer)
    assert md == "Thirty thousand dollars.\n\nSources: [01:04 Carol](#mt-t-6400)"
    assert 'id="mt-t-6400"' in render.transcript_html(transcript)  # the link's target exists
    untimed = render.answer_markdown(Answer("q", "Yes.", [Citation(1, "Bob", None, "...")], 1, 0.5))
    assert "(#mt-turn-1)" in untimed
    assert render.answer_markdown(Answer("q", "", [], 1, 0.0)) == "(no answer)"
    checked = Citation(2, "Bob", 40.0, "so we can test real payments", check='the slide at 00:37 says "Contract not signed"')
    md = render.answer_markdown(Answer("why?", "They can test real payments.", [checked], 1, 0.5))
    assert md.endswith('_Check the line at 00:40 in the recording: the slide at 00:37 says "Contract not signed"; '
                       'a "not" may have been missed._')


def test_summary_and_actions_markdown():
    item = ActionItem("Bob", "finish the payment page", "next Friday", 1, 3.5)
    summary = MeetingSummary("The team reviewed the website.", action_items=[item])
    md = render.summary_markdown(summary)
    assert md.startswith("# Meeting summary") and "## Action items" in md
    assert "| Bob | finish the payment page | next Friday | 00:03 |" in md
    assert "The team reviewed the website." in md
    assert "Action items" not in render.summary_markdown(summary, action_items=False)  # the page lists them once
    assert render.action_items_markdown([]) == "_No action items yet._"


def test_kv_history_frames_with_budget_line():
    history = render.KVHistory(max_points=3)
    kv = {"bytes_by_tier": {"L1": 2 * render.MB, "L2": render.MB, "sliding": 5 * render.MB, "cold_disk": render.MB,
                            "cold_redis": 0},
          "bytes_by_modality": {"audio": 3 * render.MB, "video": 0, "text": 0}, "tiered_kv_bytes": 3 * render.MB,
          "budget_bytes": 4 * render.MB, "compression_ratio": 2.5, "prefetch_hit_rate": 0.75, "mode": "fallback",
          "tokens": 900}
    assert history.time_range() == [0.0, 1.0]  # nothing yet: a unit axis
    assert history.bytes_frame("bytes_by_tier").empty and history.ratio_frame().empty
    assert history.add(1.0, kv)
    assert not history.add(1.0, kv)  # an unchanged tick adds nothing
    for t in (2.0, 3.0, 4.0):
        history.add(t, {**kv, "tokens": int(t)})
    assert [p.seconds for p in history.points] == [2.0, 3.0, 4.0]  # bounded
    assert history.time_range() == [2.0, 4.0]  # the oldest point kept to now (the history is full), no further
    short = render.KVHistory(max_points=9)
    short.add(4.0, kv)
    assert short.time_range() == [0.0, 4.0]  # the meeting's start to now
    tiers = history.bytes_frame("bytes_by_tier")
    assert set(tiers["series"]) == {"exact", "compressed", "recent words only (outside the allowance)", "slower: disk",
                                    "allowance", "counted against it"}  # slower: redis never held a block: not plotted
    assert tiers[tiers.series == "allowance"]["MB"].tolist() == [4.0, 4.0, 4.0]
    assert tiers[tiers.series == render.BUDGETED_SERIES]["MB"].tolist() == [3.0, 3.0, 3.0]
    streams = history.bytes_frame("bytes_by_modality")
    assert set(streams["series"]) == {"speech", "slides", "instructions", "allowance"}  # slides plotted before any is read
    assert history.ratio_frame()["ratio"].tolist() == [2.5, 2.5, 2.5]
    stats = render.kv_stats_markdown({**kv, "full_precision_bytes": 7.5 * render.MB}, commit_lag=1.25)
    assert "**only the fast ones**" in stats and "75%" in stats and "1.2 s" in stats
    # what the budget counts (the meeting's blocks) is told apart from what it does not (the sliding window)
    assert "memory used: 8.00 MB of this machine's fast memory; the meeting's share 3.00 MB of its 4.00 MB allowance" in stats
    assert "5.00 MB in the layers that read only the latest words (part of the model, outside the allowance)" in stats
    assert "the meeting is kept 2.5x smaller than uncompressed (7.50 MB)" in stats
    assert "slower storage (disk or Redis), read back when a question needs it: 1.00 MB" in stats
    assert "- read ahead in time" in stats and stats.count("\n- ") == 6
    # a person's words on the page: no engineers' terms outside the optional sampled checks
    assert not re.search(r"\b(KV|tier|prefetch|tokens?|MiB|budget)\b", stats, re.IGNORECASE), stats
    early = render.kv_stats_markdown({**kv, "compression_ratio": 0.5, "prefetch_hit_rate": None})
    assert "not compressed yet (2.0x the uncompressed size" in early and "n/a (nothing read back from slower storage" in early
    fits = {**kv, "compression_ratio": 1.02, "bytes_by_tier": {"L1": 3 * render.MB}}
    assert "not compressed: the meeting still fits its allowance" in render.kv_stats_markdown(fits)
    assert "about the uncompressed size (1.02x smaller)" in render.kv_stats_markdown({**kv, "compression_ratio": 1.02})
    assert "allowance" not in render.kv_stats_markdown({**fits, "budget_bytes": 0})  # a plain cache has none
    assert "empty" in render.kv_stats_markdown({})
    assert "drift" not in stats  # no sparse read: no drift line
    sparse = render.kv_stats_markdown({**kv, "quality_drift_js": 0.0123, "shadow_top1_agreement": 0.9, "drift_samples": 40})
    assert "sparse-read drift from a dense read: JS 0.012, same next word 90% (40 sampled steps)" in sparse
    assert "word for word" not in sparse
    shadowed = render.kv_stats_markdown({**kv, "shadow_answer_agreement": 0.75, "shadow_questions": 4})
    assert "sampled answers a dense read gives word for word: 75% (4 compared)" in shadowed
    assert "device memory" not in stats and "decode read" not in stats  # no cap, no bandit
    exact = render.kv_stats_markdown({**kv, "shadow_exact_agreement": 0.5, "shadow_exact_js": 0.031})
    assert "sampled answers the uncompressed meeting gives word for word: 50% (JS 0.031)" in exact
    held = render.kv_stats_markdown({**kv, "controller_pressure": 0.846, "controller_setpoint": 0.85,
                                     "controller_share": 0.861, "controller_decode_top_k": 0})
    assert "device memory: 85% of the cap (held at 85%; the budget follows 86% of the cap)" in held
    assert "decode read chosen for the last answer: every block" in held
    assert "8 blocks per head" in render.kv_stats_markdown({**kv, "controller_decode_top_k": 8})


def test_slides_become_captioned_thumbnails():
    thumb = np.zeros((9, 16, 3), np.uint8)
    items = render.slide_items([Slide(75.0, "Q3  roadmap\nbudget", thumb), Slide(80.0, "no picture", None)])
    assert len(items) == 1 and items[0][1] == "01:15  Q3 roadmap budget"


def test_upload_checks(tmp_path):
    notes = tmp_path / "notes.ogg"
    notes.write_text("not audio at all")
    with pytest.raises(InputError, match="not an audio or video recording"):
        check_upload(notes, max_mb=10)
    sample = bundled_samples()["standup"]
    assert check_upload(sample, max_mb=10) == sample
    with pytest.raises(InputError, match="limit is 0.01 MB"):
        check_upload(sample, max_mb=0.01)


def test_serving_beyond_loopback_needs_a_flag_and_a_password():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0")
    with pytest.raises(InputError, match="--allow-remote"):
        serve(runtime=None, host="0.0.0.0", block=False)
    with pytest.raises(InputError, match="password"):
        serve(runtime=None, host="0.0.0.0", allow_remote=True, auth=None, block=False)


def test_a_port_in_use_is_a_one_line_error_before_any_model_loads(tmp_path):
    """minutia-ui on a port another program serves ended in a Gradio traceback after the models loaded (issue 49)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InputError, match=f"cannot serve on 127.0.0.1:{port}.*--port"):
            check_port("127.0.0.1", port)
        run = subprocess.run([sys.executable, "-m", "ui", "--port", str(port)], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "MINUTIA_HOME": str(tmp_path)})
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().startswith("error: cannot serve on") and "--port" in run.stderr
    with pytest.raises(InputError, match="not a TCP port"):
        check_port("127.0.0.1", 70000)
    check_port("127.0.0.1", port)  # free again once the other program is gone


@pytest.mark.filterwarnings("ignore:.*:UserWarning")  # gr.Warning outside a request warns instead
def test_page_actions_per_tab_without_a_meeting(tmp_path, tiny_llm_dir):
    """Settings are per tab and checked when applied; actions with nothing to act on give a message."""
    import gradio as gr

    from app.platform.config import load_settings
    from app.live.runtime import Runtime  # loads no model until a session needs one
    from ui.app import LivePage
    from ui.settings import UISettings

    runtime = Runtime(load_settings())
    page = LivePage(runtime, UISettings(export_dir=tmp_path))
    a, b = gr.Request(session_hash="tab-a"), gr.Request(session_hash="tab-b")
    assert "apply to the next meeting" in page.apply_settings(str(tiny_llm_dir), 0.5, a)
    assert page.tab(a).overrides == {"model": str(tiny_llm_dir), "budget_ratio": 0.5}
    assert page.tab(b).overrides == {}
    own = page.runtime_for(page.tab(a).overrides)
    assert own is not runtime and own.settings.kv.budget_ratio == 0.5 and own.settings.llm.model == str(tiny_llm_dir)
    assert runtime.settings.llm.model != str(tiny_llm_dir)  # the shared runtime is untouched
    assert page.runtime_for(page.tab(a).overrides) is own and page.runtime_for({}) is runtime

    page.apply_settings(str(tmp_path / "no-such-model"), 0.5, b)
    assert "no-such-model" in page.tab(b).notice and page.tab(b).overrides == {}
    assert page.export(b) is None and "start a meeting first" in page.tab(b).notice
    assert page.ask("   ", b) == ("   ", gr.skip()) and "type a question first" in page.tab(b).notice
    assert page.start_replay(None, None, 4.0, b)[0].endswith("choose a sample meeting or upload a recording")
    first, *rest = page.refresh(a)  # the timer shows a new notice once, then has nothing to update
    assert "settings saved" in first and all(value == gr.skip() for value in rest)
    assert all(value == gr.skip() for value in page.refresh(a))
    assert page.refresh_summary(b) == "_No summary yet._"

    page.close_tab(a)
    assert set(page.tabs) == {"tab-b"}
    page.close()
    assert page.tabs == {}


def test_the_player_copies_what_the_browser_plays_and_decodes_the_rest(tmp_path):
    import soundfile

    from ui.player import playable_copy, player_html

    tone = (0.2 * np.sin(np.arange(16000 * 2) * 2 * np.pi * 440 / 16000)).astype(np.float32)
    wav = tmp_path / "meeting.wav"
    soundfile.write(wav, tone, 16000)
    copied = playable_copy(wav, tmp_path / "a")
    assert copied.name == "recording.wav" and copied.read_bytes() == wav.read_bytes()
    mov = tmp_path / "meeting.mov"  # a container Debian's Chromium may not play: its audio becomes Ogg Vorbis
    mov.write_bytes(wav.read_bytes())
    encoded = playable_copy(mov, tmp_path / "b")
    audio, rate = soundfile.read(encoded)
    assert encoded.name == "recording.ogg" and rate == 16000 and abs(len(audio) - len(tone)) < 1600
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["recording.ogg"]  # no partial file left
    html = player_html(encoded)
    assert html.startswith('<audio class="mt-audio" controls preload="metadata" src="gradio_api/file=/') and "recording.ogg" in html
    assert player_html(None) == ""


def test_slides_are_exported_with_their_time_image_and_text():
    slides = [Slide(12.5, "Budget\n  Pilot: $12,000 ", np.zeros((4, 6, 3), np.uint8)), Slide(75.0, "", None)]
    md = render.slides_markdown(slides)
    assert md == ("# Slides\n\n## 00:12 · slide 1\n\n![slide 1](slide-01.png)\n\nBudget\nPilot: $12,000\n\n"
                  "## 01:15 · slide 2\n\n_(no text read)_\n")
    assert "No slides" in render.slides_markdown([])


def _snapshot(state: str, heard: float, decoded: float):
    from app.live.session import SessionSnapshot

    return SessionSnapshot(session_id="s", state=state, stream_seconds=heard, transcript=_transcript(), tentative="",
                           slides=[], kv={}, commit_lag=None, error=None, version=1, decoded_seconds=decoded)


def test_the_status_line_says_how_far_behind_the_transcript_is():
    """Issue 23: "01:45 received" while the transcript showed 00:17 read as live; the line now says both."""
    behind = render.status_line(_snapshot("live", 105.0, 17.0))
    assert "heard up to 01:45" in behind and "transcribed up to 00:17" in behind and "behind by 88 s" in behind
    keeping_up = render.status_line(_snapshot("live", 105.0, 104.0))
    assert "transcribed up to 01:44" in keeping_up and "behind" not in keeping_up  # one decode step is not behind
    done = render.status_line(_snapshot("finished", 106.0, 106.0), None)
    assert done.startswith("**finished** · 01:46 of meeting · 3 people spoke 4 times") and "heard" not in done
    from dataclasses import replace

    from app.text.transcript import Transcript

    started = render.status_line(replace(_snapshot("live", 2.0, 0.0), transcript=Transcript([])))
    assert "nothing said yet" in started and "0 people" not in started  # the helper's new-user try, issue 49
    # a grey line on the page is not "nothing said" (the helper's try, session 45)
    hearing = render.status_line(replace(_snapshot("live", 9.0, 4.0), transcript=Transcript([]), tentative="This is"))
    assert "first words coming in" in hearing and "nothing said yet" not in hearing
    assert render.meeting_title("replay:standup.ogg-without-SPEAKER_03") == "standup.ogg"
    assert render.meeting_title("live") == "Live meeting"


def test_low_confidence_words_are_noted_where_the_answer_rests_on_them():
    """The helper's new-user try (session 45): "Monday, March 10th" came with 'Heard with low confidence: "12"', a
    word of the cost in the same line. A value answer notes only the doubtful words it says; a yes or no reads the
    whole line, so it notes them all."""
    line = Citation(3, "Carol", 24.0, "It costs 12,000 dollars and starts on Monday, March 10th.", ("12",))
    assert "low confidence" not in render.answer_markdown(Answer("When?", "Monday, March 10th.", [line], 1, 0.5, "when"))
    assert '"12"' in render.answer_markdown(Answer("How much?", "12,000 dollars.", [line], 1, 0.5, "how_much"))
    assert '"12"' in render.answer_markdown(Answer("Is it 12,000?", "Yes.", [line], 1, 0.5, "yes_no"))


def test_user_messages_hold_no_paths_errnos_or_exception_names(tmp_path):
    from ui.inputs import user_message

    assert user_message(InputError("the question is empty")) == "the question is empty"
    said = user_message(OSError(2, "No such file or directory", "/tmp/gradio/abc/upload.mp3"))
    for leak in ("/tmp", "Errno", "OSError", "upload.mp3"):
        assert leak not in said
    noise = tmp_path / "noise.mp3"
    noise.write_bytes(bytes(range(256)) * 40)  # random-looking bytes named like a recording
    with pytest.raises(InputError) as refused:
        check_upload(noise, max_mb=10)
    assert str(refused.value) == "noise.mp3 is not an audio or video recording this page can read"


def test_words_heard_with_low_confidence_are_marked():
    """Issue 49: "we can test real payments" where the speaker said "cannot": the doubtful word is shown as such."""
    from app.text.transcript import TranscriptWord

    words = [TranscriptWord("We", 0.0, 0.2, "Bob", 0.92), TranscriptWord("can", 0.2, 0.4, "Bob", 0.31),
             TranscriptWord("test.", 0.4, 0.6, "Bob", 0.97)]
    shown = render.transcript_html(Transcript([Turn("Bob", "We can test.", 0.0, 0.6, words)]))
    assert 'We <span class="mt-unsure" title="heard with low confidence">can</span> test.' in shown
    assert "mt-unsure" not in render.transcript_html(Transcript([Turn("Bob", "We can test.", 0.0, 0.6)]))


def test_the_rolling_summary_waits_for_the_transcript_not_the_audio():
    """The helper's new-user try (session 45): a 4x replay is heard 90 s ahead of what is transcribed, and a summary
    made when 90 s were heard held one line for the rest of the replay. It is due per seconds transcribed."""
    import threading
    import types
    from dataclasses import replace

    from ui.app import LivePage
    from ui.settings import UISettings
    from ui.tab import Tab

    made, started = [], threading.Event()

    def summarize(tab, session, version):
        made.append(version)
        started.set()

    page = types.SimpleNamespace(ui=UISettings(summary_every_s=30.0), _summarize=summarize)
    tab = Tab(history_points=10)
    ahead = replace(_snapshot("live", 95.0, 4.0), version=3)
    LivePage._maybe_summarize(page, tab, ahead)  # 95 s heard, 4 s transcribed: not due
    LivePage._maybe_summarize(page, tab, replace(ahead, decoded_seconds=35.0, version=7))
    assert started.wait(5.0)
    assert made == [7] and tab.summary_at == 35.0
