"""Generated shared-screen slide decks for the slide detector (encoders/vision.py), deterministic from a seed.

    .venv/bin/python -m bench.slides --seeds 0-29          # development decks: look and tune
    .venv/bin/python -m bench.slides --seeds 1000-1029     # evaluation decks: only score

A deck is 5-10 slides in one of several themes (light or dark, with or without a title bar, three fonts, three
screen sizes), each slide a bullet list, a big figure, a small table or a bar chart. What makes real decks hard:
- a slide that keeps the previous one's layout and changes one figure or one line ("Pilot cost: $12,000" ->
  "$14,000"), or adds one bullet (a build);
- going back to an earlier slide (not a new slide: it must not be shown twice);
- things that move but are not slides: a progress bar, an elapsed-time clock ticking every second, a mouse
  pointer, a webcam thumbnail;
- lossy video (every frame through JPEG at quality 35-80) and dwell times from 1.5 to 20 s, at 2 frames a second.
The gold is the list of slides to be shown, each with its time span, text and kind (new, variant, build).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from bench.suites.meetings import SPLITS

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
FONTS = (("DejaVuSans.ttf", "DejaVuSans-Bold.ttf"), ("DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf"),
         ("DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf"))
SIZES = ((640, 360), (960, 540), (1280, 720))
FPS = 2.0
TITLES = ("Budget review", "Pilot plan", "Hiring update", "Launch timeline", "Customer churn", "Vendor choice",
          "Quarterly results", "Open risks", "Support backlog", "Marketing spend", "Data migration",
          "Office move", "Security audit", "Roadmap", "Action items", "Next steps", "Partner program")
ITEMS = ("Spent so far", "Total budget", "Pilot cost", "New hires", "Open roles", "Churn rate", "Tickets open",
         "Signups", "Conversion", "Deadline", "Users in pilot", "Servers", "Discount", "Response time",
         "Net revenue", "Training days", "Laptops ordered", "Renewals")
WORDS = ("review the contract", "ship the beta", "call the vendor", "update the budget", "test the backups",
         "hire two engineers", "move the release", "train the support team", "clean up the backlog",
         "order new laptops", "book the venue", "write the test plan", "fix the login page", "renew the licences")


def _value(rng: np.random.Generator) -> str:
    kind = rng.integers(4)
    if kind == 0:
        return f"${int(rng.integers(2, 99)) * 1000:,}"
    if kind == 1:
        return f"{rng.uniform(1, 40):.1f}%"
    if kind == 2:
        return str(int(rng.integers(3, 900)))
    return f"{('Mon', 'Tue', 'Wed', 'Thu', 'Fri')[rng.integers(5)]}, {('March', 'April', 'May', 'June')[rng.integers(4)]} {int(rng.integers(1, 29))}"


@dataclass
class Slide:
    kind: str  # "bullets", "figure", "table", "bars"
    title: str
    lines: list[str]  # what it says, one entry per bullet / row / bar
    values: list[int] = field(default_factory=list)  # bar heights (bars only)

    def text(self) -> str:
        return "\n".join([self.title, *self.lines])


def _new_slide(rng: np.random.Generator, used: set[str]) -> Slide:
    title = str(rng.choice([t for t in TITLES if t not in used] or TITLES))
    used.add(title)
    kind = str(rng.choice(["bullets", "bullets", "figure", "table", "bars"]))
    items = [str(x) for x in rng.choice(ITEMS, size=4, replace=False)]
    if kind == "bullets":
        n = int(rng.integers(2, 5))
        lines = [f"{items[i]}: {_value(rng)}" if rng.random() < 0.6 else str(rng.choice(WORDS)).capitalize()
                 for i in range(n)]
        return Slide(kind, title, lines)
    if kind == "figure":
        return Slide(kind, title, [f"{items[0]}: {_value(rng)}"])
    if kind == "table":
        return Slide(kind, title, [f"{items[i]}  {_value(rng)}" for i in range(int(rng.integers(2, 5)))])
    n = int(rng.integers(3, 6))
    values = [int(rng.integers(10, 100)) for _ in range(n)]
    return Slide(kind, title, [f"{items[i % 4].split()[0]} {v}" for i, v in enumerate(values)], values)


def _variant(rng: np.random.Generator, slide: Slide) -> Slide:
    """The same layout with one figure or one line changed."""
    lines, values = list(slide.lines), list(slide.values)
    i = int(rng.integers(len(lines)))
    if slide.kind == "bars":  # one bar moves, and its value label with it
        values[i] = max(5, min(99, values[i] + int(rng.choice([-1, 1]) * rng.integers(15, 40))))
        if values[i] == slide.values[i]:
            values[i] = 5 if values[i] > 50 else 99
        lines[i] = f"{lines[i].rsplit(' ', 1)[0]} {values[i]}"
    elif ":" in lines[i] or slide.kind == "table":
        sep = ": " if ":" in lines[i] else "  "
        head = lines[i].split(sep)[0]
        new = _value(rng)
        while f"{head}{sep}{new}" == lines[i]:
            new = _value(rng)
        lines[i] = f"{head}{sep}{new}"
    else:
        lines[i] = str(rng.choice([w for w in WORDS if w.capitalize() != lines[i]])).capitalize()
    return Slide(slide.kind, slide.title, lines, values)


def _build(rng: np.random.Generator, slide: Slide) -> Slide:
    extra = str(rng.choice([w for w in WORDS if w.capitalize() not in slide.lines])).capitalize()
    return Slide(slide.kind, slide.title, [*slide.lines, extra], list(slide.values))


@dataclass
class Theme:
    size: tuple[int, int]
    background: tuple[int, int, int]
    ink: tuple[int, int, int]
    bar: tuple[int, int, int] | None  # title bar colour, None: title on the background
    accent: tuple[int, int, int]
    fonts: tuple[str, str]
    jpeg_quality: int
    progress: bool
    clock: bool
    pointer: bool
    webcam: bool


def _theme(rng: np.random.Generator) -> Theme:
    dark = rng.random() < 0.3
    background = (20, 28, 45) if dark else tuple(int(x) for x in rng.integers(235, 256, size=3))
    ink = (235, 235, 235) if dark else (20, 20, 20)
    bar = tuple(int(x) for x in rng.integers(20, 120, size=3)) if rng.random() < 0.6 else None
    accent = tuple(int(x) for x in rng.integers(40, 220, size=3))
    return Theme(SIZES[rng.integers(len(SIZES))], background, ink, bar, accent, FONTS[rng.integers(len(FONTS))],
                 int(rng.integers(35, 81)), rng.random() < 0.5, rng.random() < 0.35, rng.random() < 0.5,
                 rng.random() < 0.3)


def _font(name: str, size: int):
    from PIL import ImageFont

    return ImageFont.truetype(str(FONT_DIR / name), size)


def render(slide: Slide, theme: Theme, page: int) -> np.ndarray:
    from PIL import Image, ImageDraw

    w, h = theme.size
    s = w / 640
    img = Image.new("RGB", theme.size, theme.background)
    draw = ImageDraw.Draw(img)
    title_ink = theme.ink
    if theme.bar is not None:
        draw.rectangle([0, 0, w, int(78 * s)], fill=theme.bar)
        title_ink = (255, 255, 255)
    draw.text((int(32 * s), int(18 * s)), slide.title, font=_font(theme.fonts[1], int(34 * s)), fill=title_ink)
    body = _font(theme.fonts[0], int(24 * s))
    top = int(108 * s)
    if slide.kind == "figure":
        head, value = slide.lines[0].split(": ", 1)
        draw.text((int(40 * s), top + int(20 * s)), head, font=body, fill=theme.ink)
        draw.text((int(40 * s), top + int(70 * s)), value, font=_font(theme.fonts[1], int(64 * s)), fill=theme.accent)
    elif slide.kind == "bars":
        base, width = top + int(190 * s), int(60 * s)
        for i, (label, value) in enumerate(zip(slide.lines, slide.values)):
            x = int(50 * s) + i * int(110 * s)
            draw.rectangle([x, base - int(value * 1.6 * s), x + width, base], fill=theme.accent)
            draw.text((x, base + int(8 * s)), label, font=_font(theme.fonts[0], int(15 * s)), fill=theme.ink)
    else:
        for i, line in enumerate(slide.lines):
            y = top + i * int(48 * s)
            if slide.kind == "bullets":
                draw.ellipse([int(36 * s), y + int(10 * s), int(47 * s), y + int(21 * s)], fill=theme.accent)
                draw.text((int(62 * s), y), line, font=body, fill=theme.ink)
            else:  # a table: two columns with a rule under each row
                head, value = line.split("  ", 1)
                draw.text((int(50 * s), y), head, font=body, fill=theme.ink)
                draw.text((int(380 * s), y), value, font=body, fill=theme.ink)
                draw.line([int(40 * s), y + int(38 * s), int(560 * s), y + int(38 * s)], fill=theme.accent, width=1)
    draw.text((w - int(60 * s), h - int(36 * s)), str(page), font=_font(theme.fonts[0], int(14 * s)), fill=(128, 128, 128))
    return np.asarray(img, dtype=np.uint8).copy()


@dataclass
class Segment:
    start: float
    end: float
    slide: Slide
    kind: str  # "new", "variant", "build", or "return" (an earlier slide again: not to be shown twice)
    page: int


@dataclass
class Deck:
    seed: int
    theme: Theme
    segments: list[Segment]

    @property
    def duration(self) -> float:
        return self.segments[-1].end

    def gold(self) -> list[Segment]:
        """The slides to be shown: every segment but the returns."""
        return [s for s in self.segments if s.kind != "return"]


def make_deck(seed: int) -> Deck:
    rng = np.random.default_rng([seed, 0x511DE5])
    theme = _theme(rng)
    used: set[str] = set()
    shown: list[tuple[Slide, int]] = []
    segments: list[Segment] = []
    t = 0.0
    for _ in range(int(rng.integers(5, 11))):
        roll = rng.random()
        if shown and roll < 0.25:
            slide, kind, page = _variant(rng, shown[-1][0]), "variant", shown[-1][1]
        elif shown and roll < 0.35 and len(shown[-1][0].lines) < 5 and shown[-1][0].kind == "bullets":
            slide, kind, page = _build(rng, shown[-1][0]), "build", shown[-1][1]
        elif len(shown) >= 2 and roll < 0.45:
            slide, page = shown[int(rng.integers(len(shown) - 1))]
            kind = "return"
        else:
            slide, kind, page = _new_slide(rng, used), "new", len({p for _, p in shown}) + 1
        if kind != "return":
            shown.append((slide, page))
        dwell = float(np.round(rng.uniform(1.5, 20.0) * FPS) / FPS)
        segments.append(Segment(t, t + dwell, slide, kind, page))
        t += dwell
    return Deck(seed, theme, segments)


def frames(deck: Deck) -> Iterator[tuple[float, np.ndarray]]:
    """The deck as a screen share: (time, HxWx3 uint8) at FPS, distractors drawn on, through JPEG."""
    from PIL import Image, ImageDraw

    theme, (w, h) = deck.theme, deck.theme.size
    rng = np.random.default_rng([deck.seed, 0xF4A3E5])
    pictures: dict[int, np.ndarray] = {}
    pointer = np.array([w * 0.5, h * 0.5])
    n = int(round(deck.duration * FPS))
    for k in range(n):
        t = k / FPS
        i = next(j for j, s in enumerate(deck.segments) if s.start <= t < s.end)
        seg = deck.segments[i]
        key = id(seg.slide)
        if key not in pictures:
            pictures[key] = render(seg.slide, theme, seg.page)
        img = Image.fromarray(pictures[key].copy())
        draw = ImageDraw.Draw(img)
        if theme.progress:
            draw.rectangle([0, h - max(3, h // 60), int(w * (k + 1) / n), h], fill=(90, 150, 220))
        if theme.clock:  # an elapsed-time counter in the corner, ticking every second
            draw.text((w - int(w * 0.16), int(h * 0.02)), f"{int(t) // 3600:02d}:{int(t) // 60 % 60:02d}:{int(t) % 60:02d}",
                      font=_font("DejaVuSansMono.ttf", max(10, h // 30)), fill=(200, 60, 60))
        if theme.pointer:
            pointer = np.clip(pointer + rng.normal(0, w * 0.03, size=2), [0, 0], [w - 12, h - 18])
            x, y = int(pointer[0]), int(pointer[1])
            draw.polygon([(x, y), (x, y + 16), (x + 4, y + 12), (x + 11, y + 12)], fill=(0, 0, 0), outline=(255, 255, 255))
        if theme.webcam:  # a talking head: a moving blob on a dark box in the lower right corner
            bw, bh = w // 6, h // 6
            x0, y0 = w - bw - 8, h - bh - 12
            draw.rectangle([x0, y0, x0 + bw, y0 + bh], fill=(50, 50, 60))
            cx = x0 + bw / 2 + np.sin(t * 1.7) * bw * 0.1
            cy = y0 + bh / 2 + np.cos(t * 2.3) * bh * 0.08
            r = bh * (0.3 + 0.03 * np.sin(t * 5))
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(200, 160, 130))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=theme.jpeg_quality)
        yield t, np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"), dtype=np.uint8)


def split_of(seed: int) -> str:
    return next((name for name, seeds in SPLITS.items() if seed in seeds), "other")
