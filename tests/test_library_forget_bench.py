"""bench/library_forget.py end to end on two small meetings in QMSum's format: the forgotten speaker's needles are
answered before and not after, the controls both times, and the bench says so in its exit code."""

from __future__ import annotations

import json

from bench.library_forget import main


def _qmsum(path, lines):
    path.write_text(json.dumps({"meeting_transcripts": [{"speaker": s, "content": t} for s, t in lines]}))


def test_a_forgotten_speaker_s_needles_are_gone_from_the_library_and_no_one_else_s(tmp_path):
    data = tmp_path / "meetings"
    data.mkdir()
    lines = [("Anna", "We should look at the budget for the trip ."), ("Ben", "The coach is booked for Friday ."),
             ("Anna", "The hotel wants the list of names by Monday ."), ("Carl", "I can send the list tomorrow ."),
             ("Anna", "Then we need the menu for the dinner ."), ("Ben", "The restaurant sent two options .")] * 3
    _qmsum(data / "a.json", lines)
    _qmsum(data / "b.json", [(s.replace("Anna", "Dora"), t) for s, t in lines])
    out = tmp_path / "out"
    assert main(["--data", str(data), "--meetings", "2", "--out", str(out)]) == 0
    report = json.loads((out / "library_forget.json").read_text())["report"]
    assert report["target_right_before"] == 1.0 and report["target_right_after"] == 0.0
    assert report["control_right_before"] == 1.0 and report["control_right_after"] == 1.0
    assert report["target_numbers_in_index_after"] == 0.0 and report["control_numbers_in_index_after"] == 1.0
    assert report["target_words_in_file_in_clear"] == 0.0
