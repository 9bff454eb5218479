"""How many live rooms one process transcribes in real time (issue 20 item 3).

Each room is a ``MeetingSession`` of one ``Runtime`` (one Whisper and one LLM shared under their locks, the online
diarizer and the KV prefill per room, as in ``minutia bot``), fed a generated meeting in 0.5 s chunks paced by the
wall clock, each room a different meeting. After ``--seconds`` every room reports its commit latency (stream time
received - word end, at commit; p50/p95 over its words) and how far its recogniser is behind. Arms side by side in
one run: Whisper's padded 30 s window (``none``, the code before) and the buffer plus N seconds (``--margins``).

    .venv/bin/python bench/rooms.py bench/out/suite-dev-clean --seeds 24-29 --rooms 1,2,4 --margins none,4
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.platform.config import load_settings  # noqa: E402
from app.live.runtime import Runtime  # noqa: E402
from bench.stream_window import parse_margin, window_label  # noqa: E402
from bench.suites.meetings import parse_seeds  # noqa: E402
from encoders.audio import SAMPLE_RATE, load_audio  # noqa: E402

CHUNK_SECONDS = 0.5
REAL_TIME_P95_SECONDS = 3.3  # the bar for a room that keeps up


def feed(session, audio: np.ndarray, seconds: float, stop: threading.Event) -> None:
    """Push ``audio`` (looped) into ``session`` in 0.5 s chunks at the wall clock's pace."""
    chunk = int(CHUNK_SECONDS * SAMPLE_RATE)
    start = time.monotonic()
    for i in range(int(seconds / CHUNK_SECONDS)):
        if stop.is_set():
            return
        pos = (i * chunk) % max(chunk, len(audio) - chunk)
        session.feed_audio(audio[pos:pos + chunk], SAMPLE_RATE)
        time.sleep(max(0.0, start + (i + 1) * CHUNK_SECONDS - time.monotonic()))


def run_rooms(runtime: Runtime, audios: list[np.ndarray], rooms: int, seconds: float) -> list[dict]:
    sessions = [runtime.new_session(source=f"bench-room-{i}") for i in range(rooms)]
    stop = threading.Event()
    feeders = [threading.Thread(target=feed, args=(s, audios[i % len(audios)], seconds, stop), daemon=True)
               for i, s in enumerate(sessions)]
    for thread in feeders:
        thread.start()
    for thread in feeders:
        thread.join()
    figures = []
    for session in sessions:
        lags = np.array(session.commit_lags() or [np.nan])
        snap = session.snapshot()
        heard = max((w.end for w in snap.transcript.words), default=0.0)
        figures.append({"words": len(snap.transcript.words), "stream_s": round(snap.stream_seconds, 1),
                        "behind_s": round(snap.stream_seconds - heard, 1),
                        "p50_s": round(float(np.nanpercentile(lags, 50)), 2),
                        "p95_s": round(float(np.nanpercentile(lags, 95)), 2)})
    stop.set()
    for session in sessions:
        runtime.close_session(session.session_id)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("suite", type=Path, help="a folder of generated meetings (python -m bench.suites.meetings)")
    ap.add_argument("--seeds", required=True, help="meetings for the rooms, e.g. 24-29 (cycled)")
    ap.add_argument("--rooms", default="1,2,4", help="comma list of room counts")
    ap.add_argument("--margins", default="none,4", help="comma list: none (30 s window) or seconds of padding")
    ap.add_argument("--seconds", type=float, default=60.0, help="seconds each room streams")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    try:
        margins = [parse_margin(m) for m in args.margins.split(",")]
        counts = [int(n) for n in args.rooms.split(",")]
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        sys.exit(f"error: bad --seeds, --rooms or --margins ({exc})")
    if args.seconds < 10 or min(counts) < 1:
        sys.exit("error: --seconds must be >= 10 and every room count >= 1")
    paths = [args.suite / f"seed-{s:04d}" / "meeting.wav" for s in seeds]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        sys.exit(f"error: no meeting at {', '.join(missing[:3])}")
    audios = [load_audio(p, SAMPLE_RATE) for p in paths]
    results: dict[str, dict[int, list[dict]]] = {}
    for margin in margins:
        settings = load_settings(overrides={"asr": {"stream_window_margin_seconds": margin}})
        runtime = Runtime(settings)
        runtime.warm_up()
        results[str(margin)] = {}
        for rooms in counts:
            figures = run_rooms(runtime, audios, rooms, args.seconds)
            results[str(margin)][rooms] = figures
            print(f"margin {margin} rooms {rooms}: " + "; ".join(
                f"p95 {f['p95_s']} s behind {f['behind_s']} s" for f in figures), flush=True)
        runtime.close()
    print(f"\n| Whisper window | rooms | commit latency p50 (worst room) | p95 (worst room) | behind at the end "
          f"(worst room) | rooms with p95 <= {REAL_TIME_P95_SECONDS} s |\n|---|---|---|---|---|---|")
    for margin in margins:
        for rooms, figures in results[str(margin)].items():
            ok = sum(f["p95_s"] <= REAL_TIME_P95_SECONDS for f in figures)
            print(f"| {window_label(margin)} | {rooms} | {max(f['p50_s'] for f in figures)} s | {max(f['p95_s'] for f in figures)} s"
                  f" | {max(f['behind_s'] for f in figures)} s | {ok} / {rooms} |")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
