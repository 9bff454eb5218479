"""The room bot with real aiortc peers on loopback (host candidates on 127.0.0.1, no STUN).

Two rooms at once: in "standup" a peer sends a scripted stand-up's audio and a slide as video and asks a
question over the data channel; in "side" a peer streams audio and vanishes mid-stream, and a peer that
joins later finds everything already transcribed still there. The meeting is scripted (tests/scripted_parts.py:
words as tones, speakers as hums, the slide as a grey the stand-in OCR reads), so the bot, the mixer and the
sessions run for real on stand-in recogniser, diarizer and vision and the tiny Gemma 3, with no model to
provision; tests/test_bot_load.py streams a real recording through the real models.
"""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest
from scripted_parts import scripted_meeting

from app.rooms.bot_server import BotServer
from app.rooms.bot_settings import BotSettings
from app.testing.peers import FileAudioTrack, ImageTrack, RoomClient

ROOMS = {"standup": "token-standup", "side": "token-side"}
SPEED = 3.0  # the peers send faster than real time to keep the test short; the bot does not care
TAIL = 1.0  # silence after the speech
MEETING = scripted_meeting([
    ("SPEAKER_00", "Good morning. This is our weekly meeting about the new customer website. Bob, can you start?"),
    ("SPEAKER_01", "Sure, Alice. The login page is finished. The payment page needs one more week of work."),
    ("SPEAKER_00", "Thanks, Bob. Carol, how does the budget look?"),
    ("SPEAKER_02", "We have spent thirty thousand dollars so far, out of a total budget of fifty thousand dollars."),
    ("SPEAKER_00", "And what about the pilot?"),
    ("SPEAKER_02", "The pilot will cost twelve thousand dollars. It starts on Monday, March tenth."),
], slides=["Budget\nPilot cost: $12,000\nStarts Monday, March 10"])
SECONDS = MEETING.turns[-1][1]  # Alice, Bob and Carol all speak, and the pilot's price is said (and on a slide)
COMMITTED_UNTIL = SECONDS - 1.0  # "It starts on Monday, March tenth." is the last sentence
SIDE_FROM = MEETING.turns[3][0]  # the side room hears Carol's budget and what follows


def _is_caption(message: dict) -> bool:
    return message["type"] == "caption"


@pytest.fixture(scope="module")
def scenario(scripted_runtime, tmp_path_factory):
    folder = tmp_path_factory.mktemp("loopback")
    recording = MEETING.write_wav(folder / "standup.wav")
    runtime = scripted_runtime(MEETING, folder)
    runtime.warm_up()
    bot_settings = BotSettings(rooms=ROOMS, ice_hosts=["127.0.0.1"], max_message_bytes=2048, video_fps=1.0)
    server = BotServer(runtime, bot_settings, port=0).start()
    result: dict = {"server": server, "runtime": runtime}

    async def run() -> None:
        main = RoomClient(server.url, "standup", ROOMS["standup"],
                          [FileAudioTrack(recording, speed=SPEED, seconds=SECONDS, tail_seconds=TAIL),
                           ImageTrack(MEETING.slide_frame(0), fps=2)])
        side = RoomClient(server.url, "side", ROOMS["side"],
                          [FileAudioTrack(recording, speed=SPEED, start=SIDE_FROM, seconds=SECONDS - SIDE_FROM)])
        await asyncio.gather(main.join(), side.join())
        # the bot greets when its end of the data channel opens, which can come just after ours
        result["joined"] = [await main.wait_for(lambda m: m["type"] == "joined", 20)]
        # The side peer vanishes once it has captions, while the stand-up is still streaming.
        await side.wait_for(_is_caption, 90)
        result["side_captions"] = [m for m in side.messages if _is_caption(m)]
        await side.close()
        result["vanished_at"] = time.monotonic()
        result["side_counts"] = []
        for _ in range(50):
            result["side_counts"].append(server.bot.peer_counts().get("side"))
            if result["side_counts"][-1] == 0:
                break
            await asyncio.sleep(0.1)
        # The stand-up room carries on: its stream ends, then its last words are committed.
        await asyncio.sleep(SECONDS / SPEED - (time.monotonic() - result["vanished_at"]) + 1)
        await main.wait_for(lambda m: _is_caption(m) and (m["end"] or 0) > COMMITTED_UNTIL, 240)
        result["captions_after_vanish"] = sum(1 for m in main.messages if _is_caption(m))
        # Bad data-channel input gets an error, and the peer can still ask.
        main.send("x" * 5000)
        result["oversized"] = await main.wait_for(lambda m: m["type"] == "error" and "over the limit" in m["message"], 20)
        main.send("hello bot")
        result["unknown"] = await main.wait_for(lambda m: m["type"] == "error" and "unknown message" in m["message"], 20)
        main.send("ask: How much will the pilot cost?")
        result["answer"] = await main.wait_for(lambda m: m["type"] == "answer", 180)
        result["main_messages"] = list(main.messages)
        result["metrics"] = httpx.get(f"{server.url}/metrics", timeout=30).text
        # A new peer in the vanished peer's room gets the captions already committed there.
        late = RoomClient(server.url, "side", ROOMS["side"])
        await late.join()
        await late.wait_for(_is_caption, 20)
        late.send("ask: What did Carol say?")
        result["late_answer"] = await late.wait_for(lambda m: m["type"] in ("answer", "error"), 180)
        result["late_messages"] = list(late.messages)
        await late.close()
        await main.close()

    try:
        asyncio.run(run())
        yield result
    finally:
        server.stop()
        runtime.close()


