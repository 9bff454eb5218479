"""Bounded load: real aiortc peers, one per room, streaming the stand-up in real time for 60 s
(MINUTIA_BOT_LOAD_SECONDS=120 for the benchmark's 2 minutes, past the 60-90 s at which starved peers dropped).

2 rooms in `make test`: on this 2-core machine even 2 live rooms run at about half real time with
Whisper base (each had ~29 s of 62 s transcribed, 2026-12-02), and 4 rooms fall so far behind that a
room can end a 60 s stream with no words at all, so a fair-share check on 4 rooms measured the overload,
not the scheduler (it failed CI twice). 8 rooms starve the event loops (the peers run in this process
too) until WebRTC consent checks expire and peers drop after 60-90 s (measured 2026-12-01, see
docs/benchmarks.md); MINUTIA_BOT_LOAD_ROOMS=4 or 8 reproduces those.

One process, one Runtime (Whisper and the LLM shared under their locks), the cheap ASR setting
(beam 1). Checked: every room gets captions (none starves), memory stays bounded, and every room
answers a question at the end. The figures go to $MINUTIA_BOT_LOAD_REPORT (JSON) when set; they are
in docs/benchmarks.md, "WebRTC bot (issue 8)".
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import psutil
import pytest

from app.rooms.bot_server import BotServer
from app.rooms.bot_settings import BotSettings
from app.platform.config import load_settings
from app.platform.models import EMBEDDED_ASR, EMBEDDED_LLM, models_dir
from app.live.runtime import Runtime
from app.testing.peers import FileAudioTrack, RoomClient

ROOT = Path(__file__).resolve().parent.parent
AUDIO = ROOT / "samples" / "standup" / "meeting.ogg"
ROOMS = int(os.environ.get("MINUTIA_BOT_LOAD_ROOMS", "2"))
SECONDS = float(os.environ.get("MINUTIA_BOT_LOAD_SECONDS", "60"))

_HOME = load_settings().home
_MISSING = [m for m in (EMBEDDED_ASR, EMBEDDED_LLM) if not (models_dir(_HOME) / m / ".minutia-complete").is_file()]
pytestmark = [pytest.mark.slow, pytest.mark.realtime,
              pytest.mark.skipif(bool(_MISSING), reason=f"embedded models {_MISSING} not provisioned in {_HOME}")]


def _room_figures(bot) -> dict[str, dict]:
    figures = {}
    for name, session in bot.sessions():
        snap = session.snapshot()
        words = snap.transcript.words
        heard = max((w.end for w in words), default=0.0)
        figures[name] = {
            "stream_seconds": snap.stream_seconds,
            "committed_words": len(words),
            "transcribed_until": round(heard, 2),
            "behind_seconds": round(snap.stream_seconds - heard, 2),
            "commit_lag": snap.commit_lag,
            "dropped_audio_seconds": round(snap.counters.get("audio_dropped_samples", 0) / 16000, 2),
            "state": snap.state,
        }
    return figures


def test_rooms_under_sustained_load():
    settings = load_settings(overrides={"asr": {"beam_size": 1}})
    runtime = Runtime(settings)
    runtime.warm_up()
    rooms = {f"room{i}": f"token-{i}" for i in range(ROOMS)}
    bot_settings = BotSettings(rooms=rooms, ice_hosts=["127.0.0.1"], max_peers=ROOMS * 2, max_rooms=ROOMS)
    server = BotServer(runtime, bot_settings, port=0).start()
    process = psutil.Process()
    report: dict = {"rooms": ROOMS, "seconds": SECONDS, "cpus": os.cpu_count(), "samples": []}

    async def run() -> None:
        peers = [RoomClient(server.url, name, token,
                            [FileAudioTrack(AUDIO, speed=1.0, start=(7.0 * i) % 60, seconds=SECONDS, loop=True)])
                 for i, (name, token) in enumerate(rooms.items())]
        await asyncio.gather(*(p.join() for p in peers))
        started = time.monotonic()
        while time.monotonic() - started < SECONDS + 2:
            await asyncio.sleep(10)
            rooms_now = await asyncio.get_running_loop().run_in_executor(None, _room_figures, server.bot)
            report["samples"].append({
                "t": round(time.monotonic() - started, 1),
                "rss_mb": round(process.memory_info().rss / 2**20),
                "cpu_percent": process.cpu_percent(),
                "captions": {p.room: sum(1 for m in p.messages if m["type"] == "caption") for p in peers},
                "behind_seconds": {name: f["behind_seconds"] for name, f in rooms_now.items()},
            })
        report["end"] = await asyncio.get_running_loop().run_in_executor(None, _room_figures, server.bot)
        asked = time.monotonic()
        for p in peers:
            p.send("ask: How much will the pilot cost?")
        answers = await asyncio.gather(*(p.wait_for(lambda m: m["type"] in ("answer", "error"), 600) for p in peers))
        report["answers"] = {p.room: {"type": a["type"], "text": a.get("text") or a.get("message"),
                                      "seconds": a.get("seconds"), "citations": len(a.get("citations", []))}
                             for p, a in zip(peers, answers)}
        report["all_answers_seconds"] = round(time.monotonic() - asked, 1)
        report["captions"] = {p.room: sum(1 for m in p.messages if m["type"] == "caption") for p in peers}
        await asyncio.gather(*(p.close() for p in peers))

    try:
        asyncio.run(run())
    finally:
        server.stop()
        runtime.close()
    print(json.dumps(report, indent=1))
    if os.environ.get("MINUTIA_BOT_LOAD_REPORT"):
        Path(os.environ["MINUTIA_BOT_LOAD_REPORT"]).write_text(json.dumps(report, indent=1))

    # No room starves: every room has captions, and the least-served room has had a fair share of the
    # recogniser: at least half the audio of the best-served one transcribed (caption counts depend on
    # where in the recording each room starts; seconds heard do not).
    captions = report["captions"]
    assert all(count > 0 for count in captions.values()), captions
    heard = {name: f["transcribed_until"] for name, f in report["end"].items()}
    assert min(heard.values()) >= 0.5 * max(heard.values()), heard
    assert all(f["state"] in ("live", "idle", "finished") for f in report["end"].values()), report["end"]
    # Memory stays bounded: the second half adds little to what the first one reached.
    rss = [s["rss_mb"] for s in report["samples"]]
    half = len(rss) // 2
    assert max(rss[half:]) - max(rss[:half]) < 400, rss
    # Every room answers at the end.
    assert all(a["type"] == "answer" and a["text"] for a in report["answers"].values()), report["answers"]
