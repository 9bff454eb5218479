"""TimelineIndex: time <-> tokens <-> blocks per modality, joint top-k, rollback, persistence."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.timeline import TimelineIndex, blocks_of_ranges


def _meeting() -> TimelineIndex:
    """Speech turns every 10 s (10 tokens each), a slide at 25 s and 52 s, a prompt at the end."""
    tl = TimelineIndex()
    pos = 0
    for i in range(6):
        if i == 3:
            tl.add("video", 25.0, 52.0, pos, pos + 5, text="Budget 2027: 1.2M")
            pos += 5
        tl.add("audio", 10.0 * i, 10.0 * i + 9.0, pos, pos + 10, speaker=f"S{i % 2}", text=f"turn {i}")
        pos += 10
    tl.add("video", 52.0, 60.0, pos, pos + 5, text="Roadmap")
    pos += 5
    tl.add("text", 60.0, 60.0, pos, pos + 7, text="question")
    return tl


def test_time_and_token_lookups() -> None:
    tl = _meeting()
    assert len(tl) == 9
    # turn 1 = tokens 10..20 at 10-19 s; the slide (tokens 30..35) spans 25-52 s
    assert tl.tokens_in(11.0, 12.0) == [(10, 20)]
    assert tl.tokens_in(26.0, 27.0, modality="video") == [(30, 35)]
    assert tl.tokens_in(29.2, 29.8, modality="audio") == []  # between turns 2 and 3
    assert tl.tokens_in(29.2, 29.8) == [(30, 35)]  # ... but the slide is up
    assert tl.tokens_in(20.0, 31.0) == [(20, 45)]  # turns 2, 3 and the slide between them merge
    assert tl.tokens_in(100.0, 200.0) == []
    assert tl.time_of(15) == pytest.approx(10.0 + 9.0 * 5 / 10)
    assert tl.time_of(10_000) is None
    segs = tl.segments_for_tokens(28, 36)
    assert [s.modality for s in segs] == ["audio", "video", "audio"]
    assert segs[1].text.startswith("Budget")
    assert tl.blocks_for(26.0, 27.0, block_size=8, modality="video").tolist() == [3, 4]
    assert blocks_of_ranges([(0, 1), (7, 9), (64, 65)], 8).tolist() == [0, 1, 8]
    # the 0-length question segment at 60 s is found by a window that contains the instant
    assert tl.tokens_in(59.5, 60.0, modality="text") == [(70, 77)]


def test_bad_input_is_refused() -> None:
    tl = _meeting()
    with pytest.raises(ValueError, match="modality"):
        tl.add("smell", 0, 1, 100, 101)
    with pytest.raises(ValueError, match="overlaps"):
        tl.add("audio", 70, 71, 5, 9)
    with pytest.raises(ValueError, match="time"):
        tl.add("audio", 71, 70, 100, 101)


def test_truncate_is_rollback() -> None:
    tl = _meeting()
    before = tl.to_dict()
    tl.add("text", 61.0, 61.0, 77, 90, text="answer")
    tl.truncate(77)
    assert tl.to_dict() == before
    tl.truncate(73)  # cuts the question segment in the middle
    assert tl.segment(len(tl) - 1).token_end == 73
    tl.truncate(0)
    assert len(tl) == 0 and tl.tokens_in(0, 100) == []


def test_joint_top_k_with_embeddings_and_persistence() -> None:
    rng = np.random.default_rng(0)
    budget_text, budget_image = rng.normal(size=16), rng.normal(size=8)  # modalities embed differently
    tl = TimelineIndex()
    pos = 0
    for i in range(20):  # speech every 5 s; turn 7 (35-40 s) talks about the budget
        vec = budget_text + 0.1 * rng.normal(size=16) if i == 7 else rng.normal(size=16)
        tl.add("audio", 5.0 * i, 5.0 * i + 4.5, pos, pos + 8, speaker="A", embedding=vec)
        pos += 8
        if i in (3, 7, 15):  # slides; the one at 35 s shows the budget
            vec = budget_image + 0.1 * rng.normal(size=8) if i == 7 else rng.normal(size=8)
            tl.add("video", 5.0 * i + 1, 5.0 * i + 1, pos, pos + 4, embedding=torch.tensor(vec))
            pos += 4
    query = {"audio": budget_text, "video": budget_image}
    best = tl.top_segments(2, query=query)
    assert {h.segment.start_s for h in best} == {35.0, 36.0}
    assert tl.top_segments(1, query=query, modality="video")[0].segment.start_s == 36.0
    assert tl.top_segments(1, query=query, window=(0.0, 20.0))[0].segment.start_s < 20.0
    windows = tl.top_windows(2, window_s=10.0, query=query)
    assert (windows[0].start_s, windows[0].end_s) == (30.0, 40.0)
    assert {s.modality for s in windows[0].segments} == {"audio", "video"}
    assert windows[0].score > windows[1].score
    # explicit per-segment scores work the same way
    scores = np.zeros(len(tl))
    scores[2] = 5.0
    assert tl.top_segments(1, scores=scores)[0].segment.index == 2
    with pytest.raises(ValueError, match="either"):
        tl.top_segments(1)
    # persistence: JSON round trip keeps queries identical
    restored = TimelineIndex.from_dict(json.loads(json.dumps(tl.to_dict())))
    assert restored.to_dict() == tl.to_dict()
    assert [h.segment for h in restored.top_segments(3, query=query)] == [h.segment for h in tl.top_segments(3, query=query)]


def test_hours_of_meeting_query_fast() -> None:
    """60 000 segments (a long meeting): adding and querying stay cheap (bisect, no Python scans)."""
    tl = TimelineIndex()
    t0 = time.perf_counter()
    for i in range(60_000):
        tl.add("audio" if i % 10 else "video", 0.3 * i, 0.3 * i + 0.25, 12 * i, 12 * i + 12)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    for j in range(200):
        tl.tokens_in(100.0 * j, 100.0 * j + 30.0)
        tl.time_of(7 * j * 100)
    queried = time.perf_counter() - t0
    assert tl.tokens_in(300.0, 303.0) == [(12_000, 12_132)]
    assert built < 5.0 and queried < 1.0, (built, queried)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 20), st.integers(0, 30), st.integers(0, 2)),
                min_size=1, max_size=40),
       st.floats(0, 120), st.floats(0, 30))
def test_window_query_matches_brute_force(spec, t0, width) -> None:
    tl = TimelineIndex()
    pos, rows = 0, []
    for start, dur, n_tok, mod in spec:
        tl.add(("text", "audio", "video")[mod], start, start + dur, pos, pos + n_tok)
        rows.append((start, start + dur, pos, pos + n_tok))
        pos += n_tok
    t1 = t0 + width
    expected = [i for i, (s, e, _, _) in enumerate(rows) if e >= t0 and s <= t1 and (e > t0 or s == e or t0 == t1)]
    assert tl.indices_in(t0, t1).tolist() == expected
    covered = set()
    for i in expected:
        covered |= set(range(rows[i][2], rows[i][3]))
    assert {p for s, e in tl.tokens_in(t0, t1) for p in range(s, e)} == covered
