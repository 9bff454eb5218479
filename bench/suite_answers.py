"""How well minutia understands meetings it was not tuned on: answers per question type, speaker names,
speaker counts, on a folder of generated meetings (bench/suites).

    .venv/bin/python -m bench.suite_answers SUITE_DIR [--source reference|batch|live] [--no-llm] [--out DIR]

Sources:
- reference: the script's own transcript (true speakers and words): answering alone;
- batch: the recording through `minutia transcribe`'s path (Whisper, diarizer, names), then `minutia ask`;
- live: the recording replayed into a live MeetingSession as fast as the models go; questions asked after it.
An answer is scored on its text only (bench/suites/score.py), never on its citations. Also counted: answers that
repeat themselves, and cited lines that do not hold the answer's key (the expected keyword or speaker).
Generate a suite with `python -m bench.suites.meetings --split eval --count 20 --out bench/out/suite-eval`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.platform.config import load_settings  # noqa: E402
from app.text.transcript import Transcript, load_transcript  # noqa: E402
from bench.suites.score import ABSENT_TYPES, answer_correct, repeats_itself  # noqa: E402


def meetings(folder: Path, limit: int | None) -> list[Path]:
    found = sorted(p.parent for p in folder.glob("*/facts.json"))
    if not found:
        raise SystemExit(f"no meetings (*/facts.json) under {folder}")
    return found[:limit] if limit else found


def speaker_of_words(reference: dict, transcript: Transcript) -> dict[str, str]:
    """Hypothesis label -> the reference speaker it overlaps most in time (by word midpoints)."""
    votes: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    turns = [(t["start"], t["end"], t["speaker"]) for t in reference["turns"]]
    for word in transcript.words:
        mid = (word.start + word.end) / 2
        for a, b, name in turns:
            if a <= mid <= b:
                votes[word.speaker][name] += word.end - word.start
    return {label: max(v, key=v.get) for label, v in votes.items()}


def naming(facts: dict, reference: dict, transcript: Transcript) -> dict:
    """Named speakers right / introduced or addressed speakers, and names given wrongly."""
    truth = speaker_of_words(reference, transcript)
    named_in_meeting = {s["name"] for s in facts["speakers"] if s.get("named_by")}
    introduced = {s["name"] for s in facts["speakers"] if s.get("named_by") == "introduction"}
    hyp_names = {label for label in transcript.speakers if not label.startswith("SPEAKER_")}
    right = {label for label in hyp_names if truth.get(label) == label}
    # A name given to the right person but spelled as the recogniser heard it ("Jamol" for Jamal) is an ASR
    # error, counted apart from a name given to the wrong person.
    misspelled = sorted(label for label in hyp_names - right if truth.get(label) and _close(label, truth[label]))
    wrong = sorted(label for label in hyp_names - right if truth.get(label) and not _close(label, truth[label]))
    return {
        "named_right": len(right & named_in_meeting), "named_total": len(named_in_meeting),
        "introduced_right": len(right & introduced), "introduced_total": len(introduced),
        "wrong_names": wrong, "misspelled_names": misspelled,
    }


def _close(heard: str, name: str) -> bool:
    import difflib

    return difflib.SequenceMatcher(None, heard.lower(), name.lower()).ratio() >= 0.6


def cited_key(answer, question: dict) -> bool:
    """The answer's key (an expected keyword, or the person) occurs in a cited line or is its speaker."""
    if question["type"] in ABSENT_TYPES:
        return not answer.citations
    if question["type"] == "yes_no":  # the key of a yes/no answer is the matter itself: most of its focus words
        from app.answering.questions import parse_question
        from app.answering.retrieval import stems

        focus = set(stems(" ".join(parse_question(question["question"]).focus)))
        cited_stems = set(stems(" ".join(c.text for c in answer.citations)))
        return bool(focus) and len(focus & cited_stems) / len(focus) >= 0.5
    keys = [k for group in question["keywords"] for k in (group if isinstance(group, list) else [group])]
    cited = " ".join(f"{c.speaker} {c.text}" for c in answer.citations).lower()
    return any(k.lower() in cited or k.lower().replace(",", "") in cited.replace(",", "") for k in keys) or \
        answer_correct(cited, question)


