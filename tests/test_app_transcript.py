"""Transcript readers, writers, atomic writes and the word -> turn building steps."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.text.transcript import (
    Transcript,
    TranscriptWord,
    Turn,
    atomic_write,
    load_transcript,
    realign_to_sentences,
    to_json,
    to_markdown,
    to_srt,
    to_vtt,
    turns_from_words,
    write_all,
)
from bench.shared_data import qmsum_val
from encoders.errors import InputError
from tests.shared_data_marks import mark, needs_shared

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "samples" / "standup" / "reference.json"

SRT_STAMP = r"\d{2}:\d{2}:\d{2},\d{3}"
VTT_STAMP = r"\d{2}:\d{2}:\d{2}\.\d{3}"


def _words(spec: list[tuple[str, str]], step: float = 0.5) -> list[TranscriptWord]:
    return [TranscriptWord(text, i * step, i * step + step * 0.8, speaker) for i, (speaker, text) in enumerate(spec)]


def _sample() -> Transcript:
    """Two turns with word times (one longer than a caption line) and one without words."""
    long_text = ("the payment page needs one more week of work and then we can test it with real users " * 2).split()
    w1 = [TranscriptWord(t, 1.0 + 0.3 * i, 1.25 + 0.3 * i, "Alice", 0.9) for i, t in enumerate(long_text)]
    w2 = [TranscriptWord(t, 3725.0 + 0.4 * i, 3725.3 + 0.4 * i, "Bob") for i, t in enumerate("Sure, I agree.".split())]
    turns = [
        Turn("Alice", " ".join(long_text), w1[0].start, w1[-1].end, w1),
        Turn("Bob", "Sure, I agree.", w2[0].start, w2[-1].end, w2),
        Turn("Carol", "No words here, only a time.", 3800.5, 3802.25),
    ]
    return Transcript(turns=turns, source="meeting.ogg", duration=3803.0)


# ----------------------------------------------------------------------------------------- reading


def test_load_own_json():
    ref = json.loads(REFERENCE.read_text())
    t = load_transcript(REFERENCE)
    assert t.source == "meeting.ogg"
    assert t.duration == pytest.approx(ref["duration"])
    assert t.speakers == ["Alice", "Bob", "Carol"]
    assert len(t.turns) == len(ref["turns"])
    assert t.has_times
    first = t.turns[0]
    assert first.speaker == "Alice" and first.start == pytest.approx(0.5) and first.text.startswith("Good morning.")


@mark(needs_shared("qmsum", "val"))
def test_load_qmsum_json():
    folder = qmsum_val()
    path = sorted(folder.glob("*.json"))[0]
    data = json.loads(path.read_text())
    t = load_transcript(path)
    assert len(t.turns) == len(data["meeting_transcripts"])
    assert t.source == path.name
    assert not t.has_times
    assert set(t.speakers) == {str(x["speaker"]) for x in data["meeting_transcripts"]}
    text = " ".join(turn.text for turn in t.turns)
    assert "{disfmarker}" not in text and "{vocalsound}" not in text
    assert " ." not in text and " 're" not in text  # QMSum's tokenisation is undone
    assert not any("  " in turn.text for turn in t.turns)  # removed markers leave no runs of spaces


def test_load_qmsum_shape_from_tmp(tmp_path):
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"meeting_transcripts": [
        {"speaker": "PhD A", "content": "we 're done {disfmarker} it is n't ready ."},
        {"speaker": "Grad B", "content": "okay ."},
    ]}))
    t = load_transcript(path)
    assert [x.speaker for x in t.turns] == ["PhD A", "Grad B"]
    assert t.turns[0].text == "we're done it isn't ready."
    assert t.turns[1].text == "okay."


def test_load_plain_text_with_and_without_times(tmp_path):
    timed = tmp_path / "timed.txt"
    timed.write_text("# a comment\n[00:05] Alice: Bob, can you start?\n[1:02:03] Bob: Sure.\n  and more words\n")
    t = load_transcript(timed)
    assert [x.speaker for x in t.turns] == ["Alice", "Bob"]
    assert t.turns[0].start == 5.0 and t.turns[1].start == 3723.0
    assert t.turns[1].text == "Sure. and more words"  # a continuation line joins the turn
    assert t.has_times

    plain = tmp_path / "plain.txt"
    plain.write_text((ROOT / "samples" / "standup" / "reference.txt").read_text())
    t = load_transcript(plain)
    assert t.speakers == ["Alice", "Bob", "Carol"]
    assert len(t.turns) == 22
    assert all(x.start is None for x in t.turns) and not t.has_times


def test_plain_text_without_speakers(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("just some words\nmore words\n")
    t = load_transcript(path)
    # each line its own turn: a meeting's worth of unmarked lines as one turn cannot be read in parts
    assert [(x.speaker, x.text) for x in t.turns] == [("SPEAKER_00", "just some words"), ("SPEAKER_00", "more words")]


def test_lines_after_a_speaker_go_on_their_turn(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("intro line\nAna: we start\nand go on <laugh/>\nBen: ok\n")
    t = load_transcript(path)
    assert [(x.speaker, x.text) for x in t.turns] == [
        ("SPEAKER_00", "intro line"), ("Ana", "we start and go on"), ("Ben", "ok")]


def test_parenthesised_speakers_open_turns(tmp_path):
    """ELITR's minuting transcripts: "(PERSON4) text" opens a turn, the next lines are the same speaker's, and
    annotators' tags are not words."""
    path = tmp_path / "meeting.txt"
    path.write_text("<another_language/>\nHello all.\n(PERSON4) So we start.\nThe budget: two weeks.\n<laugh/>\n"
                    "(PERSON10) Yes, <unintelligible/> fine.\n(Ana Lee) Bye.\n")
    t = load_transcript(path)
    assert [(x.speaker, x.text) for x in t.turns] == [
        ("SPEAKER_00", "Hello all."), ("PERSON4", "So we start. The budget: two weeks."), ("PERSON10", "Yes, fine."),
        ("Ana Lee", "Bye.")]


