"""The room bot with its meetings on Ray (issue 20 item 2: "the signaling server routes a room to its actor").

A real aiortc peer plays a scripted meeting (tests/scripted_parts.py) into a bot whose rooms are Ray actors on a
local Ray runtime (`minutia bot --ray-address local`): the meeting runs in the actor's process, not the bot's; the
captions, lines and the end of the stream reach the peer through the host's event log; a question, a rename and a
forget go to the actor and come back; a named participant is refused with a reason (their microphone cannot label
words in another process); /metrics reports the remote session.
"""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest
from scripted_parts import scripted_meeting

from app.bot import BotServer, BotSettings
from app.testing.peers import FileAudioTrack, RoomClient

ROOMS = {"cluster": "token-cluster"}
ALICE, BOB, CAROL = "SPEAKER_00", "SPEAKER_01", "SPEAKER_02"
SCRIPT = [
    (ALICE, "Good morning. This is our weekly meeting about the new customer website. Bob, can you start?"),
    (BOB, "Sure, Alice. The login page is finished. The payment page needs one more week of work."),
    (CAROL, "The pilot will cost twelve thousand dollars."),
]
MEETING = scripted_meeting(SCRIPT)


def _finished(message: dict) -> bool:
    return message["type"] == "state" and message["value"] == "finished"


@pytest.mark.slow  # ~40 s: a local Ray runtime and one actor start with the tiny Gemma 3
def test_rooms_run_as_ray_actors_behind_the_bot(tmp_path, tiny_llm_dir):
    ray = pytest.importorskip("ray")
    import ray.cloudpickle

    import room_parts
    import scripted_parts
    from app.bot_meetings import ClusterMeetings
    from app.config import load_settings
    from app.room_fleet import FleetOptions, RoomFleet
    from kvstore.crypto import MasterKey

    for module in (room_parts, scripted_parts):
        ray.cloudpickle.register_pickle_by_value(module)
    MasterKey.generate(tmp_path / "master.key")
    settings = load_settings(overrides={
        "home": str(tmp_path / "home"), "llm": {"model": str(tiny_llm_dir), "max_new_tokens": 16},
        "store": {"path": str(tmp_path / "sessions"), "key_file": str(tmp_path / "master.key"), "autosave_seconds": 1}})
    recording = MEETING.write_wav(tmp_path / "meeting.wav")
    options = FleetOptions(cpus_per_room=1)
    fleet = RoomFleet(settings, options, make_runtime=room_parts.ScriptedRoomRuntime(
        MEETING.vocabulary, MEETING.speakers, tiny_llm_dir))
    meetings = ClusterMeetings(settings, options, fleet=fleet)
    bot_settings = BotSettings(rooms=ROOMS, ice_hosts=["127.0.0.1"], autosave=True)
    try:
        with BotServer(None, bot_settings, port=0, meetings=meetings) as server:
            async def run() -> dict:
                named = RoomClient(server.url, "cluster", ROOMS["cluster"], name="Dana")
                try:
                    await named.join()
                    refused = None
                except httpx.HTTPStatusError as exc:
                    refused = (exc.response.status_code, exc.response.json()["detail"])
                await named.close()
                start, end = MEETING.turns[0][0], MEETING.turns[-1][1]
                peer = RoomClient(server.url, "cluster", ROOMS["cluster"], [FileAudioTrack(
                    recording, speed=3.0, start=start, seconds=end - start, tail_seconds=0.3)])
                await peer.join()
                await peer.wait_for(_finished, 180)
                metrics = httpx.get(f"{server.url}/metrics", timeout=60).text
                peer.send("ask: How much will the pilot cost?")
                answer = await peer.wait_for(lambda m: m["type"] in ("answer", "error"), 120)
                peer.send(f"rename: {CAROL} = Dana")
                renamed = await peer.wait_for(lambda m: m["type"] == "renamed" or "rename" in m, 60)
                peer.send("forget: Bob")
                forgot = await peer.wait_for(lambda m: m["type"] == "forgot" or m.get("forget") == "Bob", 180)
                session = server.bot.rooms["cluster"].session
                await peer.close()
                return {"refused": refused, "messages": list(peer.messages), "metrics": metrics, "answer": answer,
                        "renamed": renamed, "forgot": forgot, "host": session.room.progress().host,
                        "transcript": " ".join(t.text for t in session.transcript().turns).lower()}

            result = asyncio.run(run())
    finally:
        meetings.close()  # the event poller stops, the actor is handed back (its meeting is saved)
        if ray.is_initialized():
            ray.shutdown()

    assert result["refused"] is not None and result["refused"][0] == 501, result["refused"]
    assert "--ray-address" in result["refused"][1]
    host_pid = int(result["host"].rsplit(":", 1)[1])
    assert host_pid != os.getpid()  # the meeting ran in the actor's process
    messages = result["messages"]
    captions = " ".join(m["text"] for m in messages if m["type"] == "caption").lower()
    said = " ".join(text for _, text in SCRIPT).lower()
    assert captions.replace(",", "").replace(".", "").replace("?", "").split() == \
        said.replace(",", "").replace(".", "").replace("?", "").split(), captions
    lines = [m for m in messages if m["type"] == "line"]
    assert lines and "Bob" in {line["speaker"] for line in lines}, lines  # named as his lines arrive
    assert 'minutia_sessions{state="finished"}' in result["metrics"], result["metrics"]
    answer = result["answer"]
    assert answer["type"] == "answer" and ("12,000" in answer["text"] or "twelve thousand" in answer["text"].lower()), answer
    renamed = result["renamed"]
    assert (renamed["type"], renamed["speaker"], renamed["name"]) == ("renamed", CAROL, "Dana"), renamed
    assert any(line["speaker"] == "Dana" and "pilot" in line["text"].lower() for line in renamed["lines"]), renamed
    forgot = result["forgot"]
    assert forgot["type"] == "forgot" and forgot["speaker"] == BOB, forgot
    assert "login" not in result["transcript"] and "pilot" in result["transcript"], result["transcript"]
