"""Answers on real meetings: ELITR-Bench's development split, asked through `minutia ask`'s calls.

    .venv/bin/python -m bench.elitr [--data DIR] [--meetings 1-5] [--path batch|live] [--out bench/out/elitr]
    .venv/bin/python -m bench.elitr --proxy-check            # how well the automatic proxy tracks GPT-4's judge
    .venv/bin/python -m bench.elitr --judged FILE [--out DIR]  # fold a blind judge's scores into the report

ELITR-Bench (Thonet et al., COLING 2025; CC BY 4.0): real project meetings, questions people wrote after reading
them, reference answers, and the answers of nine published long-context LLMs with GPT-4's 1-10 score of each
(``../shared/data/elitr``, or ``MINUTIA_SHARED_DATA/elitr``). Each meeting is written as ``Speaker: text`` lines
and read back by the app's transcript reader, as the benchmark's kept-back split is scored from outside; every
question is answered by ``Assistant.ask`` (batch) or by a live session that the transcript was replayed into.

Written to ``--out``:
- ``answers.json``: every answer with its type, citations, seconds, "not said", and the proxy score;
- ``judge/batch_NN.md`` + ``judge/key.json``: blind batches for a judge (a helper session): per question the
  reference answer and our answer shuffled among published ones under letters; the key (which letter is whose)
  is never shown to the judge. A judge returns ``{"<meeting>/<qid>": {"A": score, ...}}``; ``--judged`` reads
  it, checks the judge against GPT-4's published scores of the other answers, and reports our mean per type.

The proxy needs no judge: the share of the reference's words the answer gives (names as written, stemmed),
times its precision's square root, 0 for "not said"; ``--proxy-check`` measures its rank correlation with GPT-4's
scores over all published answers. It is for day-to-day work; the judged figure is the one reported.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.answering.answers import NOT_IN_MEETING  # noqa: E402
from bench.shared_data import elitr  # noqa: E402
from app.text.transcript import Transcript, load_transcript  # noqa: E402

# Published answers put beside ours in a judge batch: a spread of GPT-4's scores (the judge is checked on them).
JUDGE_PEERS = ("GPT-4", "GPT-3.5", "Vicuna-13B-v1.5", "LongAlpaca-7B")
RUBRIC = """Score each response 1-10 against the reference answer: does it correctly address the question based on
the elements of the reference answer, including them and avoiding unnecessary elements or verbosity?
1: incorrect, misses all elements of the reference. 2: says it does not know (or the meeting does not say)
although the reference answers it. 3-4: some elements vaguely related to the reference. 5-6: partially correct,
or covers only part of the reference. 7-8: most of the reference, but indirect or overly verbose. 9: includes the
reference but adds unnecessary elements. 10: essentially equivalent to the reference.
Names like [PERSON3], PERSON3 and (PERSON3) are the same person."""


def data_dir(given: Path | None) -> Path:
    """``--data``, else ``$MINUTIA_SHARED_DATA/elitr``, else ``../shared/data/elitr`` beside the checkout."""
    return given if given is not None else elitr()


def load_questions(folder: Path) -> list[dict]:
    """Every question as {meeting, id, type, position, question, reference, published: {model: (text, score)}}."""
    qa = folder / "elitr-bench-qa_dev.json"
    if not qa.is_file():
        raise SystemExit(f"ELITR-Bench data not found: {qa} (give --data or set MINUTIA_SHARED_DATA)")
    published: dict[tuple[str, str], dict[str, tuple[str, float]]] = {}
    scored = folder / "elitr-bench-qa_dev_st_gpt-4-eval.json"
    if scored.is_file():
        for meeting in json.loads(scored.read_text())["meetings"]:
            for q in meeting["questions"]:
                published[(meeting["id"], q["id"])] = {
                    r["model"]: (r["generated-response"], float(r["gpt-4-eval_score"])) for r in q["generated-responses"]}
    rows = []
    for meeting in json.loads(qa.read_text())["meetings"]:
        for q in meeting["questions"]:
            rows.append({"meeting": meeting["id"], "id": q["id"], "type": q["question-type"],
                         "position": q["answer-position"], "question": q["question"],
                         "reference": q["groundtruth-answer"], "published": published.get((meeting["id"], q["id"]), {})})
    return rows


def as_speaker_lines(path: Path) -> Transcript:
    """The meeting as `minutia ask` reads it when given ``Speaker: text`` lines (the kept-back split's form)."""
    turns = load_transcript(path).turns  # the app's own reader of "(PERSON4) text"
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / f"{path.stem}.txt"
        plain.write_text("".join(f"{t.speaker}: {t.text}\n" for t in turns))
        return load_transcript(plain)


def pick_meetings(spec: str | None, names: list[str]) -> list[str]:
    """``--meetings 1-5,8``: by number (the NNN of meeting_en_dev_NNN)."""
    if not spec:
        return names
    wanted: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        wanted.update(range(int(a), int(b or a) + 1))
    return [n for n in names if int(n.rsplit("_", 1)[1]) in wanted]


# ---------------------------------------------------------------------------------------------------- the proxy
_NAME = re.compile(r"[\[(]?\b([A-Z]+\d+)\b[\])]?")


def _words(text: str) -> list[str]:
    from app.answering.retrieval import stems

    return stems(_NAME.sub(lambda m: f" {m.group(1).lower()} ", text))


def says_not_said(text: str) -> bool:
    return text.strip() == NOT_IN_MEETING or text.strip().lower().startswith(NOT_IN_MEETING.lower().rstrip("."))


# A reference that itself says the meeting does not tell ("It is not known"): the "not said" target counts
# answerable questions only. Read from the reference (the benchmark's own answer), never from our answer.
_UNANSWERED = re.compile(r"\b(?:not known|unknown|not (?:said|mentioned|specified|discussed|decided))\b", re.IGNORECASE)


def answerable(reference: str) -> bool:
    return not _UNANSWERED.search(reference)


def proxy(answer: str, reference: str) -> float:
    """0-1: recall of the reference's words in the answer times the square root of precision (a verbose answer
    that holds the reference loses a little, as the rubric's 9 does); 0 for "not said"."""
    if says_not_said(answer):
        return 0.0
    ref, got = set(_words(reference)), set(_words(answer))
    if not ref or not got:
        return 0.0
    hit = len(ref & got)
    return (hit / len(ref)) * (hit / len(got)) ** 0.5


def spearman(xs: list[float], ys: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(xs, ys).statistic)


def proxy_check(questions: list[dict]) -> dict:
    """The proxy's rank correlation with GPT-4's published scores, over every published answer."""
    xs, ys = [], []
    for q in questions:
        for text, score in q["published"].values():
            xs.append(proxy(text, q["reference"]))
            ys.append(score)
    return {"answers": len(xs), "spearman": round(spearman(xs, ys), 3)}


# ---------------------------------------------------------------------------------------------------- judging
def judge_batches(rows: list[dict], out: Path, per_batch: int = 36, seed: int = 0) -> list[Path]:
    """Blind batches: ours shuffled among ``JUDGE_PEERS`` under letters; the key apart, for --judged."""
    rng = random.Random(seed)
    folder = out / "judge"
    folder.mkdir(parents=True, exist_ok=True)
    key: dict[str, dict[str, str]] = {}
    blocks: list[str] = []
    for r in rows:
        entries = [("minutia", r["answer"])] + [(m, r["published"][m][0]) for m in JUDGE_PEERS if m in r["published"]]
        rng.shuffle(entries)
        qid = f"{r['meeting']}/{r['id']}"
        key[qid] = {chr(65 + i): who for i, (who, _) in enumerate(entries)}
        responses = "\n".join(f"- **{chr(65 + i)}**: {' '.join(text.split())}" for i, (_, text) in enumerate(entries))
        blocks.append(f"### {qid}\nQuestion: {r['question']}\nReference answer: {r['reference']}\n{responses}\n")
    paths = []
    for n in range(0, len(blocks), per_batch):
        path = folder / f"batch_{n // per_batch + 1:02d}.md"
        path.write_text(f"# Judge batch {n // per_batch + 1}\n\n{RUBRIC}\n\nReturn JSON only: "
                        '{"<question id>": {"A": score, "B": score, ...}, ...} for every question below.\n\n'
                        + "\n".join(blocks[n:n + per_batch]))
        paths.append(path)
    (folder / "key.json").write_text(json.dumps(key, indent=1))
    return paths


def fold_judged(judged: dict, key: dict, rows: list[dict]) -> dict:
    """Our judged mean (all, per type) and the judge's agreement with GPT-4 on the published answers."""
    by_id = {f"{r['meeting']}/{r['id']}": r for r in rows}
    ours: dict[str, float] = {}
    pairs: list[tuple[float, float]] = []
    peers: dict[str, list[float]] = defaultdict(list)
    for qid, scores in judged.items():
        if qid not in key or qid not in by_id:
            continue
        for letter, score in scores.items():
            who = key[qid].get(letter)
            if who == "minutia":
                ours[qid] = float(score)
            elif who is not None:
                pairs.append((float(score), by_id[qid]["published"][who][1]))
                peers[who].append(float(score))
    by_type: dict[str, list[float]] = defaultdict(list)
    for qid, score in ours.items():
        by_type[by_id[qid]["type"]].append(score)
    mean = lambda xs: round(sum(xs) / len(xs), 2) if xs else None  # noqa: E731
    return {
        "judged": len(ours), "mean": mean(list(ours.values())),
        "by_type": {t: mean(v) for t, v in sorted(by_type.items())},
        "judge_vs_gpt4": {"pairs": len(pairs), "spearman": round(spearman(*zip(*pairs)), 3) if len(pairs) > 2 else None,
                          "mean_abs_diff": mean([abs(a - b) for a, b in pairs])},
        "peers_by_judge": {m: mean(v) for m, v in sorted(peers.items())},
        "peers_by_gpt4": {m: mean([by_id[q]["published"][m][1] for q in ours if m in by_id[q]["published"]])
                          for m in sorted(peers)},
    }


# ---------------------------------------------------------------------------------------------------- answering
def answer_all(questions: list[dict], folder: Path, path: str, config: str | None, console) -> list[dict]:
    from rich.progress import Progress

    from app.platform.config import load_settings

    settings = load_settings(config)
    by_meeting: dict[str, list[dict]] = defaultdict(list)
    for q in questions:
        by_meeting[q["meeting"]].append(q)
    assistant = runtime = None
    if path == "live":
        from app.live.runtime import Runtime

        runtime = Runtime(settings)
    else:
        from app.llm.assistant import Assistant
        from app.llm.engine import LLMEngine

        assistant = Assistant(LLMEngine.from_settings(settings.llm, settings.home, settings.kv))
    rows = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("questions", total=len(questions))
        for meeting, asked in by_meeting.items():
            transcript = as_speaker_lines(folder / "dev" / f"{meeting}.txt")
            session = None
            if runtime is not None:
                progress.update(task, description=f"{meeting}: replaying into a live session")
                session = runtime.new_session(source=meeting)
                session.add_transcript(transcript)
                session.wait_until_prefilled(timeout=3600)
                ask = session.ask
            else:
                ask = lambda q, t=transcript: assistant.ask(t, q)  # noqa: E731
            for q in asked:
                progress.update(task, description=f"{meeting} q{q['id']}")
                started = time.perf_counter()
                answer = ask(q["question"])
                seconds = time.perf_counter() - started
                rows.append({**q, "answer": answer.text, "understood_as": answer.kind, "seconds": round(seconds, 3),
                             "not_said": says_not_said(answer.text), "proxy": round(proxy(answer.text, q["reference"]), 3),
                             "citations": [c.label + " " + c.speaker + ": " + c.text for c in answer.citations][:3]})
                progress.advance(task)
            if runtime is not None and session is not None:
                runtime.close_session(session.session_id)
    return rows


def report(rows: list[dict]) -> dict:
    by_type: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_type[r["type"]].append(r)
    seconds = sorted(r["seconds"] for r in rows)
    mean = lambda xs: round(sum(xs) / len(xs), 3) if xs else None  # noqa: E731
    return {
        "questions": len(rows), "proxy": mean([r["proxy"] for r in rows]),
        "not_said": mean([float(r["not_said"]) for r in rows]),
        "not_said_answerable": mean([float(r["not_said"]) for r in rows if answerable(r["reference"])]),
        "by_type": {t: {"n": len(v), "proxy": mean([r["proxy"] for r in v]),
                        "not_said": mean([float(r["not_said"]) for r in v])} for t, v in sorted(by_type.items())},
        "seconds": {"mean": mean(seconds), "p95": seconds[min(len(seconds) - 1, int(0.95 * len(seconds)))] if seconds else None},
    }


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--meetings", default=None, help="meeting numbers, e.g. 1-5 or 1,3,7 (default: all 10)")
    ap.add_argument("--path", choices=("batch", "live"), default="batch")
    ap.add_argument("--config", default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "elitr")
    ap.add_argument("--proxy-check", action="store_true", help="only measure the proxy against GPT-4's scores")
    ap.add_argument("--judged", type=Path, default=None, help="a judge's scores (JSON) for the batches in --out")
    ap.add_argument("--show", action="store_true", help="print each answer beside the reference")
    args = ap.parse_args(argv)
    console = Console(stderr=True)
    folder = data_dir(args.data)
    questions = load_questions(folder)
    names = pick_meetings(args.meetings, sorted({q["meeting"] for q in questions}))
    questions = [q for q in questions if q["meeting"] in names]
    if args.proxy_check:
        print(json.dumps(proxy_check(questions), indent=1))
        return 0
    if args.judged is not None:
        rows = json.loads((args.out / "answers.json").read_text())["rows"]
        key = json.loads((args.out / "judge" / "key.json").read_text())
        judged = json.loads(args.judged.read_text())
        print(json.dumps(fold_judged(judged, key, rows), indent=1))
        return 0
    started = time.perf_counter()
    rows = answer_all(questions, folder, args.path, args.config, console)
    elapsed = time.perf_counter() - started
    summary = report(rows)
    command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, "-m", "bench.elitr", *sys.argv[1:]])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "answers.json").write_text(json.dumps({"command": command, "summary": summary, "rows": rows}, indent=1))
    batches = judge_batches(rows, args.out)
    if args.show:
        for r in rows:
            print(f"[{r['meeting'][-3:]}/{r['id']} {r['type']} {r['proxy']:.2f}] {r['question']}\n  ref: {r['reference']}\n"
                  f"  got: {r['answer']}")
    print(f"`{command}` - {len(names)} meetings, {len(rows)} questions, path {args.path}, {os.cpu_count()} cores, "
          f"{elapsed:.0f} s; judge batches: {len(batches)} in {args.out / 'judge'}")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
