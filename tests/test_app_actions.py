"""Action items, decisions and key facts from the transcript; speaker naming from how people address each other."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.answering.actions import extract_action_items, extract_decisions, extract_key_facts
from app.text.speakers import name_speakers
from app.text.transcript import Transcript, TranscriptWord, Turn, load_transcript

STANDUP = Path(__file__).resolve().parent.parent / "samples" / "standup"
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


@pytest.fixture(scope="module")
def standup() -> Transcript:
    return load_transcript(STANDUP / "reference.json")


@pytest.fixture(scope="module")
def facts() -> dict:
    return json.loads((STANDUP / "facts.json").read_text())


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def _t(*turns: tuple[str, str]) -> Transcript:
    return Transcript(turns=[Turn(speaker, text, float(i * 5), float(i * 5 + 4)) for i, (speaker, text) in enumerate(turns)])


def test_standup_action_items_match_facts(standup, facts):
    items = extract_action_items(standup)
    expected = facts["action_items"]
    assert [i.owner for i in items] == [e["owner"] for e in expected]
    for item, want in zip(items, expected):
        got_words, want_words = _words(item.task), _words(want["task"])
        assert got_words <= want_words, (item.task, want["task"])  # no words from elsewhere
        assert len(got_words & want_words) >= 4, (item.task, want["task"])
        weekday = next(d for d in WEEKDAYS if d in want["due"].lower())
        assert item.due is not None and weekday in item.due.lower(), (item.due, want["due"])
        assert "march" in item.due.lower()
        # The item points at the turn that says it, by its owner.
        turn = standup.turns[item.turn_index]
        assert turn.speaker == item.owner and item.start == turn.start
        assert weekday in turn.text.lower()


def test_standup_decisions(standup, facts):
    decisions = extract_decisions(standup)
    assert len(decisions) == len(facts["decisions"]) == 2
    assert "payment company" in decisions[0].text and "five percent" in decisions[0].text
    assert decisions[0].speaker == "Alice"
    assert "April fourteenth" in decisions[1].text and decisions[1].speaker == "Bob"
    for d in decisions:
        assert standup.turns[d.turn_index].start == d.start and d.text in standup.turns[d.turn_index].text


def test_standup_key_facts(standup):
    facts = extract_key_facts(standup)
    texts = [f.text for f in facts]
    pilot = [f for f in facts if "pilot will cost" in f.text]
    assert pilot, texts  # "The pilot will cost twelve thousand dollars." (spelled-out amount)
    assert pilot[0].speaker == "Carol" and pilot[0].start == pytest.approx(24.829)
    assert any("thirty thousand dollars" in t for t in texts), texts
    assert any("two hundred users" in t for t in texts), texts
    assert any("March tenth" in t for t in texts), texts  # a date that is nobody's commitment
    # Questions, decisions and commitments are not repeated as facts.
    assert not any(t.endswith("?") for t in texts)
    assert not any("decided" in t for t in texts)
    assert not any(t.startswith("I will") for t in texts)
    assert len(facts) <= 8


def test_key_facts_with_digits():
    t = _t(("A", "It costs $12,000. We need 15% more. About 200 users joined on March 3rd."), ("B", "Okay."))
    assert [f.text for f in extract_key_facts(t)] == ["It costs $12,000.", "We need 15% more.",
                                                       "About 200 users joined on March 3rd."]


def test_request_and_confirmation_are_one_item():
    t = _t(
        ("Alice", "Bob, can you send the report by Friday?"),
        ("Bob", "Yes. I will send the report by Friday."),
    )
    items = extract_action_items(t)
    assert len(items) == 1
    assert items[0].owner == "Bob"
    assert items[0].task == "send the report"
    assert items[0].due == "Friday"
    assert items[0].turn_index == 1  # the confirmation, the later and more specific one


def test_request_keeps_due_when_confirmation_has_none():
    t = _t(("Alice", "Bob, could you book the room before Monday?"), ("Bob", "Sure, I will book the room."))
    items = extract_action_items(t)
    assert [(i.owner, i.task, i.due) for i in items] == [("Bob", "book the room", "Monday")]


def test_named_and_team_commitments():
    t = _t(
        ("Alice", "Carol will call the vendor tomorrow. We will review the numbers by the end of the week."),
        ("Carol", "Fine."),
    )
    items = extract_action_items(t)
    assert [(i.owner, i.task, i.due) for i in items] == [
        ("Carol", "call the vendor tomorrow", None),
        ("the team", "review the numbers", "The end of the week"),
    ]


def test_not_tasks_and_unknown_names_are_ignored():
    t = _t(("Alice", "I will be there. It will rain. Zed will fix the build. I will see."), ("Bob", "Okay."))
    assert extract_action_items(t) == []


# ----------------------------------------------------------------------------------------- speaker names


def _diarized(*turns: tuple[str, str]) -> Transcript:
    out = []
    for i, (speaker, text) in enumerate(turns):
        words = [TranscriptWord(w, i * 5.0 + j * 0.3, i * 5.0 + j * 0.3 + 0.2, speaker) for j, w in enumerate(text.split())]
        out.append(Turn(speaker, text, words[0].start, words[-1].end, words))
    return Transcript(turns=out, source="x.wav", duration=100.0)


def test_name_speakers_from_addresses():
    t = _diarized(
        ("SPEAKER_00", "Good morning. Bob, can you start?"),  # -> the next speaker is Bob
        ("SPEAKER_01", "Thanks, Alice. The login page is done."),  # -> the previous speaker is Alice
        ("SPEAKER_02", "Not from me."),  # nobody names this one
        ("SPEAKER_01", "Nothing else."),
    )
    named = name_speakers(t)
    assert [turn.speaker for turn in named.turns] == ["Alice", "Bob", "SPEAKER_02", "Bob"]
    assert named.speakers == ["Alice", "Bob", "SPEAKER_02"]
    for turn in named.turns:
        assert {w.speaker for w in turn.words} == {turn.speaker}
    assert [turn.text for turn in named.turns] == [turn.text for turn in t.turns]
    assert named.source == t.source and named.duration == t.duration


def test_name_speakers_without_evidence_changes_nothing():
    t = _diarized(("SPEAKER_00", "The page is done."), ("SPEAKER_01", "Good, the tests pass too."))
    assert name_speakers(t) == t


def test_name_speakers_majority_and_no_duplicates():
    t = _diarized(
        ("SPEAKER_00", "Carol, how does the budget look?"),
        ("SPEAKER_01", "Fine."),
        ("SPEAKER_00", "Carol, can you share it?"),
        ("SPEAKER_01", "Yes."),
        ("SPEAKER_02", "Bob, can you comment?"),  # a wrong address, outvoted: SPEAKER_01 stays Carol
        ("SPEAKER_01", "Sure."),
    )
    named = name_speakers(t)
    assert named.speakers == ["SPEAKER_00", "Carol", "SPEAKER_02"]


def test_name_speakers_on_standup_keeps_real_names(standup):
    assert name_speakers(standup).speakers == ["Alice", "Bob", "Carol"]
