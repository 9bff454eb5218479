"""Do answers hold when people phrase a question the way they talk or type it? The suite's questions, each asked
as written and wrapped the ways people wrap questions ("hey, ...", "... thanks!", "do you know ...", "can you tell
me ...", no capitals or question mark), answered from the reference transcript (answering alone, no recogniser)
and scored on the answer text (bench/suites/score.py).

    .venv/bin/python bench/suite_phrasing.py SUITE_DIR [--limit N] [--templates FILE | --pairs] [--show-wrong]

``--templates FILE``: a JSON list of other wrappers, each with ``{q}`` where the question goes (lower case, no
question mark): ways of asking that the built-in list (and the rules in app/answering/questions.py) were not made from.

``--pairs``: two questions of a meeting asked in one message ("Q1? Q2?", "Q1, and q2?", "q1 and q2"; the "and" forms
where the second starts with a question word; or, with --templates, each a string with {q1} and {q2}); each part is scored on its own answer where the message was answered
part by part, else both on the whole answer (what a user reads).

Only development seeds may be read with --show-wrong; on evaluation seeds the table alone is looked at.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def variants(question: str, templates: list[str] | None = None) -> dict[str, str]:
    """The question as written and wrapped (a fixed list: the same wrappers for every suite), or as written and in
    each of ``templates``."""
    bare = question.rstrip("?").strip()
    low = _lower_first(bare)
    if templates is not None:
        return {"as written": question, **{t: t.replace("{q}", low) for t in templates}}
    return {
        "as written": question,
        "lower case, no question mark": low.lower(),
        "ALL CAPS": question.upper(),
        "hey, ...": f"hey, {low}?",
        "um so ...": f"um so {low}",
        "quick question: ...": f"Quick question: {question}",
        "... thanks!": f"{question} Thanks!",
        "..., please?": f"{bare}, please?",
        "do you know ...": f"Do you know {low}?",
        "can you tell me ...": f"Can you tell me {low}?",
        "any idea ...": f"any idea {low}?",
        "I forgot, ...": f"I forgot, {low}?",
        "remind me: ...": f"Remind me: {low}?",
    }


_WH_START = ("who ", "whom ", "what ", "what's ", "when ", "where ", "which ", "why ", "how ")


def pair_variants(first: str, second: str, templates: list[str] | None = None) -> dict[str, str]:
    """Two questions asked in one message, the ways people join them (or as each of ``templates``, with {q1} and
    {q2} where the questions go: lower case, no question mark)."""
    bare, low = first.rstrip("?").strip(), _lower_first(second.rstrip("?").strip())
    if templates is not None:
        return {t: t.replace("{q1}", _lower_first(bare)).replace("{q2}", low) for t in templates}
    joined = {"Q1? Q2?": f"{first} {second}"}
    if low.lower().startswith(_WH_START):
        joined["Q1, and q2?"] = f"{bare}, and {low}?"
        joined["q1 and q2"] = f"{bare} and {low}".lower()
    return joined


def _pairs(folders: list[Path], embedder, show_wrong: bool, templates: list[str] | None = None) -> None:
    """Score two questions asked in one message (see --pairs)."""
    import json as _json

    from app.answering.answers import AnswerFinder
    from app.text.transcript import load_transcript
    from bench.suites.score import answer_correct

    parts: dict[str, list[bool]] = {}
    both: dict[str, list[bool]] = {}
    wrong: list[str] = []
    for folder in folders:
        facts = _json.loads((folder / "facts.json").read_text())
        finder = AnswerFinder(load_transcript(folder / "reference.json"), embedder)
        questions = facts["questions"]
        for q1, q2 in zip(questions, questions[1:]):
            for name, text in {"each alone": None, **pair_variants(q1["question"], q2["question"], templates)}.items():
                if text is None:
                    oks = [answer_correct(finder.answer(q["question"]).text, q) for q in (q1, q2)]
                else:
                    answer = finder.answer(text)
                    texts = [a.text for a in answer.asked] if len(getattr(answer, "asked", ())) == 2 else [answer.text] * 2
                    oks = [answer_correct(t, q) for t, q in zip(texts, (q1, q2))]
                    if not all(oks):
                        wrong.append(f"- {folder.name} [{q1['type']} + {q2['type']}] {text} -> {answer.text[:120]!r}")
                parts.setdefault(name, []).extend(oks)
                both.setdefault(name, []).append(all(oks))
    print("| asked as | pairs | both parts right | parts right |")
    print("|---|---:|---:|---:|")
    joined = [name for name in parts if name != "each alone"]
    print(f"| all joined ({len(joined)} ways) | {sum(len(both[n]) for n in joined)} | "
          f"{sum(sum(both[n]) for n in joined) / sum(len(both[n]) for n in joined):.1%} | "
          f"{sum(sum(parts[n]) for n in joined) / sum(len(parts[n]) for n in joined):.1%} |")
    for name in parts:
        print(f"| {name} | {len(both[name])} | {sum(both[name]) / len(both[name]):.1%} | "
              f"{sum(parts[name]) / len(parts[name]):.1%} |")
    if show_wrong:
        print("\nwrong (pairs):")
        print("\n".join(wrong[:80]))


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from app.answering.answers import AnswerFinder
    from app.answering.retrieval import default_embedder
    from app.text.transcript import load_transcript
    from bench.suites.score import answer_correct

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", type=Path)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--templates", type=Path, default=None, help="a JSON list of wrappers with {q} (instead of the "
                    "built-in ones)")
    ap.add_argument("--pairs", action="store_true", help="two questions in one message instead of wrappers")
    ap.add_argument("--show-wrong", action="store_true", help="list wrong answers (development seeds only)")
    args = ap.parse_args(argv)
    templates = None
    if args.templates is not None:
        try:
            templates = json.loads(args.templates.read_text())
        except (OSError, ValueError) as exc:
            ap.error(f"cannot read --templates {args.templates}: {exc}")
        marks = ("{q1}", "{q2}") if args.pairs else ("{q}",)
        if not isinstance(templates, list) or not all(isinstance(t, str) and all(t.count(m) == 1 for m in marks)
                                                      for t in templates):
            ap.error(f"--templates must be a JSON list of strings, each with {' and '.join(marks)} once")
    folders = sorted(p.parent for p in args.suite.glob("*/facts.json"))[: args.limit]
    if not folders:
        ap.error(f"no generated meetings (*/facts.json) under {args.suite}")
    embedder = default_embedder()
    if args.pairs:
        started = time.perf_counter()
        print(f"`python bench/suite_phrasing.py {args.suite} --pairs{f' --limit {args.limit}' if args.limit else ''}"
              f"{f' --templates {args.templates}' if args.templates else ''}` -- {len(folders)} meetings\n")
        _pairs(folders, embedder, args.show_wrong, templates)
        print(f"\n{time.perf_counter() - started:.0f} s")
        return 0
    right: dict[str, int] = {}
    asked: dict[str, int] = {}
    by_type: dict[tuple[str, str], list[bool]] = {}
    wrong: list[tuple[str, str, str, str]] = []
    started = time.perf_counter()
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("meetings", total=len(folders))
        for folder in folders:
            facts = json.loads((folder / "facts.json").read_text())
            finder = AnswerFinder(load_transcript(folder / "reference.json"), embedder)
            for question in facts["questions"]:
                for name, text in variants(question["question"], templates).items():
                    ok = answer_correct(finder.answer(text).text, question)
                    asked[name] = asked.get(name, 0) + 1
                    right[name] = right.get(name, 0) + ok
                    by_type.setdefault((name, question["type"]), []).append(ok)
                    if not ok and name != "as written":
                        wrong.append((folder.name, question["type"], text, finder.answer(text).text[:90]))
            progress.advance(task)
    print(f"`python bench/suite_phrasing.py {args.suite}{f' --limit {args.limit}' if args.limit else ''}"
          f"{f' --templates {args.templates}' if args.templates else ''}` -- "
          f"{len(folders)} meetings, {asked['as written']} questions, {time.perf_counter() - started:.0f} s\n")
    types = sorted({t for _, t in by_type})
    print("| asked as | right | " + " | ".join(types) + " |")
    print("|---|---:|" + "---:|" * len(types))
    wrapped = [name for name in asked if name != "as written"]
    print(f"| all wrapped ({len(wrapped)} ways) | {sum(right[n] for n in wrapped) / sum(asked[n] for n in wrapped):.1%} |"
          + " |" * len(types))
    for name in asked:
        cells = " | ".join(f"{sum(by_type[(name, t)]) / len(by_type[(name, t)]):.0%}" for t in types)
        print(f"| {name} | {right[name] / asked[name]:.1%} | {cells} |")
    if args.show_wrong:
        print("\nwrong answers (wrapped questions):")
        for row in wrong[:80]:
            print(f"- {row[0]} [{row[1]}] {row[2]} -> {row[3]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
