"""The generator swap (bench/generator_swap.py): the suite generator's other vocabularies must be drop-in
replacements for the original one (same constants, same placeholders, same dataclasses), and the generator must
really speak the one chosen."""

from __future__ import annotations

import importlib
import json
import os
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest

from bench.generator_swap import score, table
from bench.suites import phrases as original_phrases
from bench.suites import topics as original_topics
from bench.suites.spoken import agreement
from bench.suites.topics import Topic
from bench.suites.vocabulary import VOCABULARIES

ROOT = Path(__file__).resolve().parents[1]
OTHERS = [v for v in VOCABULARIES if v != "original"]
AGREEMENT = set(agreement("item"))


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _constants(module) -> dict[str, object]:
    return {k: v for k, v in vars(module).items() if k.isupper()}


@pytest.mark.parametrize("name", OTHERS)
def test_every_phrase_constant_is_there_with_the_placeholders_the_generator_fills(name):
    fresh = importlib.import_module(f"bench.suites.{name}.phrases")
    for constant, value in _constants(original_phrases).items():
        assert constant in vars(fresh), f"{name} lacks {constant}"
        given = getattr(fresh, constant)
        assert type(given) is type(value), constant
        if isinstance(value, str):
            continue
        allowed = set().union(*(_fields(t) for t in value))
        if allowed & AGREEMENT:  # the generator passes every agreeing form where it passes one
            allowed |= AGREEMENT
        needed = set.intersection(*(_fields(t) for t in value))
        for template in given:
            assert needed <= _fields(template) <= allowed, (constant, template)
            assert not re.search(r"\d", template), (constant, template)  # espeak says what is written


@pytest.mark.parametrize("name", OTHERS)
def test_its_vocabulary_is_new_not_an_edit_of_the_original(name):
    fresh = importlib.import_module(f"bench.suites.{name}.phrases")
    said = {t for v in _constants(original_phrases).values() if isinstance(v, tuple) for t in v}
    new = [t for v in _constants(fresh).values() if isinstance(v, tuple) for t in v]
    assert not said & set(new)
    topics = importlib.import_module(f"bench.suites.{name}.topics")
    assert not set(topics.NAMES) & set(original_topics.NAMES)
    assert all(isinstance(t, Topic) for t in topics.TOPICS) and len(topics.TOPICS) >= len(original_topics.TOPICS)
    assert not {t.key for t in topics.TOPICS} & {t.key for t in original_topics.TOPICS}


def test_the_generator_speaks_the_vocabulary_chosen():
    code = ("import json; from bench.suites.plan import plan_meeting; m = plan_meeting(3); "
            "print(json.dumps({'names': [s.name for s in m.speakers], 'topic': m.topic.key, "
            "'questions': len(m.questions)}))")
    for name in ("original", "fresh"):
        env = {**os.environ, "MINUTIA_SUITE_VOCABULARY": name}
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        meeting = json.loads(out.stdout)
        topics = importlib.import_module("bench.suites.topics" if name == "original" else f"bench.suites.{name}.topics")
        assert set(meeting["names"]) <= set(topics.NAMES)
        assert meeting["topic"] in {t.key for t in topics.TOPICS}
        assert meeting["questions"] > 5


def test_an_unknown_vocabulary_is_refused_in_one_line():
    env = {**os.environ, "MINUTIA_SUITE_VOCABULARY": "klingon"}
    out = subprocess.run([sys.executable, "-c", "import bench.suites.plan"], cwd=ROOT, env=env, capture_output=True,
                         text=True)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("MINUTIA_SUITE_VOCABULARY='klingon': choose one of")


def test_the_table_gives_each_gap_to_the_original():
    rows = {"original": [{"type": "when", "correct": True}, {"type": "who_said", "correct": True}],
            "fresh": [{"type": "when", "correct": True}, {"type": "who_said", "correct": False}]}
    scores = {v: score(r) for v, r in rows.items()}
    assert scores["fresh"][""] == (2, 50.0)
    text = table(scores)
    assert "| who_said | 1 | 100.0% | 1 | 0.0% | +100.0 |" in text
    assert "| **all** | 2 | 100.0% | 2 | 50.0% | +50.0 |" in text
