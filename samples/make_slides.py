"""Build the bundled sample meeting with video in samples/standup-video/.

    .venv/bin/python samples/make_slides.py [--audio-dir samples/standup] [--out samples/standup-video]

(`samples/make_sample.py` calls this after it writes samples/standup/.)

The video is a shared screen: a few slides (PIL, DejaVu fonts from Debian's
fonts-dejavu-core) that change when the speakers reach the slide's topic, with a thin
progress bar at the bottom that moves every frame, as a presenter's screen would (a small
change that must not count as a slide change). The slides are encoded as VP8 at FPS
frames per second, 640x360, with PyAV; the Opus packets of samples/standup/meeting.ogg are
copied unchanged (no re-encode), so the audio is the same as the audio-only sample.

Deterministic: fixed slide times (from the reference turn starts), one encoder thread,
bitexact muxing and no metadata; two runs write identical bytes.

Writes:
  meeting.webm     VP8 640x360 at FPS fps + the Opus audio of samples/standup/meeting.ogg
  slides.json      minutia.slides/1 gold: per slide start/end, title, bullets, text
  reference.json, reference.rttm, reference.txt, facts.json
                   copies from samples/standup/ (source renamed to meeting.webm)
"""

from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

SAMPLES = Path(__file__).resolve().parent
VIDEO_NAME = "meeting.webm"
WIDTH, HEIGHT = 640, 360
FPS = 2
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
COPIED = ["reference.json", "reference.rttm", "reference.txt", "facts.json"]

# (index of the reference turn whose start shows the slide, title, bullets). The first
# slide is shown from time 0; the others appear when the speaker starts that topic.
SLIDES: list[tuple[int, str, list[str]]] = [
    (0, "Customer website", ["Weekly meeting", "Login page finished", "Payment page: one more week"]),
    (2, "Budget", ["Spent so far: $30,000", "Total budget: $50,000", "Pilot cost: $12,000"]),
    (4, "Pilot plan", ["Starts Monday, March 10", "Runs for four weeks", "200 users, real traffic"]),
    (7, "Payment contract", ["Contract not signed yet", "Keep the payment company", "Offer a 5% discount"]),
    (14, "Action items", ["Bob: send contract by March 6", "Carol: update budget by March 7",
                          "Alice: test plan by March 12"]),
    (18, "Launch plan", ["Release: Monday, April 14", "Next meeting: Tuesday, 10 am"]),
]

BACKGROUND = (255, 255, 255)
TITLE_BAR = (31, 56, 100)
TITLE_TEXT = (255, 255, 255)
BODY_TEXT = (20, 20, 20)
PROGRESS = (90, 150, 220)


def _font(name: str, size: int):
    from PIL import ImageFont

    path = FONT_DIR / name
    if not path.is_file():
        raise SystemExit(f"{path} not found; install the Debian package fonts-dejavu-core")
    return ImageFont.truetype(str(path), size)


