"""bench/elitr.py: the proxy, the blind judge batches and the folding of a judge's scores (tiny data made here),
and the real development split when ../shared is beside the checkout (skipped otherwise)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.elitr import (as_speaker_lines, data_dir, fold_judged, judge_batches, load_questions, pick_meetings, proxy,
                         proxy_check)
from tests.shared_data_marks import mark, needs_shared


def test_the_proxy_rewards_the_reference_and_not_a_refusal():
    assert proxy("PERSON6.", "[PERSON6]") == 1.0
    assert proxy("The meeting does not say.", "[PERSON6]") == 0.0
    assert proxy("PERSON3.", "[PERSON6]") == 0.0
    verbose = proxy("It was PERSON6, who also talked about many other unrelated things at length.", "[PERSON6]")
    assert 0.0 < verbose < 1.0


def _rows() -> list[dict]:
    published = {"GPT-4": ("PERSON6", 9.0), "GPT-3.5": ("PERSON3", 2.0), "Vicuna-13B-v1.5": ("not said", 2.0),
                 "LongAlpaca-7B": ("PERSON6 and others", 8.0)}
    return [{"meeting": "m1", "id": str(i), "type": "who" if i % 2 else "what", "question": f"q{i}?",
             "reference": "[PERSON6]", "published": published, "answer": f"ours {i}"} for i in range(5)]


def test_judge_batches_are_blind_and_the_key_folds_back(tmp_path):
    rows = _rows()
    batches = judge_batches(rows, tmp_path, per_batch=2)
    assert len(batches) == 3
    text = "".join(p.read_text() for p in batches)
    assert "minutia" not in text and "GPT-4" not in text  # no model names: letters only
    assert all(f"ours {i}" in text for i in range(5))
    key = json.loads((tmp_path / "judge" / "key.json").read_text())
    assert len({tuple(v.values()) for v in key.values()}) > 1  # shuffled, not one fixed order
    # a judge that agrees with GPT-4 on the published answers and gives ours 7
    judged = {qid: {letter: (7 if who == "minutia" else rows[0]["published"][who][1]) for letter, who in k.items()}
              for qid, k in key.items()}
    folded = fold_judged(judged, key, rows)
    assert folded["judged"] == 5 and folded["mean"] == 7.0
    assert folded["by_type"] == {"what": 7.0, "who": 7.0}
    assert folded["judge_vs_gpt4"]["mean_abs_diff"] == 0.0 and folded["judge_vs_gpt4"]["spearman"] == 1.0


def test_meetings_are_picked_by_number():
    names = [f"meeting_en_dev_{n:03d}" for n in range(1, 11)]
    assert pick_meetings("1-3,10", names) == names[:3] + names[9:]
    assert pick_meetings(None, names) == names


ELITR = data_dir(None)


@mark(needs_shared("elitr", "elitr-bench-qa_dev.json"))
def test_the_development_split_reads_and_the_proxy_tracks_gpt4():
    questions = load_questions(ELITR)
    assert len(questions) == 141 and {q["type"] for q in questions} == {"who", "what", "when", "howmany"}
    transcript = as_speaker_lines(ELITR / "dev" / "meeting_en_dev_001.txt")
    assert transcript.speakers == ["PERSON6", "PERSON3", "PERSON4", "PERSON10", "PERSON5"]
    check = proxy_check(questions)
    assert check["answers"] > 1000 and check["spearman"] > 0.5  # measured 0.634


def test_a_missing_data_folder_is_one_clear_line(tmp_path):
    with pytest.raises(SystemExit, match="ELITR-Bench data not found"):
        load_questions(tmp_path / "nothing")


def test_the_data_folder_follows_the_shared_data_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("MINUTIA_SHARED_DATA", str(tmp_path))
    assert data_dir(None) == tmp_path / "elitr"
    assert data_dir(Path("/x")) == Path("/x")


def test_not_said_is_also_counted_on_answerable_questions_only():
    """The issue's target is "not said" on answerable questions: a question whose reference says the meeting does
    not tell ("It is not known") is right to get it."""
    from bench.elitr import answerable, report

    assert answerable("[PERSON6]") and answerable("No (there is a doodle to be filled)")
    assert not answerable("It is not known") and not answerable("It is not known yet (a doodle is ongoing)")
    rows = [{"type": "when", "reference": "It is not known", "not_said": True, "proxy": 0.0, "seconds": 1.0},
            {"type": "who", "reference": "[PERSON6]", "not_said": True, "proxy": 0.0, "seconds": 1.0},
            {"type": "who", "reference": "[PERSON3]", "not_said": False, "proxy": 1.0, "seconds": 1.0}]
    summary = report(rows)
    assert summary["not_said"] == 0.667 and summary["not_said_answerable"] == 0.5
