"""The KV quality bench's needles and meeting split (bench/kv_quality.py, bench/qmsum_split.py): the default
needles stay those every earlier figure was measured with, the wide set covers every kind, and a held-out
meeting is never one the KV store was built on."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import kv_quality  # noqa: E402
from bench.kv_quality import NEEDLE_KINDS, make_needles  # noqa: E402
from bench.qmsum_split import KV_BUILT_ON, kv_part_of, split_of  # noqa: E402
from bench.shared_data import qmsum_val  # noqa: E402
from tests.shared_data_marks import mark, needs_shared  # noqa: E402

DATA = qmsum_val()


def _facts(needles) -> list[tuple[str, str, str, str]]:
    return [(n.kind, n.fact, n.question, n.answer) for n in needles]


def test_default_needles_are_those_of_the_earlier_figures() -> None:
    facts = _facts(make_needles(20, 0))
    assert facts[0] == ("code", "The access code for project Zephyr is 5104.",
                        "What is the access code for project Zephyr?", "5104")
    # the 20 facts of the documented runs (seed 0), as the code before the wide kinds made them
    assert hashlib.sha256(repr(facts).encode()).hexdigest()[:16] == "909f384c32734fa9"


def test_wide_needles_cover_every_kind_and_read_back_from_their_prefix() -> None:
    needles = make_needles(60, 3, NEEDLE_KINDS)
    assert _facts(needles) == _facts(make_needles(60, 3, NEEDLE_KINDS))
    assert {k: sum(n.kind == k for n in needles) for k in NEEDLE_KINDS} == {k: 10 for k in NEEDLE_KINDS}
    assert len({n.question for n in needles}) == 60
    for n in needles:
        assert n.fact.startswith(f"{n.prefix} {n.answer}") and n.fact[len(n.prefix) + len(n.answer) + 1] in " ."


def test_an_unknown_needle_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="needle kinds are"):
        make_needles(3, 0, ("code", "phone"))


def test_meetings_the_kv_store_was_built_on_are_never_held_out() -> None:
    assert all(kv_part_of(f"{name}.json") == "tuning" for name in KV_BUILT_ON)
    assert split_of("TS3010b.json") == "held-out" and kv_part_of("TS3010b.json") == "tuning"


@mark(needs_shared("qmsum", "val"))
def test_the_held_out_part_has_enough_meetings() -> None:
    parts = [kv_part_of(p.name) for p in DATA.glob("*.json")]
    assert parts.count("held-out") >= 8 and parts.count("tuning") >= 15


def test_a_cold_tier_never_read_has_no_hit_rate_in_the_aggregate() -> None:
    """A meeting whose cold tier was never read reports hit rate None; the aggregate skips it (it crashed a
    20-minute held-out run at the very end)."""
    from bench.kv_quality import aggregate

    def result(cold):
        return {"queries": [{"retention": 1.0, "nll": 1.0}], "needles": [{"correct": True, "retention": 1.0,
                "kind": "code"}], "full_bytes": 10, "sliding_bytes": 1, "prefill_s": 1.0, **({"cold": cold} if cold else {})}

    meetings = [{"methods": {"full": result(None), "m": result({"prefetch_hit_rate": rate, "recalled": 1, "evicted": 1,
                                                               "peak_answer_fraction": 0.2})}} for rate in (None, 0.5)]
    cold = aggregate(meetings)["m"]["cold"]
    assert cold["prefetch_hit_rate"] == 0.5 and cold["evicted"] == 2


def test_with_no_press_run_the_press_comparison_says_na_not_yes() -> None:
    """A run with ``--presses ""`` said "better than every press: yes (beats none)"."""
    from bench.kv_quality import target_lines

    row = {"needle_vs_full": 0.5, "nll_recovery": 0.96, "span_retention": 0.94, "needle_accuracy": 0.35}
    alone = target_lines({"minutia@0.25": row}, [], [0.25])
    assert "n/a (no press was run)" in alone[0] and ": yes" not in alone[0]
    press = {"span_retention": 0.3, "nll_recovery": 0.9, "needle_accuracy": 0.1}
    beaten = target_lines({"minutia@0.25": row, "SnapKV@0.25": press}, ["SnapKV"], [0.25])
    assert "better than every press on all three: yes (beats SnapKV" in beaten[0]


@pytest.mark.parametrize("argv, fragment", [
    (["--exact-max-blocks", "-1"], "--exact-max-blocks must be >= 0"),
    (["--limit", "0"], "--limit must be >= 1"),
    (["--memory-budget", "-0.5"], "--memory-budget must be >= 0.0"),
])
def test_an_option_below_its_least_value_is_a_usage_error(argv, fragment, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        kv_quality.parse_args(argv)
    assert stopped.value.code == 2 and fragment in capsys.readouterr().err


@pytest.mark.parametrize("argv, fragment", [
    (["--budgets", "abc"], "--budgets must be fractions in (0, 1]"),
    (["--budgets", "0,0.5"], "--budgets must be fractions in (0, 1]"),
    (["--weights", "x=y"], "bad minutia settings"),
    (["--warm-kinds", "int9"], "bad minutia settings"),
])
def test_bad_budgets_and_settings_stop_before_any_model_loads(argv, fragment, tmp_path, capsys) -> None:
    assert kv_quality.main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert fragment in capsys.readouterr().err.replace("\n", " ")
    assert not (tmp_path / "out").exists()


def test_focus_finds_the_needle_line_among_the_turns_in_context() -> None:
    """--focus-lines asks the app's retrieval for the question's lines: their turns and token ranges, nothing from
    a turn the truncated context does not hold."""
    import torch

    turns = [kv_quality.Turn("A", "We looked at the churn numbers for the quarter.", 0),
             kv_quality.Turn("B", "The access code for project Falcon is 4471.", None, needle=0),
             kv_quality.Turn("A", "Lunch is at noon on Friday.", 1),
             kv_quality.Turn("C", "The access code for project Orchid is 9120.", 2)]
    meeting = kv_quality.Meeting("m", turns, [])
    meeting.token_turn = torch.tensor([-1, 0, 0, 0, 1, 1, 1, 2, 2])  # turn 3 fell outside the context
    found = kv_quality.focus_turns(meeting, "What is the access code for project Falcon?", 1)
    assert found == [1]
    assert kv_quality.focus_turns(meeting, "What is the access code for project Orchid?", 3)[0] != 3
    assert kv_quality.turn_token_ranges(meeting, [1, 3, 0]) == [(4, 7), (1, 4)]
    # a speaker's turn that ends without a stop runs on into their next one as one sentence: both turns are the line
    meeting.turns[0] = kv_quality.Turn("B", "{vocalsound}", 0)  # the same speaker, no stop
    meeting.line_index = None
    assert kv_quality.focus_turns(meeting, "What is the access code for project Falcon?", 1) == [0, 1]


def test_runs_pool_their_needles_not_their_ratios() -> None:
    """bench/kv_pool.py: needles right over needles the full cache got right, summed over the runs (a run with more
    needles counts more), NLL recovery averaged, the single runs' spread kept; a method some run lacks is left out."""
    from bench.kv_pool import pool

    def run(full_acc, acc, needles, nll, extra=None):
        results = {"full": {"needle_accuracy": full_acc, "needles": needles, "nll_recovery": 1.0, "span_retention": 1.0},
                   "m": {"needle_accuracy": acc, "needles": needles, "nll_recovery": nll, "span_retention": 0.9}}
        return {"results": {**results, **(extra or {})}}

    pooled = pool([run(0.5, 0.25, 40, 0.9), run(1.0, 1.0, 10, 1.0, {"only-here": {}})])
    assert set(pooled) == {"full", "m"}
    m = pooled["m"]
    assert m["needle_vs_full"] == pytest.approx((10 + 10) / (20 + 10))  # not the mean of 0.5 and 1.0
    assert (m["needle_vs_full_min"], m["needle_vs_full_max"]) == (0.5, 1.0)
    assert m["nll_recovery"] == pytest.approx(0.95) and m["needles"] == 50 and m["runs"] == 2