def test_a_parenthesis_in_colon_transcripts_is_text(tmp_path):
    path = tmp_path / "meeting.txt"
    path.write_text("Ana: hello\n(Laughs) that was fun\nBen: ok\n")
    assert [x.speaker for x in load_transcript(path).turns] == ["Ana", "Ben"]


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("empty.json", b"", "empty"),
        ("blank.txt", b"  \n\n", "empty"),
        ("latin1.txt", "Alice: caf\u00e9 cr\u00e8me".encode("latin-1"), "UTF-8"),
        ("binary.json", bytes(range(256)), "UTF-8"),
        ("broken.json", b'{"turns": [', "not valid JSON"),
        ("list.json", b"[1, 2, 3]", "unknown JSON transcript"),
        ("other.json", b'{"segments": []}', "unknown JSON transcript"),
        ("malformed.json", b'{"turns": [{"text": "no speaker"}]}', "malformed turn"),
        ("badword.json", b'{"turns": [{"speaker": "A", "text": "x", "words": [{"w": 1}]}]}', "malformed turn"),
        ("silent.json", b'{"turns": [{"speaker": "A", "text": "   "}]}', "no speech"),
        ("noturns.json", b'{"turns": []}', "no speech"),
        ("qmsum-empty.json", b'{"meeting_transcripts": [{"speaker": "A", "content": "{disfmarker}"}]}', "no speech"),
        ("comments.txt", b"# only a comment\n", "no speech"),
    ],
)
def test_bad_transcripts_raise_input_error(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError, match=match):
        load_transcript(path)


