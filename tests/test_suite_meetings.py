"""A small development-seed suite through the real batch path (Whisper, the embedded diarizer, speaker
naming, grounded answers), so a regression in meeting understanding fails CI. Development seeds only:
the evaluation seeds are scored by bench/suite_answers.py and never read by tests or tuning."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.answering.answers import AnswerFinder  # noqa: E402
from app.platform.config import load_settings  # noqa: E402
from app.platform.models import EMBEDDED_ASR, models_dir  # noqa: E402
from app.batch.pipeline import transcribe_recording  # noqa: E402
from app.answering.retrieval import default_embedder  # noqa: E402
from bench.suites import meetings  # noqa: E402
from bench.suites.score import answer_correct  # noqa: E402

# Clean dev meetings with 2 and 4 speakers; three speakers are the live test's (LIVE_SEED). Seed 5 (3 speakers)
# was a third until session 47: each meeting costs Whisper about two minutes of a busy suite.
SEEDS = (2, 8)
LIVE_SEED = 58  # a 68 s dev meeting with 3 speakers: the live path replays it in real model time

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (shutil.which("espeak-ng") and shutil.which("sox")), reason="needs espeak-ng and sox"),
]


@pytest.fixture(scope="module")
def settings():
    settings = load_settings(None)
    if not (models_dir(settings.home) / EMBEDDED_ASR / ".minutia-complete").is_file():
        pytest.skip("the embedded speech recogniser is not provisioned (minutia models)")
    return settings


@pytest.fixture(scope="module")
def transcribed(settings, tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    out = []
    for seed in SEEDS:
        folder = meetings.generate(seed, root / f"seed-{seed:04d}", condition="clean")
        out.append((folder, transcribe_recording(folder / "meeting.wav", settings)))
    return out


def test_speaker_count(transcribed):
    for folder, transcript in transcribed:
        reference = json.loads((folder / "reference.json").read_text())
        assert len(transcript.speakers) == len(reference["speakers"]), (folder.name, transcript.speakers)


def test_introduced_speakers_are_named_and_no_name_goes_to_the_wrong_person(transcribed):
    from bench.suite_answers import naming

    for folder, transcript in transcribed:
        facts = json.loads((folder / "facts.json").read_text())
        reference = json.loads((folder / "reference.json").read_text())
        result = naming(facts, reference, transcript)
        assert result["wrong_names"] == [], (folder.name, result)
        heard = result["introduced_right"] + len(result["misspelled_names"])  # Whisper may spell a name its way
        assert heard >= result["introduced_total"], (folder.name, result)


def test_answers(transcribed):
    right = total = 0
    for folder, transcript in transcribed:
        facts = json.loads((folder / "facts.json").read_text())
        finder = AnswerFinder(transcript, default_embedder())
        for question in facts["questions"]:
            answer = finder.answer(question["question"])
            total += 1
            right += answer_correct(answer.text, question)
            if question["type"] == "absent":
                assert answer_correct(answer.text, question), (folder.name, question, answer.text)
    # Issue 16's target is 90%; on these three dev meetings the batch path measured 18/28 (2026-12-01): names
    # Whisper mishears or nobody says, and sentences the recogniser words differently. A regression guard.
    assert right / total >= 0.6, f"{right}/{total}"


def test_live_session_answers_a_generated_meeting(settings, tmp_path):
    """The same meeting through the live path: streaming ASR, the online diarizer, names, and the session's
    answers (mid-meeting state machinery, KV-cached context) after it ends."""
    from app.platform.models import EMBEDDED_LLM
    from app.live.runtime import Runtime
    from app.live.replay import replay

    if not (models_dir(settings.home) / EMBEDDED_LLM / ".minutia-complete").is_file():
        pytest.skip("the embedded LLM is not provisioned (minutia models)")
    folder = meetings.generate(LIVE_SEED, tmp_path / "meeting", condition="clean")
    facts = json.loads((folder / "facts.json").read_text())
    runtime = Runtime(load_settings(overrides={"store": {"path": str(tmp_path / "sessions"),
                                                         "key_file": str(tmp_path / "master.key")}}))
    try:
        session = runtime.new_session(source="suite")
        replay(session, folder / "meeting.wav", speed=0)
        session.finish(timeout=600)
        assert session.snapshot().state == "finished", session.snapshot().error
        answers = [(q, session.ask(q["question"])) for q in facts["questions"]]
    finally:
        runtime.close()
    right = sum(answer_correct(a.text, q) for q, a in answers)
    # Measured 8/11 on this meeting (2026-12-02; streaming ASR output varies with timing, hence the margin):
    # short of issue 16's target, kept as a regression guard.
    assert right / len(answers) >= 0.4, [(q["question"], q["answer"], a.text) for q, a in answers]
    for q, a in answers:
        if q["type"] == "absent":
            assert answer_correct(a.text, q), (q, a.text)
