"""The KV controller on a replayed long meeting: memory held at its setpoint, the bandit against fixed arms.

Two QMSum validation meetings are replayed back to back into one live MeetingContext (the agenda changes at
the second), line by line as a live session prefills them, with one of the meeting's queries asked every
``--question-every`` tokens. The device cap is what an uncapped run holds at ``--bind-at`` tokens over the
setpoint, so it binds there (before the budget's 2048-token floor, which would otherwise keep the KV under it),
and halfway through the replay its room above the sliding-window layers is cut to ``--squeeze`` of itself (what
other meetings joining the device does). Runs, one after the other in one process on the same replay:

- ``watermark``: no controller, the budget follows the fixed watermark (the behaviour before kvstore.control);
- ``fixed K``: the PID on memory, the decode top-k fixed at K (each arm of the bandit, and the dense read);
- ``bandit``: the PID and the bandit choosing the top-k per answer.

Reported: device bytes / cap after each prefill chunk once the cap binds (mean, the worst distance from the
setpoint, the share of chunks within 5% of it), the peak against the cap before and after the squeeze (the
peak is taken at every layer update, so it includes a chunk before its compression), and each run's mean reward
per answer, ``tokens/s x (1 - 0.5 x max(0, JS - 0.02))`` with JS the run's mean sampled divergence of the arm
that read the answer (drift sampled at ``--drift-rate``, compared after each answer; tokens/s is the answer's own decode).

    python bench/controller.py --meetings Bed002,Bmr005 --tokens 2400 --arms 4 8 16 32 dense
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.kv_quality import DEFAULT_DATA, default_model_dir, load_meeting  # noqa: E402

JS_THRESHOLD, JS_WEIGHT = 0.02, 0.5  # the reward; the same defaults as kv.controller


def parse_arm(text: str) -> int | None:
    return None if text == "dense" else int(text)


def arm_name(arm: int | None) -> str:
    return "dense" if arm is None else str(arm)


class Replay:
    """The two meetings as (speaker, text) lines, and the questions with the token count they are asked at."""

    def __init__(self, paths: list[Path], tokens_each: int, engine, question_every: int) -> None:
        self.lines: list[tuple[str, str, int]] = []  # speaker, text, meeting index
        self.queries: list[list[str]] = []
        for index, path in enumerate(paths):
            meeting = load_meeting(path)
            self.queries.append([q.question for q in meeting.queries] or ["What was discussed?"])
            used = 0
            for turn in meeting.turns:
                if used >= tokens_each:
                    break
                used += len(engine.tokenizer(f"{turn.speaker}: {turn.text}\n")["input_ids"])
                self.lines.append((turn.speaker, turn.text, index))
        self.question_every = question_every


def run(engine_for, replay: Replay, kv, cap_bytes: int | None, squeezed_cap: int | None, squeeze_at: int, max_new: int,
        label: str, console, ask: bool = True) -> dict:
    from app.llm.context import ContextLine, MeetingContext
    from kvstore.control import cap_binds

    engine = engine_for(kv)
    context = MeetingContext(engine, kv, header=engine.live_prompts().header)
    cache = context.cache
    if cap_bytes is not None:
        context.set_device_cap(cap_bytes)
    tail = engine.live_prompts().answer_tail
    trace, answers, asked = [], [], {0: 0, 1: 0}
    next_question, squeezed, peak_before = replay.question_every, False, 0
    started = time.perf_counter()
    for i, (speaker, text, meeting) in enumerate(replay.lines):
        context.append(ContextLine("audio", float(i), float(i) + 1.0, speaker, text))
        if context.flush(min_tokens=192):
            cap = cache.settings.device_cap_bytes
            trace.append({"tokens": context.tokens, "device_bytes": cache.device_bytes(),
                          "pressure": None if cap is None else cache.device_bytes() / cap,
                          "share": cache.budget_share, "binding": cap_binds(cache), "squeezed": squeezed})
        if cap_bytes is not None and not squeezed and context.tokens >= squeeze_at:
            peak_before = cache.peak_device_bytes
            context.set_device_cap(squeezed_cap)
            cache.peak_device_bytes = cache.device_bytes()  # the peak after the squeeze, measured from here
            squeezed = True
        if ask and context.tokens >= next_question:
            next_question += replay.question_every
            queries = replay.queries[meeting]
            question = queries[asked[meeting] % len(queries)]
            asked[meeting] += 1
            samples_before = context.drift.samples
            generation = context.generate(tail.format(question=question), max_new_tokens=max_new, stop=("\n",))
            context.shadow.wait(120)  # its sampled steps compared (and the bandit rewarded) before the meeting goes on
            arm = cache.settings.decode_top_k_blocks  # fixed, or what the bandit chose for this answer
            answers.append({"tokens": context.tokens, "arm": arm_name(arm), "tokens_per_second": generation.tokens_per_second,
                            "js": context.drift.last(context.drift.samples - samples_before),
                            "new_tokens": generation.new_tokens})
    seconds = time.perf_counter() - started
    result = {"run": label, "seconds": seconds, "trace": trace, "answers": answers,
              "peak_before": peak_before, "peak_after": cache.peak_device_bytes,
              "cap_before": cap_bytes, "cap_after": squeezed_cap, "final_device_bytes": cache.device_bytes(),
              "fixed_bytes": cache.kv_bytes() - cache.kv_bytes(include_sliding=False), "tokens": context.tokens}
    context.close()
    console.print(f"{label}: {context.tokens} tokens, {len(answers)} answers, {seconds:.0f} s")
    return result


def memory_figures(result: dict, setpoint: float) -> dict:
    """Pressure once the cap binds (from the first binding chunk on)."""
    trace = result["trace"]
    first = next((i for i, t in enumerate(trace) if t["binding"]), None)
    held = [t["pressure"] for t in trace[first:]] if first is not None else []
    if not held:
        return {"chunks": 0}
    return {"chunks": len(held), "bound_at_tokens": trace[first]["tokens"], "mean": statistics.mean(held),
            "worst": max(held, key=lambda p: abs(p - setpoint)),
            "within_5pct": sum(abs(p - setpoint) <= 0.05 * setpoint for p in held) / len(held),
            "peak_before_over_cap": result["peak_before"] / result["cap_before"],
            "peak_after_over_cap": result["peak_after"] / result["cap_after"]}


def reward_figures(result: dict) -> dict:
    """Mean reward per timed answer, each with its arm's mean JS over the run."""
    js_by_arm: dict[str, list[float]] = {}
    for answer in result["answers"]:
        js_by_arm.setdefault(answer["arm"], []).extend(answer["js"])
    mean_js = {arm: (statistics.mean(v) if v and arm != "dense" else 0.0) for arm, v in js_by_arm.items()}
    rewards, pulls = [], {}
    for answer in result["answers"]:
        if answer["tokens_per_second"] is None:
            continue
        js = mean_js[answer["arm"]]
        rewards.append(answer["tokens_per_second"] * (1 - JS_WEIGHT * max(0.0, js - JS_THRESHOLD)))
        pulls[answer["arm"]] = pulls.get(answer["arm"], 0) + 1
    return {"reward": statistics.mean(rewards) if rewards else None, "answers": len(rewards), "pulls": pulls,
            "js": mean_js,
            "tokens_per_second": statistics.mean(a["tokens_per_second"] for a in result["answers"]
                                                 if a["tokens_per_second"] is not None) if rewards else None}


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    from app.platform.config import ControllerSettings, KVSettings, LLMSettings
    from app.llm.engine import LLMEngine

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--meetings", default="Bed002,Bmr005", help="two QMSum meeting names (file stems), in order")
    ap.add_argument("--tokens", type=int, default=2400, help="transcript tokens replayed from each meeting")
    ap.add_argument("--question-every", type=int, default=160, help="a question every this many meeting tokens")
    ap.add_argument("--max-new", type=int, default=16)
    ap.add_argument("--arms", nargs="+", default=["4", "8", "16", "32", "dense"])
    ap.add_argument("--bind-at", type=int, default=1200, help="the cap binds near this many meeting tokens")
    ap.add_argument("--squeeze", type=float, default=0.6, help="halfway, the cap's room above the sliding-window "
                    "layers is cut to this share of itself")
    ap.add_argument("--drift-rate", type=float, default=0.25)
    ap.add_argument("--setpoint", type=float, default=0.85)
    ap.add_argument("--runs", default="watermark,fixed,bandit", help="which runs, comma-separated")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "controller.json")
    args = ap.parse_args(argv)
    console = Console(width=200)
    model = args.model or default_model_dir()
    if not (model / "config.json").is_file():
        console.print(f"error: no model at {model} (run `make demo` once, or give --model DIR)")
        return 2
    paths = [args.data / f"{name}.json" for name in args.meetings.split(",")]
    missing = [str(p) for p in paths if not p.is_file()]
    if len(paths) != 2 or missing:
        console.print(f"error: --meetings needs two QMSum meetings in {args.data} ({', '.join(missing) or 'give two'})")
        return 2
    try:
        arms = [parse_arm(a) for a in args.arms]
    except ValueError:
        console.print("error: --arms takes block counts or 'dense'")
        return 2
    llm = LLMSettings(model=str(model), dtype="float32")
    engines: dict[str, LLMEngine] = {}

    def engine_for(kv):
        key = "sparse"  # the model and attention do not depend on the top-k: one engine for every run
        if key not in engines:
            engines[key] = LLMEngine(model, llm, kv)
        return engines[key]

    base = dict(drift_sample_rate=args.drift_rate, shadow_question_rate=0.0, watermark=args.setpoint)
    probe_kv = KVSettings(**base, decode_top_k_blocks=arms[0])
    replay = Replay(paths, args.tokens, engine_for(probe_kv), args.question_every)
    # The cap: what the uncapped cache holds at --bind-at tokens, over the setpoint (so it binds about there;
    # it must bind before the budget's floor of 2048 tokens, or the floor alone keeps the KV under the cap).
    probe = run(engine_for, replay, probe_kv, None, None, 10**9, args.max_new, "probe (no cap)", console,
                ask=False)
    at = next((t for t in probe["trace"] if t["tokens"] >= args.bind_at), probe["trace"][-1])
    cap = int(at["device_bytes"] / args.setpoint)
    total, squeeze_at = probe["tokens"], probe["tokens"] // 2
    # The squeeze cuts the room above what no budget can shrink (Gemma 3's sliding-window layers, at their
    # full window by then): squeezing into those would leave the budget nothing to work with.
    fixed = probe["fixed_bytes"]
    squeezed_cap = int(fixed + args.squeeze * (cap - fixed))
    console.print(f"cap {cap / 2**20:.2f} MiB (binds near token {at['tokens']}; {fixed / 2**20:.2f} MiB of sliding "
                  f"windows), squeezed to {squeezed_cap / 2**20:.2f} MiB at token ~{squeeze_at} of {total}")
    plans = []
    wanted = set(args.runs.split(","))
    if "watermark" in wanted:
        plans.append(("watermark", KVSettings(**base, decode_top_k_blocks=arms[0],
                                              controller=ControllerSettings(enabled=False))))
    if "fixed" in wanted:
        plans += [(f"fixed {arm_name(arm)}", KVSettings(**base, decode_top_k_blocks=arm)) for arm in arms]
    if "bandit" in wanted:
        plans.append(("bandit", KVSettings(**base, decode_top_k_blocks=arms[0],
                                           controller=ControllerSettings(sparsity_arms=tuple(arms)))))
    results = []
    for label, kv in plans:
        result = run(engine_for, replay, kv, cap, squeezed_cap, squeeze_at, args.max_new, label, console)
        result.update(memory=memory_figures(result, args.setpoint), rewards=reward_figures(result))
        results.append(result)
    best_fixed = max((r for r in results if r["run"].startswith("fixed")), default=None,
                     key=lambda r: r["rewards"]["reward"] or 0.0)
    table = Table(title=f"controller on a replayed meeting ({args.meetings}, {total} tokens; cap binds near token "
                        f"{at['tokens']}, squeezed halfway; setpoint {args.setpoint})")
    for col in ("run", "chunks held", "mean pressure", "worst", "within 5%", "peak/cap before", "peak/cap after",
                "tokens/s", "reward", "vs best fixed", "pulls"):
        table.add_column(col)
    for r in results:
        m, w = r["memory"], r["rewards"]
        ratio = (w["reward"] / best_fixed["rewards"]["reward"]) if best_fixed and w["reward"] else None
        table.add_row(r["run"], str(m.get("chunks", 0)), f"{m.get('mean', 0):.3f}", f"{m.get('worst', 0):.3f}",
                      f"{m.get('within_5pct', 0):.0%}", f"{m.get('peak_before_over_cap', 0):.3f}",
                      f"{m.get('peak_after_over_cap', 0):.3f}", f"{w['tokens_per_second'] or 0:.2f}",
                      f"{w['reward'] or 0:.2f}", "" if ratio is None else f"{ratio:.1%}",
                      " ".join(f"{k}:{v}" for k, v in w["pulls"].items()))
    console.print(table)
    for r in results:
        console.print(f"{r['run']}: mean JS by arm " + ", ".join(f"{k} {v:.4f}" for k, v in r["rewards"]["js"].items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(["python", "bench/controller.py", *(argv or sys.argv[1:])]),
                                    "cap_bytes": cap, "squeeze_at": squeeze_at, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