def test_captions_carry_speaker_labels(scenario):
    captions = [m for m in scenario["main_messages"] if _is_caption(m)]
    assert scenario["joined"] and scenario["joined"][0]["room"] == "standup"
    assert len(captions) >= 5
    assert all(c["speaker"] and c["text"] and c["start"] is not None and c["end"] >= c["start"] for c in captions)
    assert len({c["speaker"] for c in captions}) >= 2, captions
    text = " ".join(c["text"] for c in captions).lower()
    for said in ("morning", "login page", "budget", "pilot"):
        assert said in text, (said, text)
    assert captions[-1]["end"] > COMMITTED_UNTIL


def test_lines_carry_speaker_names(scenario):
    lines = [m for m in scenario["main_messages"] if m["type"] == "line"]
    assert len(lines) >= 3, lines
    assert all(m["speaker"] and m["text"] and m["start"] is not None and m["end"] >= m["start"] for m in lines)
    assert {m["name"] for m in lines} & {"Alice", "Bob", "Carol"}, lines  # "Bob, can you start?" names Bob


def test_question_over_the_data_channel_cites_a_time(scenario):
    answer = scenario["answer"]
    assert answer["question"] == "How much will the pilot cost?"
    assert "twelve" in answer["text"].lower() or "12" in answer["text"], answer
    assert answer["citations"], answer
    cited = answer["citations"][0]
    assert cited["start"] is not None and 0 <= cited["start"] <= SECONDS
    assert re.fullmatch(r"\[\d\d:\d\d(\.\d)?\]", cited["label"]), cited["label"]


def test_slides_from_the_video_reach_the_peer(scenario):
    slides = [m for m in scenario["main_messages"] if m["type"] == "slide"]
    assert slides, "no slide event from the video track"
    text = " ".join(s["text"] for s in slides).lower()
    assert "customer website" in text or "budget" in text, text
    assert all(0 <= s["time"] <= SECONDS + 5 for s in slides)


def test_bad_messages_get_errors(scenario):
    assert "5000 bytes" in scenario["oversized"]["message"]
    assert "ask:" in scenario["unknown"]["message"]


def test_vanished_peer_leaves_its_room_and_its_words(scenario):
    assert scenario["side_counts"][-1] == 0, scenario["side_counts"]
    assert scenario["side_captions"]
    backlog = [m for m in scenario["late_messages"] if _is_caption(m)]
    said = " ".join(c["text"] for c in scenario["side_captions"])
    assert said and said in " ".join(c["text"] for c in backlog)  # nothing already transcribed was lost
    assert scenario["late_answer"]["type"] == "answer", scenario["late_answer"]
    assert scenario["captions_after_vanish"] > 0


def test_metrics_report_the_rooms(scenario):
    metrics = scenario["metrics"]
    for name in ("minutia_kv_bytes{", "minutia_kv_modality_bytes{", "minutia_asr_commit_lag_seconds{",
                 "minutia_stream_seconds{", "minutia_device_memory_bytes{", "minutia_rooms ",
                 "minutia_room_peers{room=\"standup\"}", "minutia_question_ttft_seconds_count 1.0",
                 "minutia_session_dropped_total{"):
        assert name in metrics, name
    assert re.search(r'minutia_sessions\{state="(live|finished)"\}', metrics)  # finished once the audio ended
    stream = re.search(r'minutia_stream_seconds\{session="standup"\} ([0-9.e+]+)', metrics)
    assert stream and float(stream.group(1)) >= SECONDS