def heard(question: dict, reference: dict, transcript: Transcript) -> tuple[bool, bool]:
    """(key heard, topic heard): does the recognised transcript, where the evidence turn was spoken, still hold the
    answer's key (the figure, date or decision's words; for "who" questions the person as speaker label or said
    name), and most of the question's focus words? What the recogniser lost no answering rule can find; questions
    the meeting does not answer have nothing to lose."""
    if question["type"] in ABSENT_TYPES or question.get("evidence_turn") is None:
        return True, True
    from app.answering.answers import AnswerOptions
    from app.answering.questions import parse_question
    from app.answering.retrieval import stems
    from app.text.transcript import join_words
    from bench.suites.score import keywords_match

    turn = reference["turns"][question["evidence_turn"]]
    words = [w for w in transcript.words if w.end > turn["start"] - 0.5 and w.start < turn["end"] + 0.5]
    text = join_words(w.text for w in words)
    if question["type"] in ("who_said", "who_will"):
        labels = {w.speaker for w in words if w.start >= turn["start"] - 0.1}
        key = question["answer"] in labels or keywords_match(text, question["keywords"])
    elif question["type"] == "yes_no":
        key = True  # the key is the matter itself: the topic below
    else:
        key = keywords_match(text, question["keywords"])
    focus = set(stems(" ".join(parse_question(question["question"]).focus)))
    topic = not focus or len(focus & set(stems(text))) / len(focus) >= AnswerOptions().min_focus_coverage
    return key, topic


def transcript_for(meeting: Path, source: str, settings, cache: Path | None = None) -> Transcript:
    """The meeting's transcript from ``source``. Batch transcripts are kept in ``cache`` when given, before
    naming (anonymous labels), and named on every load, so answer and naming rules can be re-scored without
    re-running Whisper and the diarizer (delete the folder after changes to the recogniser or diarizer)."""
    if source == "reference":
        return load_transcript(meeting / "reference.json")
    from app.text.speakers import name_speakers

    kept = cache / f"{meeting.name}.json" if cache else None
    if kept is not None and kept.is_file():
        return name_speakers(anonymous(load_transcript(kept)), settings.asr.hotwords)
    from app.batch.pipeline import recognise_recording
    from app.text.transcript import atomic_write, to_json

    audio = next(p for p in sorted(meeting.glob("meeting.*")))
    transcript = recognise_recording(audio, settings)
    if kept is not None:
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(kept, to_json(transcript))
    return name_speakers(transcript, settings.asr.hotwords)


def anonymous(transcript: Transcript) -> Transcript:
    """Named labels back to SPEAKER_k (folders kept by older code stored transcripts after naming)."""
    from app.text.speakers import rename_speakers

    labels = list(dict.fromkeys(t.speaker for t in transcript.turns))
    taken = {label for label in labels if label.startswith("SPEAKER_")}
    mapping, k = {}, 0
    for label in labels:
        if label.startswith("SPEAKER_"):
            continue
        while f"SPEAKER_{k:02d}" in taken:
            k += 1
        mapping[label] = f"SPEAKER_{k:02d}"
        taken.add(mapping[label])
    return rename_speakers(transcript, mapping) if mapping else transcript


