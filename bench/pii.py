"""Needle accuracy with personal data kept out of the live KV cache (issue 18, pii.policy zero-in-kv).

Each meeting (a reference transcript of the development suite, ``bench/out/suite-dev/seed-*``) gets six
needles said once, each as its own line at a random depth: three facts that are not personal data (an
access code, a budget, a launch date) and three that are (a phone number, an e-mail address, a contact
person's name). The meeting is prefilled line by line into a MeetingContext on the embedded Gemma 3 270M,
as a live meeting is, once per policy:

* ``off``: nothing erased;
* ``zero-in-kv``: the default kinds (e-mail, phone, card) left out of the text the model reads;
* ``zero-in-kv + person``: names too (spaCy's en_core_web_sm NER, every name in the meeting).

Each needle is then asked as ``Question: ...`` with the answer's opening words given (``Answer: The phone
number of the Falcon supplier is``), decoded greedily; it counts when the answer starts with the value.

    .venv/bin/python bench/pii.py [--suite bench/out/suite-dev] [--meetings 4] [--turns 12] [--out bench/out/pii]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SUBJECTS = ["Falcon", "Orchid", "Granite", "Nimbus", "Juniper", "Cobalt", "Saffron", "Tundra", "Meridian",
            "Quartz", "Lynx", "Harbor", "Ember", "Willow", "Atlas", "Vega", "Cedar", "Polaris"]
FIRST = ["Marta", "Oskar", "Ingrid", "Tomasz", "Aiko", "Rafael", "Leena", "Dmitri", "Sofia", "Kwame"]
LAST = ["Kowalski", "Lindqvist", "Moreau", "Okafor", "Tanaka", "Brennan", "Vasquez", "Novak", "Haddad"]
MONTHS = ["March", "April", "May", "June", "September", "October", "November"]
KINDS = ("code", "budget", "date", "phone", "email", "person")
PERSONAL = {"phone", "email", "person"}
POLICIES = {"off": None, "zero-in-kv": ("email", "phone", "card"), "zero-in-kv + person": ("email", "phone", "card", "person")}


@dataclass(frozen=True)
class Needle:
    kind: str
    fact: str  # the line said in the meeting
    question: str
    prefix: str  # the answer's opening words, given to the model
    value: str  # what it must continue with


def make_needles(rng: random.Random) -> list[Needle]:
    """One needle of each kind, about distinct made-up subjects."""
    subjects = rng.sample(SUBJECTS, len(KINDS))
    first, last = rng.choice(FIRST), rng.choice(LAST)
    values = {
        "code": str(rng.randint(1000, 9999)),
        "budget": f"{rng.randint(12, 98) * 500} euros",
        "date": f"{rng.choice(MONTHS)} {rng.randint(2, 28)}",
        "phone": f"({rng.randint(201, 989)}) 555-{rng.randint(100, 199):04d}",
        "email": f"{first.lower()}.{last.lower()}@example.com",
        "person": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
    }
    prefixes = {
        "code": ("The access code for project {s} is", "What is the access code for project {s}?"),
        "budget": ("The approved budget for the {s} launch is", "What is the approved budget for the {s} launch?"),
        "date": ("The {s} release is planned for", "When is the {s} release planned?"),
        "phone": ("The phone number of the {s} supplier is", "What is the phone number of the {s} supplier?"),
        "email": ("The e-mail address of the {s} supplier is", "What is the e-mail address of the {s} supplier?"),
        "person": ("The contact person for the {s} supplier is", "Who is the contact person for the {s} supplier?"),
    }
    needles = []
    for kind, subject in zip(KINDS, subjects):
        prefix, question = (p.format(s=subject) for p in prefixes[kind])
        needles.append(Needle(kind, f"{prefix} {values[kind]}.", question, prefix, values[kind]))
    return needles


def meeting_lines(path: Path, needles: list[Needle], rng: random.Random, max_turns: int):
    """The transcript's first ``max_turns`` turns as ContextLines, each needle inserted as its own line at
    a random depth."""
    from app.llm.context import ContextLine

    turns = json.loads(path.read_text())["turns"][:max_turns]
    lines = [ContextLine("audio", float(t.get("start") or 0.0), float(t.get("end") or 0.0), t["speaker"],
                         " ".join(t["text"].split())) for t in turns if t["text"].strip()]
    for needle in needles:
        at = rng.randint(1, len(lines) - 1)
        before = lines[at - 1]
        lines.insert(at, ContextLine("audio", before.end, before.end, before.speaker, needle.fact))
    return lines


def hit(answer: str, value: str) -> bool:
    """The answer starts with the value as a whole word ("June 6th" counts for "June 6")."""
    text = answer.strip()
    if not text.startswith(value):
        return False
    rest = text[len(value):]
    if value[-1].isdigit() and rest[:2] in ("st", "nd", "rd", "th"):
        rest = rest[2:]
    return not rest or not rest[0].isalnum()


def table_of(answers: list[dict]) -> list[str]:
    """The Markdown table: per needle kind and policy, the share of answers :func:`hit` accepts."""
    groups = [("access code", ["code"]), ("budget", ["budget"]), ("release date", ["date"]),
              ("**all non-PII**", ["code", "budget", "date"]), ("phone number", ["phone"]),
              ("e-mail address", ["email"]), ("person's name", ["person"])]

    def cell(policy: str, kinds: list[str]) -> str:
        mine = [a for a in answers if a["policy"] == policy and a["kind"] in kinds]
        right = sum(hit(a["answer"], a["value"]) for a in mine)
        return f"{100 * right / max(len(mine), 1):.0f}% ({right}/{len(mine)})"

    table = ["| needle | " + " | ".join(POLICIES) + " |", "|---|" + "---:|" * len(POLICIES)]
    return table + [f"| {label} | " + " | ".join(cell(p, kinds) for p in POLICIES) + " |" for label, kinds in groups]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, default=REPO / "bench" / "out" / "suite-dev")
    ap.add_argument("--meetings", type=int, default=4)
    ap.add_argument("--turns", type=int, default=12, help="the first N turns of each meeting (CPU time)")
    ap.add_argument("--config", default=None)
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "pii")
    ap.add_argument("--rescore", type=Path, default=None, help="a pii.json: print its answers' table again")
    args = ap.parse_args(argv)
    if args.rescore is not None:
        print("\n".join(table_of(json.loads(args.rescore.read_text())["answers"])))
        return 0

    import torch

    from app.platform.config import load_settings
    from app.llm.context import MeetingContext
    from app.llm.engine import LLMEngine
    from app.text.pii import SpacyPIIDetector

    paths = sorted(args.suite.glob("seed-*/reference.json"))[: args.meetings]
    if not paths:
        raise SystemExit(f"no seed-*/reference.json under {args.suite} (bench/suites.py writes the suite)")
    settings = load_settings(args.config)
    engine = LLMEngine.from_settings(settings.llm, settings.home, settings.kv)
    detectors = {name: None if kinds is None else SpacyPIIDetector(kinds) for name, kinds in POLICIES.items()}
    header = engine.live_prompts().header
    flagged = {p: 0 for p in POLICIES}  # non-personal needles the detector took for personal data
    answers: list[dict] = []
    started = time.perf_counter()

    def report(done: list[Path]) -> list[str]:
        """Write the table and the answers of the meetings ``done`` so far (a slow machine keeps them)."""
        table = table_of(answers)
        summary = {
            "meetings": [p.parent.name for p in done], "turns": args.turns, "seed": args.seed,
            "seconds": round(time.perf_counter() - started, 1), "model": settings.llm.model,
            "dtype": settings.llm.dtype, "torch_threads": torch.get_num_threads(),
            "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
            "non_pii_needles_flagged": flagged, "table": table,
        }
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pii.json").write_text(json.dumps({**summary, "answers": answers}, indent=2) + "\n")
        (args.out / "pii.md").write_text("\n".join(table) + "\n")
        return table

    for index, path in enumerate(paths):
        rng = random.Random(args.seed * 1000 + index)
        needles = make_needles(rng)
        lines = meeting_lines(path, needles, rng, args.turns)
        for policy, detector in detectors.items():
            context = MeetingContext(engine, settings.kv, header=header, erase_pii=detector)
            for line in lines:
                context.append(line)
            context.flush()
            for needle in needles:
                if detector is not None and needle.kind not in PERSONAL and detector.find(needle.fact):
                    flagged[policy] += 1
                # a few tokens past the value's own: enough to tell a hit, and CPU time is short
                budget = engine.count_tokens(" " + needle.value) + 2
                got = context.generate(f"\n\nQuestion: {needle.question}\nAnswer: {needle.prefix}",
                                       max_new_tokens=budget).text
                answers.append({"meeting": path.parent.name, "policy": policy, "kind": needle.kind,
                                "value": needle.value, "answer": got, "correct": hit(got, needle.value)})
                print(f"{path.parent.name} {policy}: {needle.kind} {needle.value!r} -> {got!r}", file=sys.stderr)
            context.close()
        table = report(paths[: index + 1])
        print(f"{index + 1}/{len(paths)} meetings, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print("\n".join(table))
    print(f"{len(paths)} meetings in {time.perf_counter() - started:.0f} s; non-PII needles the detector "
          f"flagged: {flagged}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
