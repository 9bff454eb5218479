"""The synthetic meeting suites (bench/suites): determinism, the files of a meeting, the facts
against the turns that state them, naming rules, and the answer scorer. Only dev seeds are
generated or read here; eval seeds are only planned for the speaker-count check."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # bench/ is not installed; plain `pytest` does not put the root on the path
    sys.path.insert(0, str(ROOT))

from bench.suites import audio, meetings, score  # noqa: E402
from bench.suites.plan import plan_meeting  # noqa: E402
from bench.suites.spoken import MONTHS, date_keywords, ordinal_words, words  # noqa: E402

needs_tools = pytest.mark.skipif(not (shutil.which("espeak-ng") and shutil.which("sox")),
                                 reason="needs the espeak-ng and sox Debian packages")
DEV_SEEDS = list(meetings.SPLITS["dev"])


def first_dev_seed_with_overlap() -> int:
    return next(s for s in DEV_SEEDS if any(t.overlap > 0 for t in plan_meeting(s).turns))


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    """Three dev meetings (one with an overlap) and a second copy of the first."""
    root = tmp_path_factory.mktemp("suite")
    for seed in (0, 1, first_dev_seed_with_overlap()):
        meetings.generate(seed, root / "a" / f"seed-{seed:04d}")
    meetings.generate(0, root / "b" / "seed-0000")
    return root


# ---- determinism and splits ---------------------------------------------------------------------
@needs_tools
def test_same_seed_gives_identical_files(suite):
    for name in ("meeting.wav", "reference.json", "reference.rttm", "facts.json", "meta.json"):
        assert (suite / "a/seed-0000" / name).read_bytes() == (suite / "b/seed-0000" / name).read_bytes(), name


@needs_tools
def test_different_seeds_differ(suite):
    a, b = suite / "a/seed-0000", suite / "a/seed-0001"
    assert (a / "meeting.wav").read_bytes() != (b / "meeting.wav").read_bytes()
    assert json.loads((a / "facts.json").read_text())["questions"] != json.loads((b / "facts.json").read_text())["questions"]


def test_splits_are_disjoint_and_named():
    dev, ev = set(meetings.SPLITS["dev"]), set(meetings.SPLITS["eval"])
    assert dev and ev and not dev & ev
    assert meetings.split_of(7) == "dev" and meetings.split_of(1007) == "eval" and meetings.split_of(500) == "other"
    assert meetings.parse_seeds("1000-1002,7") == [1000, 1001, 1002, 7]


def test_every_speaker_count_occurs_in_both_splits():
    for split in ("dev", "eval"):
        counts = {len(plan_meeting(s).speakers) for s in meetings.SPLITS[split]}
        assert counts == {2, 3, 4, 5, 6}, split


def test_plans_are_deterministic():
    a, b = plan_meeting(11), plan_meeting(11)
    assert [t.text for t in a.turns] == [t.text for t in b.turns]
    assert [q.question for q in a.questions] == [q.question for q in b.questions]


# ---- one meeting's files ------------------------------------------------------------------------
def _meetings(suite: Path):
    return score.load_suite(suite / "a")


@needs_tools
def test_wav_and_reference_agree(suite):
    for m in _meetings(suite):
        with wave.open(str(m.audio)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            seconds = w.getnframes() / 16000
        ref = json.loads(m.reference.read_text())
        assert ref["format"] == "minutia.transcript/1"
        assert meetings.MIN_DURATION <= ref["duration"] <= meetings.MAX_DURATION
        assert abs(seconds - ref["duration"]) < 1e-3
        assert ref["speakers"] == [s["name"] for s in m.facts["speakers"]] == [s["name"] for s in m.meta["speakers"]]
        assert 2 <= m.meta["num_speakers"] == len(ref["speakers"]) <= 6
        for t in ref["turns"]:
            assert 0 <= t["start"] < t["end"] <= ref["duration"] and t["speaker"] in ref["speakers"]
            assert t["end"] - t["start"] <= 25.0


@needs_tools
def test_rttm_covers_the_reference_turns(suite):
    for m in _meetings(suite):
        turns = json.loads(m.reference.read_text())["turns"]
        lines = [line.split() for line in m.rttm.read_text().splitlines()]
        assert len(lines) == len(turns)
        for f, t in zip(lines, turns):
            assert f[0] == "SPEAKER" and f[1] == m.path.name and f[7] == t["speaker"]
            assert abs(float(f[3]) - t["start"]) < 1e-3 and abs(float(f[3]) + float(f[4]) - t["end"]) < 2e-3


@needs_tools
def test_overlaps_show_both_speakers(suite):
    m = next(m for m in _meetings(suite) if m.meta["overlaps"])
    turns = json.loads(m.reference.read_text())["turns"]
    for o in m.meta["overlaps"]:
        a, b = turns[o["turn"] - 1], turns[o["turn"]]
        assert a["speaker"] != b["speaker"] and b["start"] < a["end"]
        assert 0.0 < a["end"] - b["start"] <= 1.0 + 1e-3


@needs_tools
def test_questions_types_and_evidence(suite):
    for m in _meetings(suite):
        turns = json.loads(m.reference.read_text())["turns"]
        qs = m.questions
        types = {q["type"] for q in qs}
        assert 8 <= len(qs) <= 13 and len(types) >= 6 and "absent" in types
        # at most one question asks the price of something said without one, and it comes last
        assert [q["type"] for q in qs].count("figure_not_said") <= 1
        assert all(q["type"] != "figure_not_said" for q in qs[:-1])
        for q in qs:
            if q["type"] in ("absent", "figure_not_said"):
                assert q["keywords"] == [] and q["evidence_turn"] is None
            else:
                assert 0 <= q["evidence_turn"] < len(turns)


@needs_tools
def test_dates_are_calendar_correct(suite):
    for m in _meetings(suite):
        turns = json.loads(m.reference.read_text())["turns"]
        assert m.facts["dates"]
        for d in m.facts["dates"]:
            day = dt.date.fromisoformat(d["iso"])
            assert day.strftime("%A") == d["weekday"]
            said = turns[d["turn"]]["text"]
            assert d["weekday"] in said and MONTHS[day.month - 1] in said and ordinal_words(day.day) in said


# ---- plans of all dev seeds (no audio): facts are said where the questions say ----------------------
def _plan_checks(seed: int):
    spec = plan_meeting(seed)
    by_key = {}
    for t in spec.turns:
        for k in t.keys:
            by_key.setdefault(k, t)
    for q in spec.questions:
        if q.type in ("how_much", "when", "metric", "how_many", "what_decided"):
            text = by_key[q.evidence].text
            assert score.keywords_match(text, q.keywords), (seed, q.question, text)
        if q.type in ("who_will", "who_said"):
            assert q.answer in [s.name for s in spec.speakers if s.named_by]
    return spec


def test_dev_plans_state_their_facts():
    for seed in DEV_SEEDS:
        _plan_checks(seed)


def test_dev_plans_follow_the_naming_rules():
    for seed in DEV_SEEDS:
        spec = plan_meeting(seed)
        said_by = {i: " ".join(t.text for t in spec.turns if t.speaker == i) for i in range(len(spec.speakers))}
        for i, s in enumerate(spec.speakers):
            own = re.search(rf"\b{s.name}\b", said_by[i])
            others = any(re.search(rf"\b{s.name}\b", said_by[j]) for j in said_by if j != i)
            assert said_by[i], (seed, s.name, "never speaks")
            if s.named_by is None:
                assert not own and not others, (seed, s.name)
            elif s.named_by == "address":
                assert others and not own, (seed, s.name)
            else:
                assert s.intro_text and s.intro_text in said_by[i], (seed, s.name)


def test_dev_plans_have_varied_voices_and_prosody():
    specs = [plan_meeting(s) for s in DEV_SEEDS]
    default = sum(s.default_prosody for s in specs)
    assert 30 <= default <= 70
    for spec in specs:
        names = [sp.voice.name for sp in spec.speakers]
        assert len(set(names)) == len(names)
        for sp in spec.speakers:
            v = sp.voice
            assert v.explicit != spec.default_prosody
            if v.explicit:
                assert 20 <= v.pitch <= 80 and 130 <= v.speed <= 190 and 80 <= v.amplitude <= 150
    assert len({spec.topic.key for spec in specs}) >= 10


# ---- conditions -------------------------------------------------------------------------------------
@needs_tools
def test_conditions_change_audio_not_content(tmp_path, suite):
    mixed = suite / "a/seed-0001"  # generated in its drawn ("mixed") condition
    wavs = {}
    for cond in meetings.CONDITIONS:
        out = mixed if cond == meetings.draw_condition(1) else meetings.generate(1, tmp_path / cond / "seed-0001", cond)
        meta = json.loads((out / "meta.json").read_text())
        assert meta["condition"] == cond
        assert [d["type"] for d in meta["degradations"]] == ([] if cond == "clean" else [{"noisy": "noise"}.get(cond, cond)])
        assert (out / "reference.json").read_bytes() == (mixed / "reference.json").read_bytes()
        wavs[cond] = (out / "meeting.wav").read_bytes()
    assert len(set(wavs.values())) == len(meetings.CONDITIONS)


def test_mixed_conditions_are_about_half_clean():
    drawn = [meetings.draw_condition(s) for s in DEV_SEEDS]
    assert 50 <= drawn.count("clean") <= 60 and set(drawn) == set(meetings.CONDITIONS)


def test_noise_is_added_at_the_requested_snr():
    rng = np.random.default_rng(0)
    x = np.zeros(32000)
    x[8000:24000] = rng.standard_normal(16000) * 3000.0
    mask = x != 0
    for color in ("white", "pink", "brown"):
        y = audio.add_noise(x, mask, color, 15.0, seed=3)
        noise = y - x
        snr = 10 * np.log10(np.mean(x[mask] ** 2) / np.mean(noise ** 2))
        assert abs(snr - 15.0) < 0.01
        assert np.array_equal(y, audio.add_noise(x, mask, color, 15.0, seed=3))


@needs_tools
def test_command_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "bench.suites.meetings", "--seeds", "5", "--condition", "clean",
                          "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "seed-0005/meta.json").read_text())["condition"] == "clean"


# ---- scorer -----------------------------------------------------------------------------------------
AMOUNT_Q = {"type": "how_much", "keywords": ["$12,000", "12,000", "12000", "twelve thousand"]}
ABSENT_Q = {"type": "absent", "keywords": [], "asks": "amount"}


def test_scorer_amounts():
    assert score.answer_correct("$12,000", AMOUNT_Q)
    assert score.answer_correct("It will cost twelve thousand dollars.", AMOUNT_Q)
    assert score.answer_correct("12000 dollars", AMOUNT_Q)
    assert not score.answer_correct("$1,000", AMOUNT_Q)
    assert not score.answer_correct("$12,500", AMOUNT_Q)
    assert not score.answer_correct("twelve thousand five hundred dollars", AMOUNT_Q)


def test_scorer_absent():
    assert score.answer_correct("The meeting does not say.", ABSENT_Q)
    assert score.answer_correct("That wasn't discussed in the meeting.", ABSENT_Q)
    assert score.answer_correct("There is no information about it.", ABSENT_Q)
    assert not score.answer_correct("$5,000.", ABSENT_Q)
    assert not score.answer_correct("It is not mentioned, but probably five thousand dollars.", ABSENT_Q)
    who = {"type": "absent", "keywords": [], "asks": "person"}
    assert score.answer_correct("Nobody mentioned who will do it.", who)
    assert not score.answer_correct("Not stated, maybe Priya.", who)


def test_scorer_dates_metrics_decisions_and_yes_no():
    when = {"type": "when", "keywords": date_keywords(dt.date(2025, 3, 10))}
    for answer in ("Monday, March 10th", "on March tenth", "the 10th of March", "March 10"):
        assert score.answer_correct(answer, when), answer
    assert not score.answer_correct("March 1", when) and not score.answer_correct("March 11th", when)
    metric = {"type": "metric", "keywords": ["4.2%", "4.2 percent", "four point two percent"]}
    assert score.answer_correct("The conversion rate is 4.2%.", metric)
    assert score.answer_correct("four point two percent", metric)
    assert not score.answer_correct("4%", metric) and not score.answer_correct("2.4%", metric)
    decided = {"type": "what_decided", "keywords": [["Blue Harbor", "Blueharbor"], ["catering"]]}
    assert score.answer_correct("They chose Blue Harbor for the catering.", decided)
    assert not score.answer_correct("They chose Blue Harbor.", decided)
    yes = {"type": "yes_no", "keywords": ["yes"]}
    no = {"type": "yes_no", "keywords": ["no"]}
    assert score.answer_correct("Yes, they agreed to it.", yes) and not score.answer_correct("No.", yes)
    assert score.answer_correct("No, they decided against it.", no) and score.answer_correct("They did not.", no)
    assert not score.answer_correct("The meeting does not say.", no)
    who = {"type": "who_will", "keywords": ["Priya"]}
    assert score.answer_correct("Priya's team will do it; Priya owns it.", who)
    assert not score.answer_correct("Marcus", who)


def test_repeats_itself():
    assert score.repeats_itself("The budget is ten. The budget is ten.")
    assert score.repeats_itself("we will send the contract and then we will send the contract again")
    assert not score.repeats_itself("The pilot costs $12,000 and starts on March 10.")


def test_spoken_numbers_round_trip_through_the_scorer():
    for n in (7, 42, 115, 1340, 12500, 120000, 999999):
        assert score.normalize(words(n)) == score.normalize(f"{n:,}") == str(n)
    assert [ordinal_words(n) for n in (1, 2, 3, 12, 20, 21, 30, 31)] == [
        "first", "second", "third", "twelfth", "twentieth", "twenty first", "thirtieth", "thirty first"]