def kept_folder(args: argparse.Namespace) -> Path | None:
    """Where batch transcripts are kept: those primed with the attendees' names apart from the plain ones."""
    if args.source != "batch" or args.transcripts is None:
        return None
    return args.transcripts / "attendees" if args.attendees else args.transcripts


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", type=Path)
    ap.add_argument("--source", choices=("reference", "batch", "live"), default="reference")
    ap.add_argument("--no-llm", action="store_true", help="answer without the language model (free-form falls back)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--config", default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--attendees", action="store_true", help="give each meeting's attendee names as asr.hotwords "
                    "(what a calendar invite lists; batch source only)")
    ap.add_argument("--transcripts", type=Path, default=None, help="keep batch transcripts in this folder and "
                    "reuse them on the next run (batch source only)")
    ap.add_argument("--show-wrong", action="store_true", help="list wrong answers (development seeds only: never "
                    "read the evaluation seeds' answers)")
    args = ap.parse_args(argv)
    if args.attendees and args.source != "batch":
        ap.error("--attendees needs --source batch (a reference transcript has no recogniser to prime)")
    console = Console(stderr=True)
    settings = load_settings(args.config)
    todo = meetings(args.suite, args.limit)

    from app.answering.finder import meeting_finder

    assistant = runtime = None
    if args.source == "live":
        from app.live.runtime import Runtime

        runtime = Runtime(settings)
    elif not args.no_llm:
        from app.llm.assistant import Assistant
        from app.llm.engine import LLMEngine

        assistant = Assistant(LLMEngine.from_settings(settings.llm, settings.home, settings.kv))

    rows, names, counts = [], [], []
    started = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("meetings", total=len(todo))
        for meeting in todo:
            progress.update(task, description=f"{meeting.name} ({args.source})")
            facts = json.loads((meeting / "facts.json").read_text())
            meta = json.loads((meeting / "meta.json").read_text()) if (meeting / "meta.json").is_file() else {}
            reference = json.loads((meeting / "reference.json").read_text())
            if args.source == "live":
                from app.live.replay import replay

                session = runtime.new_session(source=meeting.name)
                replay(session, next(p for p in sorted(meeting.glob("meeting.*"))), speed=0)
                session.finish(timeout=600)
                transcript = session.transcript()
                ask = session.ask
            else:
                given = reference["speakers"] if args.attendees else []
                transcript = transcript_for(meeting, args.source,
                                            settings.model_copy(update={"asr": settings.asr.model_copy(update={"hotwords": given})}),
                                            kept_folder(args))
                if assistant is not None:
                    ask = lambda q, t=transcript: assistant.ask(t, q)  # noqa: E731
                else:
                    finder = meeting_finder(transcript)
                    ask = finder.answer
            if args.source != "reference":
                names.append({"meeting": meeting.name, "condition": meta.get("condition", "?"),
                              **naming(facts, reference, transcript)})
                counts.append({"meeting": meeting.name, "condition": meta.get("condition", "?"),
                               "ref": len(reference["speakers"]), "hyp": len(transcript.speakers)})
            for question in facts["questions"]:
                answer = ask(question["question"])
                key_heard, topic_heard = heard(question, reference, transcript)
                rows.append({
                    "meeting": meeting.name, "condition": meta.get("condition", "?"), "type": question["type"],
                    "question": question["question"], "expected": question["answer"], "answer": answer.text,
                    "understood_as": answer.kind, "correct": answer_correct(answer.text, question),
                    "repeats": repeats_itself(answer.text), "cited_supports": cited_key(answer, question),
                    "key_heard": key_heard, "topic_heard": topic_heard,
                })
            if runtime is not None:
                runtime.close_session(session.session_id)
            progress.advance(task)
    elapsed = time.perf_counter() - started

    command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, "-m", "bench.suite_answers", *sys.argv[1:]])
    print(f"`{command}` — {len(todo)} meetings, {len(rows)} questions, source {args.source}, "
          f"{'no LLM' if args.no_llm else settings.llm.model}, {os.cpu_count()} cores, {elapsed:.0f} s\n")
    by_type: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_type[r["type"]].append(r)
    def share(rs: list[dict], field: str) -> str:
        return f"{sum(r[field] for r in rs) / len(rs):.0%}" if rs else "-"

    def heard_rows(rs: list[dict]) -> list[dict]:
        return [r for r in rs if r["key_heard"] and r["topic_heard"]]

    heard_cols = args.source != "reference"
    print("| question type | questions | right | cited line supports | repeats |"
          + (" answer heard | topic heard | right where both heard |" if heard_cols else "")
          + "\n|---|---|---|---|---|" + ("---|---|---|" if heard_cols else ""))
    for qtype in [*sorted(by_type), None]:
        rs = by_type[qtype] if qtype else rows
        right = share(rs, "correct") if qtype else f"**{sum(r['correct'] for r in rs) / len(rs):.1%}**"
        line = (f"| {qtype or '**all**'} | {len(rs)} | {right} | {share(rs, 'cited_supports')} "
                f"| {sum(r['repeats'] for r in rs)} |")
        if heard_cols:
            both = heard_rows(rs)
            line += (f" {share(rs, 'key_heard')} | {share(rs, 'topic_heard')} | {share(both, 'correct')} "
                     f"({len(both)}) |")
        print(line)
    if names:
        nr, nt = sum(n["named_right"] for n in names), sum(n["named_total"] for n in names)
        ir, it = sum(n["introduced_right"] for n in names), sum(n["introduced_total"] for n in names)
        wrong = [w for n in names for w in n["wrong_names"]]
        misspelled = [w for n in names for w in n["misspelled_names"]]
        right_counts = sum(c["ref"] == c["hyp"] for c in counts)
        print(f"\nspeakers: count right in {right_counts}/{len(counts)} meetings; introduced speakers named right "
              f"{ir}/{it}; named (introduced or addressed) right {nr}/{nt}; names given to the wrong person {len(wrong)}; "
              f"right person, name misheard by the recogniser {len(misspelled)} {misspelled[:10]}")
    wrong_rows = [r for r in rows if not r["correct"]]
    if wrong_rows and args.show_wrong:
        print("\nwrong answers:")
        for r in wrong_rows[:60]:
            print(f"- {r['meeting']} [{r['type']}→{r['understood_as']}] {r['question']} | expected {r['expected']!r} "
                  f"| got {r['answer']!r}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"suite_answers_{args.source}.json").write_text(
            json.dumps({"command": command, "rows": rows, "names": names, "counts": counts}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
