"""Generate evaluation suites of synthetic meetings, deterministic from a seed.

The same seed gives byte-identical files; content, voices and conditions are all drawn from it,
so a meeting cannot be tuned to without looking at its seed.

    .venv/bin/python -m bench.suites.meetings --split dev --count 5 --out bench/out/suite-dev
    .venv/bin/python -m bench.suites.meetings --seeds 1000-1004 --out DIR [--condition clean|noisy|telephone|reverb|levels|all]

Seed splits (SPLITS): dev seeds may be looked at and tuned on; eval seeds are only scored, never
read or tuned on (do not open their transcripts, facts or audio, and do not choose settings by
their scores). One folder per meeting (seed-0007/): meeting.wav (16 kHz mono 16-bit),
reference.json (minutia.transcript/1), reference.rttm, facts.json (minutia.facts/2, questions
with keywords, see bench/suites/questions.py) and meta.json (voices, condition, degradations).
Needs espeak-ng and sox (Debian packages). A meeting takes a few seconds on one core.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import audio
from .plan import MeetingSpec, Turn, balanced, plan_meeting, stream
from .spoken import date_written, ordinal_words, weekday

# dev: may be looked at and tuned on. eval: only scored, never read or tuned on.
SPLITS = {"dev": range(0, 100), "eval": range(1000, 1100)}
CONDITIONS = ("clean", "noisy", "telephone", "reverb", "levels")
MIN_DURATION, MAX_DURATION = 45.0, 150.0
GENERATOR = "bench.suites.meetings/1"


def split_of(seed: int) -> str:
    return next((name for name, seeds in SPLITS.items() if seed in seeds), "other")


def draw_condition(seed: int) -> str:
    """The "mixed" condition of a seed: in every aligned block of 10 seeds, 5 clean, each
    degradation once and one more drawn at random."""
    spare = stream(seed - seed % 10, "condition").choice(CONDITIONS)
    return balanced(seed, "condition", ("clean",) * 5 + CONDITIONS[1:] + (spare,))


def degradation(spec: MeetingSpec, condition: str) -> dict | None:
    """The parameters of a condition for this seed (None for clean)."""
    rng = stream(spec.seed, f"degrade/{condition}")
    if condition == "noisy":
        return {"type": "noise", "color": rng.choice(("white", "pink", "brown")),
                "snr_db": round(rng.uniform(10.0, 20.0), 1), "snr_reference": "speech samples"}
    if condition == "telephone":
        return {"type": "telephone", "band_hz": [300, 3400], "rate": 8000, "encoding": "u-law"}
    if condition == "reverb":
        return {"type": "reverb", "reverberance": rng.randint(30, 90), "hf_damping": rng.randint(20, 80),
                "room_scale": rng.randint(40, 100), "pre_delay_ms": rng.randint(0, 30)}
    if condition == "levels":
        gains = {s.name: round(rng.choice((-1, 1)) * rng.uniform(6.0, 12.0), 1) for s in spec.speakers}
        mover = rng.choice(spec.speakers).name
        shift = round(rng.choice((-1, 1)) * rng.uniform(6.0, 12.0), 1)
        return {"type": "levels", "gains_db": gains,
                "change": {"speaker": mover, "after_fraction": 0.5, "gain_db": round(gains[mover] + shift, 1)}}
    return None


@dataclass
class Layout:
    turns: list[Turn]
    placed: list[audio.Placed]
    length: int
    dropped: int

    @property
    def duration(self) -> float:
        return self.length / audio.RATE


def place(spec: MeetingSpec, turns: list[Turn], clips: list[np.ndarray]) -> Layout:
    """Sample-exact positions: pauses after the latest end, overlaps before the previous end."""
    rng = stream(spec.seed, "layout")
    lead, tail = round(rng.uniform(0.3, 1.0) * audio.RATE), round(rng.uniform(0.5, 1.0) * audio.RATE)
    placed: list[audio.Placed] = []
    latest = 0
    for turn, clip in zip(turns, clips):
        if not placed:
            start = lead
        elif turn.overlap > 0:
            prev = placed[-1]
            start = max(prev.end - min(round(turn.overlap * audio.RATE), prev.clip.size // 2), prev.start + 1)
        else:
            start = latest + round(turn.pause * audio.RATE)
        placed.append(audio.Placed(clip, start))
        latest = max(latest, start + clip.size)
    return Layout(turns, placed, latest + tail, 0)


def fit(spec: MeetingSpec, clips: dict[int, np.ndarray]) -> Layout:
    """Drop small-talk turns, last first, until the meeting is at most MAX_DURATION long."""
    keep = list(range(len(spec.turns)))
    fillers = [i for i in keep if spec.turns[i].kind == "filler"]
    while True:
        turns = [spec.turns[i] for i in keep]
        layout = place(spec, turns, [clips[i] for i in keep])
        layout.dropped = len(spec.turns) - len(keep)
        if layout.duration <= MAX_DURATION or not fillers:
            break
        dropped = fillers.pop()
        at = keep.index(dropped)
        keep.remove(dropped)
        if at < len(keep):
            spec.turns[keep[at]].overlap = 0.0  # its overlap was planned against another turn
    if not MIN_DURATION <= layout.duration <= MAX_DURATION:
        raise RuntimeError(f"seed {spec.seed}: {layout.duration:.1f} s is outside {MIN_DURATION}-{MAX_DURATION} s")
    return layout


def synthesize_turns(spec: MeetingSpec, tmp: Path) -> dict[int, np.ndarray]:
    cache: dict[tuple, np.ndarray] = {}
    clips = {}
    for i, turn in enumerate(spec.turns):
        args = spec.speakers[turn.speaker].voice.args()
        key = (tuple(args), turn.text)
        if key not in cache:
            cache[key] = audio.synthesize(args, turn.text, tmp, f"t{i:03d}")
        clips[i] = cache[key]
    return clips


def apply_levels(spec: MeetingSpec, layout: Layout, params: dict) -> None:
    change = params["change"]
    half = layout.length // 2
    for turn, p in zip(layout.turns, layout.placed):
        name = spec.speakers[turn.speaker].name
        late = name == change["speaker"] and p.start >= half
        p.gain_db = change["gain_db"] if late else params["gains_db"][name]


def render(spec: MeetingSpec, layout: Layout, params: dict | None, tmp: Path) -> np.ndarray:
    """Mix, then degrade (levels act per speaker before the mix)."""
    if params and params["type"] == "levels":
        apply_levels(spec, layout, params)
    x = audio.mix(layout.placed, layout.length)
    if params and params["type"] == "noise":
        x = audio.add_noise(x, audio.speech_mask(layout.placed, layout.length), params["color"],
                            params["snr_db"], spec.seed)
    elif params and params["type"] == "telephone":
        x = audio.telephone(x, tmp)
    elif params and params["type"] == "reverb":
        x = audio.reverb(x, tmp, params["reverberance"], params["hf_damping"], params["room_scale"],
                         params["pre_delay_ms"])
    return audio.to_pcm(x)


# ---- writing --------------------------------------------------------------------------------
def turn_times(layout: Layout) -> list[tuple[float, float]]:
    return [(round(p.start / audio.RATE, 3), round(p.end / audio.RATE, 3)) for p in layout.placed]


def reference_json(spec: MeetingSpec, layout: Layout) -> dict:
    return {"format": "minutia.transcript/1", "source": "meeting.wav", "duration": round(layout.duration, 3),
            "speakers": [s.name for s in spec.speakers],
            "turns": [{"speaker": spec.speakers[t.speaker].name, "start": s, "end": e, "text": t.text}
                      for t, (s, e) in zip(layout.turns, turn_times(layout))]}


def rttm(spec: MeetingSpec, layout: Layout, uri: str) -> str:
    return "".join(f"SPEAKER {uri} 1 {s:.3f} {e - s:.3f} <NA> <NA> {spec.speakers[t.speaker].name} <NA> <NA>\n"
                   for t, (s, e) in zip(layout.turns, turn_times(layout)))


def facts_json(spec: MeetingSpec, layout: Layout) -> dict:
    index: dict[str, int] = {}
    for i, t in enumerate(layout.turns):
        for k in t.keys:
            index.setdefault(k, i)
    name = lambda i: spec.speakers[i].name  # noqa: E731
    out = {"format": "minutia.facts/2", "source": "meeting.wav", "topic": spec.topic.key, "title": spec.title,
           "meeting_date": spec.meeting_date.isoformat(),
           "keywords_rule": "list: any one form must appear; list of lists: every group must be matched",
           "speakers": [{"name": s.name, "named_by": s.named_by, **({"intro_text": s.intro_text} if s.intro_text else {})}
                        for s in spec.speakers],
           "decisions": [], "action_items": [], "proposals": [], "key_facts": [], "dates": []}
    for f in spec.facts:
        turn, d = index.get(f.key), f.data
        if f.kind == "choice":
            out["decisions"].append({"text": d["decision"], "keywords": [list(d["b"])], "turn": turn})
        elif f.kind == "move":
            out["decisions"].append({"text": d["decision"], "turn": turn, "date": d["new"].isoformat()})
            out["dates"] += [_date_entry(d["old"], index.get(f.key + ":old"), d["event"] + " (old)"),
                             _date_entry(d["new"], turn, d["event"])]
        elif f.kind == "proposal":
            out["proposals"].append({"proposal": d["proposal"], "accepted": d["accepted"], "by": name(f.speaker),
                                     "turn": turn})
            if d["accepted"]:
                out["decisions"].append({"text": f"Agreed to {d['proposal']}.", "turn": turn})
        elif f.kind == "action":
            out["action_items"].append({"owner": name(f.speaker), "task": d["task"], "due": date_written(d["date"]),
                                        "due_iso": d["date"].isoformat(), "form": d["form"], "turn": turn})
            out["dates"].append(_date_entry(d["date"], turn, d["task"]))
        elif f.kind in ("event", "next_meeting"):
            out["dates"].append(_date_entry(d["date"], turn, d["event"]))
        else:
            out["key_facts"].append(_key_fact(f, name(f.speaker), turn))
    out["questions"] = [q.to_json(index.get(q.evidence) if q.evidence else None) for q in spec.questions]
    return out


def _date_entry(day, turn: int | None, what: str) -> dict:
    return {"iso": day.isoformat(), "weekday": weekday(day), "month_day_words": ordinal_words(day.day),
            "written": date_written(day), "what": what, "turn": turn}


def _key_fact(f, speaker: str, turn: int | None) -> dict:
    d = f.data
    if f.kind == "amount":
        subject, value = d["item"], d["amount"]
    elif f.kind == "metric":
        subject, value = d["metric"].name, d["value"]
    else:
        subject, value = d["count"].noun, d["n"]
    return {"kind": f.kind, "subject": subject, "value": value, "speaker": speaker, "turn": turn}


def meta_json(spec: MeetingSpec, layout: Layout, condition: str, params: dict | None) -> dict:
    return {"format": "minutia.suite-meta/1", "generator": GENERATOR, "seed": spec.seed, "split": split_of(spec.seed),
            "condition": condition, "topic": spec.topic.key, "num_speakers": len(spec.speakers),
            "duration": round(layout.duration, 3), "default_prosody": spec.default_prosody,
            "speakers": [{"name": s.name, **s.voice.to_json()} for s in spec.speakers],
            "degradations": [params] if params else [],
            "turns": len(layout.turns), "backchannels": sum(t.kind == "backchannel" for t in layout.turns),
            "overlaps": [{"turn": i, "seconds": round((layout.placed[i - 1].end - p.start) / audio.RATE, 3)}
                         for i, p in enumerate(layout.placed) if i and p.start < layout.placed[i - 1].end],
            "small_talk_turns_dropped": layout.dropped, "tools": audio.tool_versions()}


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def generate(seed: int, out: Path, condition: str = "mixed") -> Path:
    """Write one meeting into `out` (created); returns it."""
    condition = draw_condition(seed) if condition == "mixed" else condition
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}")
    spec = plan_meeting(seed)
    params = degradation(spec, condition)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="minutia-suite-") as td:
        tmp = Path(td)
        layout = fit(spec, synthesize_turns(spec, tmp))
        pcm = render(spec, layout, params, tmp)
        audio.write_wav(tmp / "meeting.wav", pcm)
        (tmp / "meeting.wav").replace(out / "meeting.wav")
    dump = lambda obj: json.dumps(obj, indent=2, ensure_ascii=False) + "\n"  # noqa: E731
    _write(out / "reference.json", dump(reference_json(spec, layout)))
    _write(out / "reference.rttm", rttm(spec, layout, out.name))
    _write(out / "facts.json", dump(facts_json(spec, layout)))
    _write(out / "meta.json", dump(meta_json(spec, layout, condition, params)))
    return out


# ---- command line ---------------------------------------------------------------------------
def parse_seeds(text: str) -> list[int]:
    """"1000-1004" or "3,7,9" (ranges inclusive)."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        seeds += range(int(lo), int(hi or lo) + 1)
    return seeds


