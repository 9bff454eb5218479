"""Forget, verified across the library (issue 51): a forgotten speaker's needles are answered 0% from the library,
and everyone else's still are.

    .venv/bin/python -m bench.library_forget --meetings 12 --out bench/out/library-forget

Meetings: QMSum validation (real meetings nobody here wrote, ``../shared/data/qmsum/val``). Into each, two needles
are said in passing at random points: one by the meeting's target speaker (the one forgotten) and one by another
speaker (the control). A needle is an unusual fact with a number ("the storage room code is 4471"); its question
asks for the fact ("What is the storage room code?"), and an answer is right when it holds the number. The
meetings are recorded in a library (a fresh MINUTIA_HOME), every needle is asked across the library, then the
target speaker is forgotten from each meeting (``minutia library forget --speaker``'s call) and every needle is asked
again. Also checked after the forget: a search of the library finds none of the target's needles (by their words);
the file holds none of their words in clear; the blind index holds none of their numbers' keys.
Reported: right before and after, for the target's needles and the controls.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.shared_data import qmsum_val  # noqa: E402

# (fact said, question asked): the number is drawn per needle; the things are drawn without repeats.
# Where a fact holds: each needle is one (fact, place) pair, so no two needles answer the same question.
PLACES = ["in the north wing", "at the Zurich office", "for the summer school", "in the old lab", "for the night shift",
          "for the visitors"]
FACTS = [
    ("the storage room code is {n}", "What is the storage room code?"),
    ("my badge number is {n}", "What is {who}'s badge number?"),
    ("the spare key is in locker {n}", "Which locker is the spare key in?"),
    ("the wifi password is tiger{n}", "What is the wifi password?"),
    ("the parking permit number is {n}", "What is the parking permit number?"),
    ("the alarm PIN for the back door is {n}", "What is the alarm PIN for the back door?"),
    ("the bike lock combination is {n}", "What is the bike lock combination?"),
    ("the conference room extension is {n}", "What is the conference room extension?"),
    ("the courier tracking number is {n}", "What is the courier tracking number?"),
    ("the vending machine override code is {n}", "What is the vending machine override code?"),
    ("the server rack is in row {n}", "Which row is the server rack in?"),
    ("the printer service code is {n}", "What is the printer service code?"),
]


def _meetings(folder: Path, count: int):
    from app.text.transcript import qmsum_text

    files = sorted(folder.glob("*.json"))[:count]
    if not files:
        raise SystemExit(f"no QMSum meetings in {folder} (set MINUTIA_SHARED_DATA or give --data)")
    for path in files:
        raw = json.loads(path.read_text())
        turns = [(t.get("speaker") or "Speaker", qmsum_text(t["content"])) for t in raw["meeting_transcripts"]]
        turns = [(s, t) for s, t in turns if t]
        speakers = sorted({s for s, _ in turns}, key=lambda s: -sum(x == s for x, _ in turns))
        if len(speakers) < 2:
            continue
        yield path.stem, turns, speakers[0], speakers[1]


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from app.answering.answers import AnswerFinder
    from app.answering.retrieval import default_embedder
    from app.library.ask import ask_library
    from app.library.record import forget_speaker, open_library, record_meeting
    from app.platform.config import load_settings
    from app.text.transcript import Transcript, Turn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="QMSum-format meetings (default: QMSum validation)")
    ap.add_argument("--meetings", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "library-forget")
    args = ap.parse_args(argv)
    console = Console(stderr=True)
    rng = random.Random(args.seed)
    home = Path(tempfile.mkdtemp(prefix="minutia-forget-bench-"))
    library = open_library(load_settings(overrides={"home": str(home)}))
    embedder = default_embedder()
    ask = lambda transcript, question: AnswerFinder(transcript, embedder).answer(question)  # noqa: E731
    facts = rng.sample([(f"{said} {place}", f"{asked[:-1]} {place}?") for said, asked in FACTS for place in PLACES],
                       len(FACTS) * len(PLACES))
    needles: list[dict] = []
    with Progress(console=console) as progress:
        source = list(_meetings(args.data or qmsum_val(), args.meetings))
        task = progress.add_task("recording meetings with needles", total=len(source))
        for k, (name, turns, target, other) in enumerate(source):
            turns = list(turns)
            for role, who in (("target", target), ("control", other)):
                said, asked = facts[(2 * k + (role == "control")) % len(facts)]  # a repeat only past 36 meetings
                number = str(rng.randrange(1000, 9999))
                at = rng.randrange(len(turns) // 5, len(turns))
                turns.insert(at, (who, f"By the way, {said.format(n=number)}."))
                needles.append({"meeting": name, "role": role, "speaker": who, "number": number,
                                "question": asked.format(who=who), "said": said.format(n=number)})
            transcript = Transcript(turns=[Turn(s, t, 4.0 * i, 4.0 * i + 4.0) for i, (s, t) in enumerate(turns)],
                                    source=f"{name}.json", duration=4.0 * len(turns))
            meeting = record_meeting(library, transcript, title=name)
            for n in needles[-2:]:
                n["id"] = meeting
            progress.advance(task)

    def right(n: dict, when: str) -> bool:
        found = ask_library(library, n["question"], ask, meetings_read=3)
        n[f"answer_{when}"] = f"{found.text} ({found.meeting.title if found.meeting else 'no meeting'})"
        return n["number"] in found.text

    with Progress(console=console) as progress:
        targets = [n for n in needles if n["role"] == "target"]
        task = progress.add_task("asking every needle, forgetting the targets, asking again",
                                 total=2 * len(needles) + len(targets))
        for n in needles:
            n["before"] = right(n, "before")
            progress.advance(task)
        for n in targets:
            forget_speaker(library, n["id"], n["speaker"])
            progress.advance(task)
        for n in needles:
            n["after"] = right(n, "after")
            n["found_by_search"] = any(n["number"] in f.sentence.text for f in library.search(n["said"], limit=20))
            word = next(w for w in n["said"].split() if n["number"] in w)  # "4471", "tiger4471"
            token = library._tokens(word).split()  # its key in the blind index
            n["in_index"] = bool(token) and library.db.execute(
                "SELECT COUNT(*) FROM terms WHERE terms MATCH ?", (token[0],)).fetchone()[0] > 0
            progress.advance(task)
    library.close()
    raw = b"".join(p.read_bytes() for p in (home / "library").glob("library.db*"))
    for n in needles:  # the words around the number (the index's hex keys hold any four digits by chance)
        words = n["said"].split()
        at = next(i for i, w in enumerate(words) if n["number"] in w)
        n["in_file_in_clear"] = " ".join(words[max(0, at - 2):at + 1]).encode() in raw  # "code is 4471"

    def share(role: str, key: str) -> float:
        picked = [n for n in needles if n["role"] == role]
        return round(sum(bool(n[key]) for n in picked) / max(1, len(picked)), 3)

    report = {
        "meetings": len(source), "needles": len(needles), "seed": args.seed,
        "target_right_before": share("target", "before"), "target_right_after": share("target", "after"),
        "control_right_before": share("control", "before"), "control_right_after": share("control", "after"),
        "target_found_by_search_after": share("target", "found_by_search"),
        "control_found_by_search_after": share("control", "found_by_search"),
        "target_numbers_in_index_after": share("target", "in_index"),
        "control_numbers_in_index_after": share("control", "in_index"),
        "target_words_in_file_in_clear": share("target", "in_file_in_clear"),
        "control_words_in_file_in_clear": share("control", "in_file_in_clear"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "library_forget.json").write_text(json.dumps({"report": report, "needles": needles}, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    forgotten = report["target_right_after"] == 0 and report["target_found_by_search_after"] == 0 \
        and report["target_numbers_in_index_after"] == 0 and report["target_words_in_file_in_clear"] == 0
    return 0 if forgotten else 1


if __name__ == "__main__":
    raise SystemExit(main())