def test_missing_transcript(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_transcript(tmp_path / "nope.json")
    with pytest.raises(InputError, match="not found"):
        load_transcript(tmp_path)  # a folder is not a transcript file


# ----------------------------------------------------------------------------------------- writing


def test_srt_format_and_cue_count():
    t = _sample()
    srt = to_srt(t)
    blocks = [b for b in srt.strip().split("\n\n") if b.strip()]
    # The long Alice turn (> 84 characters) becomes 2 cues; Bob's turn 1; Carol's (no words) 1.
    assert len(blocks) == 4
    for number, block in enumerate(blocks, start=1):
        lines = block.split("\n")
        assert lines[0] == str(number)
        assert re.fullmatch(rf"{SRT_STAMP} --> {SRT_STAMP}", lines[1]), lines[1]
        assert re.match(r"(Alice|Bob|Carol): ", lines[2])
        assert all(len(line) <= 84 + len("Alice: ") for line in lines[2:])
    assert blocks[0].split("\n")[1].startswith("00:00:01,000 --> ")
    assert "01:02:05,000 --> 01:02:06,100" in blocks[2]  # hours; 3725.0 + 0.4 * 2 + 0.3 = 3726.1
    assert "01:03:20,500 --> 01:03:22,250" in blocks[3]


def test_vtt_format_and_cue_count():
    t = _sample()
    vtt = to_vtt(t)
    assert vtt.startswith("WEBVTT\n\n")
    cues = [b for b in vtt[len("WEBVTT\n\n"):].strip().split("\n\n") if b.strip()]
    assert len(cues) == 4
    for cue in cues:
        lines = cue.split("\n")
        assert re.fullmatch(rf"{VTT_STAMP} --> {VTT_STAMP}", lines[0]), lines[0]
        assert "," not in lines[0]
    assert cues[2].startswith("01:02:05.000 --> 01:02:06.100\nBob: Sure, I agree.")


def test_captions_skip_turns_without_times():
    t = Transcript(turns=[Turn("A", "untimed"), Turn("B", "timed", 1.0, 2.0)])
    assert to_srt(t).count(" --> ") == 1
    assert "untimed" not in to_vtt(t)


def test_markdown_has_speakers_and_times():
    md = to_markdown(_sample())
    assert md.startswith("# Transcript: meeting.ogg")
    assert "Speakers: Alice, Bob, Carol" in md
    assert "**[00:01] Alice:** the payment page" in md
    assert "**[1:02:05] Bob:** Sure, I agree." in md
    untimed = to_markdown(Transcript(turns=[Turn("A", "hi"), Turn("B", "hello")]))
    assert "**[turn 2] B:** hello" in untimed


def test_json_round_trips(tmp_path):
    t = _sample()
    path = atomic_write(tmp_path / "t.json", to_json(t))
    back = load_transcript(path)
    assert back == t
    assert json.loads(path.read_text())["format"] == "minutia.transcript/1"
    ref = load_transcript(REFERENCE)
    assert load_transcript(atomic_write(tmp_path / "ref.json", to_json(ref))) == ref


def test_write_all_writes_every_format(tmp_path):
    written = write_all(_sample(), tmp_path / "out", "m.transcript")
    assert sorted(p.name for p in written) == sorted(f"m.transcript.{x}" for x in ("json", "srt", "vtt", "md"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in written)


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "a.txt"
    atomic_write(target, "one")
    atomic_write(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_atomic_write_failure_keeps_target(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old content")
    with pytest.raises(UnicodeEncodeError):
        atomic_write(target, "half written \ud800 never")  # a lone surrogate fails while writing
    assert target.read_text() == "old content"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    with pytest.raises(UnicodeEncodeError):
        atomic_write(tmp_path / "new.txt", "\ud800")
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


# ----------------------------------------------------------------------------------------- building


def test_turns_from_words_groups_speakers_and_pauses():
    words = [
        TranscriptWord("Hello", 0.0, 0.4, "A"),
        TranscriptWord("there", 0.5, 0.9, "A"),
        TranscriptWord(",", 0.9, 0.9, "A"),
        TranscriptWord("Bob.", 1.0, 1.3, "A"),
        TranscriptWord("Hi", 1.6, 1.9, "B"),
        TranscriptWord("again.", 5.0, 5.4, "B"),  # a 3.1 s pause starts a new turn
        TranscriptWord("Bye.", 5.6, 6.0, "A"),
    ]
    turns = turns_from_words(words)
    assert [(t.speaker, t.text, t.start, t.end) for t in turns] == [
        ("A", "Hello there, Bob.", 0.0, 1.3),
        ("B", "Hi", 1.6, 1.9),
        ("B", "again.", 5.0, 5.4),
        ("A", "Bye.", 5.6, 6.0),
    ]
    assert sum(len(t.words) for t in turns) == len(words)
    assert len(turns_from_words(words, max_gap=5.0)) == 3
    assert turns_from_words([]) == []


def test_realign_moves_dangling_sentence_start():
    words = _words([("A", "And"), ("A", "what"), ("A", "about"), ("A", "the"), ("A", "pilot?"), ("A", "The"),
                    ("B", "pilot"), ("B", "will"), ("B", "cost"), ("B", "money.")])
    fixed = realign_to_sentences(words)
    assert [w.speaker for w in fixed] == ["A"] * 5 + ["B"] * 5
    assert [(w.text, w.start, w.end) for w in fixed] == [(w.text, w.start, w.end) for w in words]
    turns = turns_from_words(fixed)
    assert [t.text for t in turns] == ["And what about the pilot?", "The pilot will cost money."]


def test_realign_leaves_correct_boundary_alone():
    words = _words([("A", "And"), ("A", "the"), ("A", "pilot?"), ("B", "The"), ("B", "pilot"), ("B", "costs.")])
    assert realign_to_sentences(words) == words


def test_realign_does_not_move_long_tails_or_unfinished_runs():
    # More than max_tail (3) words after the sentence end: a real turn, not a dangling start.
    long_tail = _words([("A", "Done."), ("A", "So"), ("A", "what"), ("A", "about"), ("A", "the"),
                        ("B", "pilot"), ("B", "costs.")])
    assert realign_to_sentences(long_tail) == long_tail
    # No sentence end in A's run at all: nothing to go by.
    no_end = _words([("A", "well"), ("A", "so"), ("B", "yes"), ("B", "indeed.")])
    assert realign_to_sentences(no_end) == no_end


def test_markdown_output_reads_back(tmp_path):
    from app.text.transcript import load_transcript, to_markdown

    original = load_transcript(Path(__file__).resolve().parent.parent / "samples" / "standup" / "reference.json")
    path = tmp_path / "t.md"
    path.write_text(to_markdown(original))
    again = load_transcript(path)
    assert [t.speaker for t in again.turns] == [t.speaker for t in original.turns]
    assert [t.text for t in again.turns] == [t.text for t in original.turns]
    assert [int(t.start) for t in again.turns] == [int(t.start) for t in original.turns]


def test_a_colon_inside_a_parenthesised_turn_is_text(tmp_path):
    path = tmp_path / "meeting.txt"
    path.write_text("(PERSON4) The plan: two weeks.\n(PERSON5) Dates: Monday.\n")
    assert [(x.speaker, x.text) for x in load_transcript(path).turns] == [
        ("PERSON4", "The plan: two weeks."), ("PERSON5", "Dates: Monday.")]
    path.write_text("(PERSON4) So the plan is this:\nwe do A: first\nthen B: second\n(PERSON5) Ok.\n")
    assert [x.speaker for x in load_transcript(path).turns] == ["PERSON4", "PERSON5"]


def test_a_line_after_a_timed_anonymous_turn_goes_on_it(tmp_path):
    path = tmp_path / "meeting.txt"
    path.write_text("[00:01] SPEAKER_00: hello\nwrapped <b>bold</b> claim\n")
    assert [(x.speaker, x.text) for x in load_transcript(path).turns] == [("SPEAKER_00", "hello wrapped bold claim")]


def test_one_sentence_end_rule_for_the_buffer_the_live_line_and_the_turn_edges():
    from encoders.asr import ends_sentence

    assert [ends_sentence(w) for w in ("done.", "why? ", "wait…", "so,", "the", "")] == [True, True, True, False, False, False]
    # a trailing ellipsis ends a sentence at a turn edge too (it used to end one only for a live line)
    words = [TranscriptWord("Well…", 0.0, 0.5, "A"), TranscriptWord("The", 0.6, 0.8, "A"),
             TranscriptWord("pilot", 0.9, 1.2, "B"), TranscriptWord("starts.", 1.3, 1.6, "B")]
    assert [w.speaker for w in realign_to_sentences(words)] == ["A", "B", "B", "B"]