def render_slide(title: str, bullets: list[str], page: int, pages: int) -> np.ndarray:
    """One slide as an HxWx3 uint8 RGB frame, without the progress bar."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (WIDTH, HEIGHT), BACKGROUND)
    draw = ImageDraw.Draw(img)
    draw.rectangle([0, 0, WIDTH, 78], fill=TITLE_BAR)
    draw.text((32, 18), title, font=_font("DejaVuSans-Bold.ttf", 36), fill=TITLE_TEXT)
    body = _font("DejaVuSans.ttf", 26)
    for i, bullet in enumerate(bullets):
        y = 112 + i * 56
        draw.ellipse([36, y + 10, 48, y + 22], fill=BODY_TEXT)
        draw.text((64, y), bullet, font=body, fill=BODY_TEXT)
    draw.text((WIDTH - 70, HEIGHT - 40), f"{page}/{pages}", font=_font("DejaVuSans.ttf", 16), fill=(120, 120, 120))
    return np.asarray(img, dtype=np.uint8).copy()


def slide_plan(reference: dict) -> list[dict]:
    """Gold slide list: start/end times from the reference turns, title, bullets, full text."""
    turns, duration = reference["turns"], reference["duration"]
    starts = [0.0 if i == 0 else turns[turn]["start"] for i, (turn, _, _) in enumerate(SLIDES)]
    plan = []
    for i, (turn, title, bullets) in enumerate(SLIDES):
        end = starts[i + 1] if i + 1 < len(SLIDES) else duration
        plan.append({"index": i, "start": round(starts[i], 3), "end": round(end, 3), "turn": turn,
                     "title": title, "bullets": bullets, "text": "\n".join([title, *bullets])})
    return plan


def build(out: Path, audio_dir: Path = SAMPLES / "standup") -> dict:
    """Write meeting.webm, slides.json and the copied reference files into ``out``."""
    import av

    reference = json.loads((audio_dir / "reference.json").read_text())
    audio_path = audio_dir / reference["source"]
    plan = slide_plan(reference)
    out.mkdir(parents=True, exist_ok=True)
    images = [render_slide(s["title"], s["bullets"], i + 1, len(plan)) for i, s in enumerate(plan)]
    n_frames = int(np.ceil(reference["duration"] * FPS))

    video_path = out / VIDEO_NAME
    with av.open(str(audio_path)) as src, av.open(str(video_path), "w", format="webm",
                                                  options={"fflags": "+bitexact"}) as dst:
        v = dst.add_stream("libvpx", rate=FPS, options={"threads": "1", "deadline": "good", "cpu-used": "2",
                                                         "auto-alt-ref": "0", "lag-in-frames": "0"})
        v.width, v.height, v.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        v.bit_rate = 150_000
        v.codec_context.gop_size = 20 * FPS
        v.codec_context.flags |= av.codec.context.Flags.bitexact
        a_in = src.streams.audio[0]
        a_out = dst.add_stream_from_template(a_in)
        dst.metadata.clear()

        packets: list[tuple[float, int, object]] = []  # (time, stream order, packet): muxed in time order
        for k in range(n_frames):
            t = k / FPS
            slide = max(i for i, s in enumerate(plan) if s["start"] <= t)
            frame = images[slide].copy()
            frame[HEIGHT - 6:, : int(WIDTH * (k + 1) / n_frames)] = PROGRESS
            vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
            vf.pts, vf.time_base = k, Fraction(1, FPS)
            packets += [(float(p.pts * p.time_base), 0, p) for p in v.encode(vf)]
        packets += [(float(p.pts * p.time_base), 0, p) for p in v.encode(None)]
        for p in src.demux(a_in):
            if p.dts is None:  # the demuxer's flush packet
                continue
            p.stream = a_out
            packets.append((float(p.pts * p.time_base), 1, p))
        for _, _, p in sorted(packets, key=lambda x: (x[0], x[1])):
            dst.mux(p)

    gold = {
        "format": "minutia.slides/1",
        "source": VIDEO_NAME,
        "audio_from": f"../{audio_dir.name}/{reference['source']}",
        "width": WIDTH, "height": HEIGHT, "fps": FPS,
        "duration": reference["duration"],
        "slides": plan,
    }
    (out / "slides.json").write_text(json.dumps(gold, indent=2) + "\n")
    for name in COPIED:
        text = (audio_dir / name).read_text()
        if name.endswith(".json"):
            data = json.loads(text)
            data["source"] = VIDEO_NAME
            text = json.dumps(data, indent=2) + "\n"
        (out / name).write_text(text)
    return gold


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audio-dir", type=Path, default=SAMPLES / "standup")
    ap.add_argument("--out", type=Path, default=SAMPLES / "standup-video")
    args = ap.parse_args(argv)
    gold = build(args.out, args.audio_dir)
    print(f"wrote {args.out}/")
    for name in [VIDEO_NAME, "slides.json", *COPIED]:
        print(f"  {name:15s} {(args.out / name).stat().st_size:>8d} bytes")
    for s in gold["slides"]:
        print(f"  {s['start']:7.3f}-{s['end']:7.3f} s  {s['title']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
