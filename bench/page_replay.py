"""Is the live page truthful about where the meeting is? (issue 23's "done when").

Serves the real page (Runtime with the embedded Whisper base and Gemma 3 270M, as `make demo`), opens it in
headless Chromium (Debian's), replays a bundled sample at ``--speed`` and reads the page every 0.5 s: the status
line's "heard up to / transcribed up to / behind by" and the committed words. Arms side by side in one run:
``--loads 0,2`` adds that many CPU-burning processes for the whole replay (a busy machine).

Per arm: the session's commit latency (stream time received at a word's commit - the word's end; the figure
``bench/live_latency.py`` reports), how far behind the page said it was (p50 / p95 / max over the polls), the
replay's wall time against the meeting's length (a 1x replay should take the meeting's length), and how many
polls saw an earlier committed word changed (the page promises committed words never change).

    .venv/bin/python bench/page_replay.py --speed 1 --loads 0,2 --out bench/out/page-replay
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.platform.config import load_settings  # noqa: E402
from app.live.runtime import Runtime  # noqa: E402
from ui.server import free_port, serve  # noqa: E402
from ui.settings import UISettings  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
POLL_SECONDS = 0.5
STATUS = re.compile(r"heard up to (\d\d):(\d\d) · transcribed up to (\d\d):(\d\d)")
FINISHED = re.compile(r"finished · (\d\d):(\d\d) of meeting")


def _burn(stop) -> None:
    """One busy core until ``stop`` is set (the loaded arm's neighbour)."""
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def _seconds(minutes: str, seconds: str) -> int:
    return int(minutes) * 60 + int(seconds)


def _committed_words(page) -> list[str]:
    return " ".join(page.locator("#mt-transcript .mt-line:not(.mt-tentative) .mt-text").all_inner_texts()).split()


def replay_arm(browser, url: str, runtime: Runtime, sample: str, speed: float, timeout: float) -> dict:
    """One replay through the page; returns the polls and the session's commit latencies."""
    page = browser.new_page(viewport={"width": 1400, "height": 1300})
    page.goto(url)
    page.wait_for_selector("#mt-replay")
    page.locator("#mt-sample input").click()
    page.get_by_role("option", name=sample, exact=True).click()
    page.fill("#mt-speed input[type=number]", f"{speed:g}")
    page.press("#mt-speed input[type=number]", "Enter")
    page.click("#mt-replay")
    began = time.monotonic()
    polls, rewrites, shown, meeting_seconds = [], [], [], None
    while time.monotonic() - began < timeout:
        status = page.inner_text("#mt-status")
        wall = time.monotonic() - began
        if found := FINISHED.search(status):
            meeting_seconds = _seconds(*found.groups())
            break
        if found := STATUS.search(status):
            heard, decoded = _seconds(*found.groups()[:2]), _seconds(*found.groups()[2:])
            behind = re.search(r"behind by (\d+) s", status)
            polls.append({"wall": round(wall, 2), "heard": heard, "transcribed": decoded,
                          "behind_shown": int(behind.group(1)) if behind else 0})
        words = _committed_words(page)
        # compared without spaces: a later ",000" or "%" joins the word before it on the page ("30" -> "30,000")
        before, after = "".join(shown), "".join(words)
        if not after.startswith(before):
            at = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
            rewrites.append({"wall": round(wall, 2), "before": before[max(0, at - 30):at + 30],
                             "after": after[max(0, at - 30):at + 30]})
        shown = words
        page.wait_for_timeout(POLL_SECONDS * 1000)
    wall = time.monotonic() - began
    sessions = runtime.sessions()
    lags = np.array(sessions[-1].commit_lags() if sessions else [], dtype=float)
    page.close()
    deadline = time.monotonic() + 20  # the tab's meeting ends with it
    while runtime.sessions() and time.monotonic() < deadline:
        time.sleep(0.5)
    gaps = np.array([p["heard"] - p["transcribed"] for p in polls] or [np.nan], dtype=float)
    return {
        "polls": polls,
        "finished": meeting_seconds is not None,
        "meeting_seconds": meeting_seconds,
        "wall_seconds": round(wall, 1),
        "words": int(lags.size),
        "commit_latency_p50": float(np.percentile(lags, 50)) if lags.size else None,
        "commit_latency_p95": float(np.percentile(lags, 95)) if lags.size else None,
        "behind_p50": float(np.nanpercentile(gaps, 50)),
        "behind_p95": float(np.nanpercentile(gaps, 95)),
        "behind_max": float(np.nanmax(gaps)),
        "polls_saying_behind": sum(p["behind_shown"] > 0 for p in polls),
        "committed_word_rewrites": len(rewrites),
        "rewrites": rewrites,
        "final_words_on_page": len(shown),
    }


def plot(arms: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(arms), figsize=(5.5 * len(arms), 3.6), squeeze=False, sharey=True)
    for ax, (name, arm) in zip(axes[0], arms.items()):
        wall = [p["wall"] for p in arm["polls"]]
        ax.plot(wall, [p["heard"] for p in arm["polls"]], label="heard up to (status line)")
        ax.plot(wall, [p["transcribed"] for p in arm["polls"]], label="transcribed up to (status line)")
        ax.set_title(name)
        ax.set_xlabel("wall-clock seconds since Replay")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("meeting time (s)")
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", default="standup-video")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--loads", default="0,2", help="CPU-burning processes beside each arm, comma-separated")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per arm")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/out/page-replay")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    runtime = Runtime(load_settings())
    runtime.warm_up()
    settings = UISettings(summary_every_s=None, export_dir=Path(tempfile.mkdtemp()), poll_seconds=0.5)
    server = serve(runtime, port=free_port(), ui_settings=settings, block=False)
    arms: dict[str, dict] = {}
    try:
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
            for load in (int(n) for n in args.loads.split(",")):
                stop = multiprocessing.Event()
                burners = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(load)]
                for burner in burners:
                    burner.start()
                try:
                    name = f"{args.speed:g}x, {load} busy processes beside it"
                    arms[name] = replay_arm(browser, server.url, runtime, args.sample, args.speed, args.timeout)
                finally:
                    stop.set()
                    for burner in burners:
                        burner.join()
                arm = arms[name]
                print(f"{name}: meeting {arm['meeting_seconds']} s in {arm['wall_seconds']} s wall; commit latency "
                      f"p50 {arm['commit_latency_p50']:.2f} s p95 {arm['commit_latency_p95']:.2f} s "
                      f"({arm['words']} words); page behind p50 {arm['behind_p50']:.0f} s p95 {arm['behind_p95']:.0f} s "
                      f"max {arm['behind_max']:.0f} s, 'behind by' on {arm['polls_saying_behind']}/{len(arm['polls'])} "
                      f"polls; committed-word rewrites seen: {arm['committed_word_rewrites']}", flush=True)
            browser.close()
    finally:
        server.close()
        runtime.close()
    (args.out / "page_replay.json").write_text(json.dumps(arms, indent=1))
    plot(arms, args.out / "page_progress.png")
    print(f"wrote {args.out / 'page_replay.json'} and {args.out / 'page_progress.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