def jobs_for(args) -> list[tuple[int, str, Path]]:
    seeds = parse_seeds(args.seeds) if args.seeds else list(SPLITS[args.split])[: args.count]
    conditions = CONDITIONS if args.condition == "all" else (args.condition,)
    return [(seed, cond, args.out / (f"seed-{seed:04d}" + (f"-{cond}" if args.condition == "all" else "")))
            for seed in seeds for cond in conditions]


def _timed(job: tuple[int, str, Path]) -> float:
    t0 = time.perf_counter()
    generate(job[0], job[2], job[1])
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    ap = argparse.ArgumentParser(prog="python -m bench.suites.meetings", description=__doc__.splitlines()[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--split", choices=sorted(SPLITS), help="seeds of a split (see --count)")
    which.add_argument("--seeds", help="seed range or list: 1000-1004 or 3,7,9")
    ap.add_argument("--count", type=int, default=None, help="with --split: only the first N seeds")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--condition", default="mixed", choices=("mixed", *CONDITIONS, "all"),
                    help="mixed: drawn from the seed (about half clean); all: every condition, one folder each")
    ap.add_argument("--jobs", type=int, default=1, help="meetings generated in parallel")
    args = ap.parse_args(argv)

    jobs = jobs_for(args)
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    seconds = []
    with Progress(*columns, console=console) as progress, ProcessPoolExecutor(max(1, args.jobs)) as pool:
        task = progress.add_task("meetings", total=len(jobs))
        for job, took in zip(jobs, pool.map(_timed, jobs)):
            seconds.append(took)
            progress.update(task, advance=1, description=f"{job[2].name}")
    console.print(f"wrote {len(jobs)} meetings to {args.out}/ "
                  f"({sum(seconds) / max(1, len(seconds)):.1f} s per meeting)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
