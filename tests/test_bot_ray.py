"""The room bot with its meetings on Ray (issue 20 item 2: "the signaling server routes a room to its actor").

Real aiortc peers play a scripted meeting (tests/scripted_parts.py) into a bot whose rooms are Ray actors on a
local Ray runtime (`minutia bot --ray-address local`): the meeting runs in the actor's process, not the bot's; the
captions, lines and the end of the stream reach the peers through the host's event log; a named participant's
words are hers by her microphone (the frames' speakers travel with the audio); a speaker after the end continues
the meeting in the same actor; a question, a rename and a forget go to the actor and come back; /metrics reports
the remote session.
"""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest
from scripted_parts import scripted_meeting

from app.rooms.bot_server import BotServer
from app.rooms.bot_settings import BotSettings
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


def _track(recording, first: int, last: int) -> FileAudioTrack:
    start, end = MEETING.turns[first][0], MEETING.turns[last][1]
    return FileAudioTrack(recording, speed=3.0, start=start, seconds=end - start, tail_seconds=0.3)


def _words(text: str) -> list[str]:
    return text.lower().replace(",", "").replace(".", "").replace("?", "").split()


@pytest.mark.slow  # ~40 s: a local Ray runtime and one actor start with the tiny Gemma 3
def test_rooms_run_as_ray_actors_behind_the_bot(tmp_path, tiny_llm_dir):
    ray = pytest.importorskip("ray")
    import ray.cloudpickle

    import room_parts
    import scripted_parts
    from app.rooms.bot_meetings import ClusterMeetings
    from app.platform.config import load_settings
    from app.rooms.room_fleet import FleetOptions, RoomFleet
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
                # Dana joins with her name and her microphone plays Alice's opening; the room's audio ends, and
                # an unnamed peer (the meeting room's microphone) then plays Bob and Carol: the meeting goes on.
                dana = RoomClient(server.url, "cluster", ROOMS["cluster"], [_track(recording, 0, 0)], name="Dana")
                await dana.join(timeout=120)  # the first join starts the room's actor (models load there)
                await dana.wait_for(_finished, 180)
                room = RoomClient(server.url, "cluster", ROOMS["cluster"], [_track(recording, 1, 2)])
                await room.join()
                await room.wait_for(lambda m: m["type"] == "caption" and "dollars" in m["text"].lower(), 180)
                await room.wait_for(_finished, 180)
                metrics = httpx.get(f"{server.url}/metrics", timeout=60).text
                room.send("ask: How much will the pilot cost?")
                answer = await room.wait_for(lambda m: m["type"] in ("answer", "error"), 120)
                room.send(f"rename: {CAROL} = Erin")
                renamed = await room.wait_for(lambda m: m["type"] == "renamed" or "rename" in m, 60)
                room.send("forget: Bob")
                await room.wait_for(lambda m: m.get("forget") == "Bob", 60)
                room.send("forget: yes")
                forgot = await room.wait_for(lambda m: m["type"] == "forgot" or (m["type"] == "error" and m.get("forget") == "Bob"), 180)
                session = server.bot.rooms["cluster"].session
                await asyncio.gather(dana.close(), room.close())
                return {"messages": list(dana.messages), "metrics": metrics, "answer": answer,
                        "renamed": renamed, "forgot": forgot, "host": session.room.progress().host,
                        "transcript": session.transcript()}

            result = asyncio.run(run())
    finally:
        meetings.close()  # the event poller stops, the actor is handed back (its meeting is saved)
        if ray.is_initialized():
            ray.shutdown()

    host_pid = int(result["host"].rsplit(":", 1)[1])
    assert host_pid != os.getpid()  # the meeting ran in the actor's process
    messages = result["messages"]  # what Dana's peer was sent, from her first word to the forget
    captions = " ".join(m["text"] for m in messages if m["type"] == "caption")
    assert _words(captions) == _words(" ".join(text for _, text in SCRIPT)), captions  # every word once, in order
    lines = [m for m in messages if m["type"] == "line"]
    assert lines and lines[0]["speaker"] == "Dana", lines  # her microphone, not her voice, says who spoke
    assert "Bob" in {line["speaker"] for line in lines}, lines  # the room's microphone: by voice, then named
    assert 'minutia_sessions{state="finished"}' in result["metrics"], result["metrics"]
    answer = result["answer"]
    assert answer["type"] == "answer" and ("12,000" in answer["text"] or "twelve thousand" in answer["text"].lower()), answer
    renamed = result["renamed"]
    assert (renamed["type"], renamed["speaker"], renamed["name"]) == ("renamed", CAROL, "Erin"), renamed
    assert any(line["speaker"] == "Erin" and "pilot" in line["text"].lower() for line in renamed["lines"]), renamed
    forgot = result["forgot"]
    assert forgot["type"] == "forgot" and forgot["speaker"] == BOB, forgot
    turns = result["transcript"].turns
    text = " ".join(t.text for t in turns).lower()
    assert "login" not in text and "pilot" in text and "good morning" in text, text
    assert {t.speaker for t in turns} == {"Dana", "Erin"}, [(t.speaker, t.text) for t in turns]
