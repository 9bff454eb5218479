"""Training examples for the meeting reader (a LoRA on the embedded LLM), from public meeting QA that is not ELITR.

    .venv/bin/python -m bench.reader_data --qmsum QMSUM_REPO --meeqa MEEQA_REPO --out bench/out/reader-data

Sources, each a git mirror brought in with the search tool's ``fetch`` (nothing is downloaded at run time):
- QMSum's train split (Yale-LILY/QMSum, ``data/ALL/train``): specific queries with the span of turns they are about
  and a written answer; the reader sees up to ``--context-tokens`` of the span and learns the answer's first
  sentences. Never QMSum's validation split (the summary bench's) nor its test split.
- MeeQA (reutapel/MeeQA, ``Data/original/{validation,test}_data.json.zip``; its train file is not in the mirror):
  questions people asked during real meetings, with the reply that answers them or none; the reader sees the
  question and the replies after it, and learns the answer span or "The meeting does not say.".

Every example is ``{"source", "context", "question", "answer"}`` in ``train.jsonl`` / ``heldout.jsonl`` (whole
meetings held out, 5%), with the context as ``Speaker: text`` lines like the app's prompts.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.answering.answers import NOT_IN_MEETING  # noqa: E402
from app.text.sentences import split_text  # noqa: E402
from app.text.transcript import qmsum_text  # noqa: E402

WORDS_PER_TOKEN = 0.75  # English speech in Gemma's tokenizer, roughly; contexts are cut by words


def git_show(repo: Path, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{path}"], check=True, capture_output=True).stdout


def git_files(repo: Path, under: str) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "HEAD", under], check=True,
                         capture_output=True, text=True).stdout
    return [p for p in out.splitlines() if p.endswith(".json")]


def _first_sentences(text: str, words: int = 45) -> str:
    """The answer's opening sentences, up to about ``words`` words: the reader answers briefly."""
    kept: list[str] = []
    for sentence in split_text(" ".join(text.split())):
        if kept and sum(len(s.split()) for s in kept) + len(sentence.split()) > words:
            break
        kept.append(sentence)
    return " ".join(kept)


def _cut(lines: list[str], budget_words: int, keep_end: bool = False) -> str:
    """Whole lines up to ``budget_words`` words, from the start (or from the end when ``keep_end``)."""
    out: list[str] = []
    used = 0
    for line in (reversed(lines) if keep_end else lines):
        n = len(line.split())
        if out and used + n > budget_words:
            break
        out.append(line if n <= budget_words else " ".join(line.split()[:budget_words]))
        used += n
    return "\n".join(reversed(out) if keep_end else out)


def qmsum_examples(repo: Path, context_tokens: int) -> list[dict]:
    rows = []
    for path in git_files(repo, "data/ALL/train"):
        meeting = json.loads(git_show(repo, path))
        turns = [f"{t.get('speaker') or '?'}: {qmsum_text(t['content'])}" for t in meeting["meeting_transcripts"]]
        for query in meeting.get("specific_query_list", []):
            spans = query.get("relevant_text_span") or []
            if not spans:
                continue
            first, last = int(spans[0][0]), int(spans[0][1])
            context = _cut(turns[first:last + 1], int(context_tokens * WORDS_PER_TOKEN))
            rows.append({"source": "qmsum", "meeting": Path(path).stem, "context": context,
                         "question": query["query"], "answer": _first_sentences(query["answer"])})
    return rows


_MEEQA_TURN = re.compile(r"&\s*(SPEAKER_\d+):\s*")


def meeqa_lines(text: str) -> list[str]:
    parts = _MEEQA_TURN.split(text)
    return [f"{parts[i]}: {' '.join(parts[i + 1].split())}" for i in range(1, len(parts) - 1, 2)
            if parts[i + 1].strip(" .")]


def meeqa_examples(repo: Path, context_tokens: int) -> list[dict]:
    rows = []
    for split in ("validation", "test"):
        archive = zipfile.ZipFile(io.BytesIO(git_show(repo, f"Data/original/{split}_data.json.zip")))
        for item in json.loads(archive.read(archive.namelist()[0]))["data"]:
            asked = meeqa_lines(item["question"])
            if not asked or not item.get("isQuestionComprehensible", True):
                continue
            question = asked[-1].split(": ", 1)[1]
            answers = [a for a in item["answers"]["text"] if a.strip()]
            answer = " ".join(" ".join(_MEEQA_TURN.sub(" ", answers[0]).split()).split()[:45]) if answers else NOT_IN_MEETING
            # MeeQA's context is what was said after the question: the reader sees the question's lines, then it
            context = _cut(asked + meeqa_lines(item["context"]), int(context_tokens * WORDS_PER_TOKEN))
            meeting = item["id"].split("_", 1)[0]
            rows.append({"source": "meeqa", "meeting": meeting, "context": context,
                         "question": f"{asked[-1].split(': ', 1)[0]} asked: {question}", "answer": answer})
    return rows


def split_by_meeting(rows: list[dict], heldout: float, seed: int) -> tuple[list[dict], list[dict]]:
    meetings = sorted({(r["source"], r["meeting"]) for r in rows})
    rng = random.Random(seed)
    rng.shuffle(meetings)
    held = set(meetings[:max(1, int(len(meetings) * heldout))])
    train = [r for r in rows if (r["source"], r["meeting"]) not in held]
    test = [r for r in rows if (r["source"], r["meeting"]) in held]
    rng.shuffle(train)
    return train, test


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qmsum", type=Path, required=True, help="a git mirror of Yale-LILY/QMSum")
    ap.add_argument("--meeqa", type=Path, required=True, help="a git mirror of reutapel/MeeQA")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "reader-data")
    ap.add_argument("--context-tokens", type=int, default=384)
    ap.add_argument("--unanswerable-share", type=float, default=0.15, help="of MeeQA's examples, at most")
    ap.add_argument("--meeqa-per-qmsum", type=int, default=2, help="MeeQA answered examples per QMSum example, at most")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not 0 <= args.unanswerable_share < 1:
        raise SystemExit("--unanswerable-share must be at least 0 and below 1")
    for repo in (args.qmsum, args.meeqa):
        if not (repo / "HEAD").exists() and not (repo / ".git").exists():
            raise SystemExit(f"not a git repository: {repo}")
    qmsum = qmsum_examples(args.qmsum, args.context_tokens)
    meeqa = meeqa_examples(args.meeqa, args.context_tokens)
    rng = random.Random(args.seed)
    answered = [r for r in meeqa if r["answer"] != NOT_IN_MEETING]
    unanswered = [r for r in meeqa if r["answer"] == NOT_IN_MEETING]
    rng.shuffle(answered)
    rng.shuffle(unanswered)
    answered = answered[:args.meeqa_per_qmsum * len(qmsum)]  # replies to in-meeting questions are not all it reads
    keep = int(len(answered) * args.unanswerable_share / (1 - args.unanswerable_share))
    train, heldout = split_by_meeting(qmsum + answered + unanswered[:keep], 0.05, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("heldout", heldout)):
        with (args.out / f"{name}.jsonl").open("w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    print(json.dumps({"qmsum": len(qmsum), "meeqa_answered": len(answered), "meeqa_unanswered_kept": min(keep, len(unanswered)),
                      "train": len(train), "heldout": len(heldout), "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
