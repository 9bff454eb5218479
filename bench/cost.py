"""Cost per meeting-hour and meetings per device: the full KV against minutia's cache (issue 19 item 5).

Each arm is a ``Runtime`` with the embedded Gemma 3 270M whose meetings (QMSum validation transcripts, timed at
2.5 words a second as a meeting is spoken) are given to a live ``MeetingSession`` one after the other, as the
live page's "resume a transcript" path does; each session's own meter (app/platform/cost.py) measures its wall time, its
share of the machine and its KV bytes on the device. Arms side by side in one run, same meetings:

* ``full``: transformers' DynamicCache (``kv.enabled: false``), what the model holds with no KV store;
* ``preset``: the config as it is (cpu-small: minutia's TieredCache at a 25% budget);
* ``budget-X``: the TieredCache at a budget of X of the full cache.

Reported per arm: meeting minutes, machine seconds, the peak KV bytes on the device, how many such meetings fit
``--kv-gib`` of device memory at once (what bounds concurrent meetings on a GPU), and the cost per meeting-hour at
the config's prices (`cost:`), compute-bound (the machine busy with meetings back to back).

    .venv/bin/python bench/cost.py --meetings Bed002,Bed010 --arms full,preset,budget-0.1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.platform.config import load_settings  # noqa: E402
from app.platform.cost import GIB, Usage, meeting_cost  # noqa: E402
from app.live.runtime import Runtime  # noqa: E402
from app.text.transcript import load_transcript  # noqa: E402

from bench.shared_data import qmsum_val  # noqa: E402

DEFAULT_DATA = qmsum_val()
MIB = 1024 * 1024


def arm_overrides(arm: str) -> dict:
    if arm == "full":
        return {"kv": {"enabled": False}}
    if arm == "preset":
        return {}
    if arm.startswith("budget-"):
        return {"kv": {"budget_ratio": float(arm.removeprefix("budget-"))}}
    raise SystemExit(f"error: unknown arm {arm!r} (full, preset, budget-X)")


def run_arm(arm: str, paths: list[Path], config: str | None, max_minutes: float) -> dict:
    settings = load_settings(config, overrides=arm_overrides(arm))
    runtime = Runtime(settings)
    _ = runtime.engine  # the LLM loaded before the first meeting (loading is not meeting time)
    rows = []
    try:
        for path in paths:
            transcript = load_transcript(path)
            words, kept = 0, []
            for turn in transcript.turns:  # the first --max-minutes of the meeting (2.5 words a second)
                if words / 2.5 > max_minutes * 60:
                    break
                kept.append(turn)
                words += len(turn.text.split())
            transcript.turns = kept
            session = runtime.new_session(f"cost-{arm}-{path.stem}".replace(".", "-"))
            began = time.monotonic()
            session.add_transcript(transcript)
            session.finish(timeout=3600)
            seconds = time.monotonic() - began
            usage: Usage = session.usage()
            kv = session.kv_stats()
            runtime.close_session(session.session_id)
            priced = meeting_cost(usage, settings.cost)
            rows.append({"meeting": path.stem, "tokens": kv.get("tokens"), "meeting_minutes": usage.meeting_seconds / 60,
                         "seconds": seconds, "usage": usage.to_dict(), "cost_usd": priced.total,
                         "cores": priced.cores, "gpus": priced.gpus})
            print(f"{arm} {path.stem}: {usage.meeting_seconds / 60:.1f} min of meeting, {kv.get('tokens')} tokens, "
                  f"{usage.machine_seconds:.1f} machine-s, peak KV {usage.peak_device_kv_bytes / MIB:.1f} MiB, "
                  f"${priced.total:.5f}", flush=True)
    finally:
        runtime.close()
    return {"arm": arm, "meetings": rows}


def summary(result: dict, kv_gib: float) -> dict:
    rows = result["meetings"]
    hours = sum(r["meeting_minutes"] for r in rows) / 60
    peak = max(r["usage"]["peak_device_kv_bytes"] for r in rows)
    return {"arm": result["arm"], "meeting_minutes": hours * 60,
            "machine_seconds": sum(r["usage"]["machine_seconds"] for r in rows),
            "peak_kv_mib": peak / MIB, "meetings_per_device": int(kv_gib * GIB // peak) if peak else None,
            "per_meeting_hour_usd": sum(r["cost_usd"] for r in rows) / hours if hours else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--meetings", default="Bed002,Bed010", help="QMSum validation meetings (file stems)")
    parser.add_argument("--arms", default="full,preset,budget-0.1")
    parser.add_argument("--max-minutes", type=float, default=60.0, help="the first N minutes of each meeting")
    parser.add_argument("--kv-gib", type=float, default=16.0, help="device memory for KV when counting meetings")
    parser.add_argument("--config", default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/out/cost.json")
    args = parser.parse_args(argv)
    paths = [args.data / f"{name}.json" for name in args.meetings.split(",")]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"error: no QMSum meeting {missing[0]}")
    results = [run_arm(arm, paths, args.config, args.max_minutes) for arm in args.arms.split(",")]
    table = [summary(r, args.kv_gib) for r in results]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"arms": results, "summary": table}, indent=1))
    print(f"\n| arm | meeting min | machine s | peak KV on device (MiB) | meetings per {args.kv_gib:g} GiB of KV "
          "| USD per meeting-hour (compute-bound) |\n|---|---:|---:|---:|---:|---:|")
    for row in table:
        print(f"| {row['arm']} | {row['meeting_minutes']:.1f} | {row['machine_seconds']:.1f} | {row['peak_kv_mib']:.1f} "
              f"| {row['meetings_per_device']} | {row['per_meeting_hour_usd']:.5f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
