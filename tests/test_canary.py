"""Canary presets (issue 19 item 4): a KV preset on a share of sessions, compared, rolled back on a regression."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from app.platform.canary import CanaryRollout, Signal, rollout_for, signals_of
from app.platform.config import CanarySettings, KVSettings, load_settings
from encoders.errors import InputError

RATE = 16000


def _preset(folder: Path, text: str = "kv:\n  decode_top_k_blocks: 1\n") -> Path:
    path = folder / "canary.yaml"
    path.write_text(text)
    return path


def _ids(rollout: CanaryRollout, arm: str, count: int) -> list[str]:
    found = []
    for n in range(1000):
        candidate = f"m{n}"
        share = int(hashlib.sha256(candidate.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        if (share < rollout.fraction) == (arm == "canary"):
            found.append(candidate)
        if len(found) == count:
            return found
    raise AssertionError("no ids")


def test_a_signal_regresses_beyond_its_margin_relative_or_absolute():
    throughput = Signal("decode_tokens_per_second", True, 0.1, relative=True)
    assert not throughput.regressed(20.0, 18.5) and throughput.regressed(20.0, 17.5)
    drift = Signal("quality_drift_js", False, 0.01, relative=False)
    assert not drift.regressed(0.010, 0.019) and drift.regressed(0.010, 0.021)


def test_the_canary_runs_on_its_share_waits_for_enough_sessions_and_rolls_back_on_a_regression(tmp_path):
    audited = []
    rollout = CanaryRollout(_preset(tmp_path), 0.3, signals_of(CanarySettings()), 2, tmp_path, audited.append)
    arms = [rollout.arm(f"s{n}") for n in range(200)]
    assert 0.2 < arms.count("canary") / len(arms) < 0.4
    canary, baseline = _ids(rollout, "canary", 2), _ids(rollout, "baseline", 2)
    base = KVSettings()
    assert rollout.kv_for(base, canary[0]).decode_top_k_blocks == 1 and rollout.kv_for(base, canary[0]) != base
    assert rollout.kv_for(base, baseline[0]) is base
    for sid in canary + baseline:
        rollout.arm(sid)
    rollout.ended(baseline[0], {"decode_tokens_per_second": 20.0, "quality_drift_js": 0.01})
    rollout.ended(canary[0], {"decode_tokens_per_second": 10.0, "quality_drift_js": 0.2})
    rollout.ended("never-assigned", {"decode_tokens_per_second": 1.0})  # a resumed meeting: not counted
    assert rollout.evaluate() is None and rollout.state == "running", "one session per arm is not evidence yet"
    rollout.ended(baseline[1], {"decode_tokens_per_second": 22.0, "quality_drift_js": 0.012})
    rollout.ended(canary[1], {"decode_tokens_per_second": 21.0, "quality_drift_js": 0.30, "mode": "normal"})
    assert rollout.report()["ended"] == {"canary": 2, "baseline": 2}
    decision = rollout.evaluate()
    assert decision is not None and rollout.state == "rolled_back"
    evidence = decision.evidence
    assert evidence["quality_drift_js"]["regressed"] and evidence["decode_tokens_per_second"]["regressed"]
    assert evidence["quality_drift_js"]["canary_sessions"] == 2 and evidence["shadow_answer_agreement"]["canary"] is None
    assert not evidence["shadow_answer_agreement"]["compared"]
    assert audited == [decision]
    assert rollout.arm("a-new-session") == "baseline"
    assert rollout.arm(canary[0]) == "baseline", "an id opened again after the rollback gets the baseline"
    saved = json.loads(rollout.state_path.read_text())
    assert saved["state"] == "rolled_back" and "quality_drift_js" in saved["reason"]
    # A restarted process does not roll the same canary out again; a changed preset is a new canary.
    again = CanaryRollout(_preset(tmp_path), 0.3, signals_of(CanarySettings()), 2, tmp_path)
    assert again.state == "rolled_back" and all(again.arm(f"s{n}") == "baseline" for n in range(50))
    changed = CanaryRollout(_preset(tmp_path, "kv:\n  decode_top_k_blocks: 2\n"), 0.3, signals_of(CanarySettings()), 2,
                            tmp_path)
    assert changed.state == "running" and changed.name != again.name


def test_a_canary_that_is_as_good_keeps_running(tmp_path):
    rollout = CanaryRollout(_preset(tmp_path), 0.5, signals_of(CanarySettings()), 1, tmp_path)
    canary, baseline = _ids(rollout, "canary", 1)[0], _ids(rollout, "baseline", 1)[0]
    rollout.arm(canary), rollout.arm(baseline)
    assert rollout.report()["sessions"] == {"canary": 1, "baseline": 1}
    rollout.ended(baseline, {"decode_tokens_per_second": 20.0, "quality_drift_js": 0.010})
    rollout.ended(canary, {"decode_tokens_per_second": 19.0, "quality_drift_js": 0.015})
    assert rollout.evaluate() is None and rollout.state == "running"
    assert rollout.report()["sessions"] == {"canary": 0, "baseline": 0}


@pytest.mark.parametrize("text, message", [
    ("llm:\n  model: x\n", "one non-empty 'kv:' mapping"),
    ("kv: {}\n", "one non-empty 'kv:' mapping"),
    ("kv:\n  enabled: false\n", "kv.enabled cannot change"),
    ("kv:\n  warm_kinds: [int8]\n", "kv.warm_kinds cannot change"),  # the layout a resume must find
    ("kv:\n  cold: {host_mib: 1}\n", "kv.cold cannot change"),
    ("kv:\n  controller: {kp: .inf}\n", "invalid kv.controller.kp"),
    ("kv:\n  budget_ratio: 7\n", "invalid kv.budget_ratio"),
    ("kv: [1, 2\n", "cannot be read"),
])
def test_a_bad_canary_preset_is_refused_with_one_line(tmp_path, text, message):
    settings = load_settings(overrides={"home": str(tmp_path), "canary": {"preset": str(_preset(tmp_path, text))}})
    with pytest.raises(InputError, match=message):
        rollout_for(settings)
    assert rollout_for(load_settings(overrides={"home": str(tmp_path)})) is None


def test_live_sessions_run_their_arm_and_a_worse_canary_is_rolled_back_and_audited(scripted_runtime, tmp_path):
    """Real sessions on the tiny model: the canary reads one block per decode step, the baseline every block; the
    summaries asked at the end sample the sparse read's drift, the canary's is higher, and it is rolled back."""
    from scripted_parts import scripted_meeting

    from app.platform.audit import verify
    from app.platform.store import load_master_key

    meeting = scripted_meeting([
        ("SPEAKER_00", "Good morning. The pilot will cost twelve thousand dollars and the launch is in May."),
        ("SPEAKER_01", "Fine. Maria will send the contract on Friday and Omar will test the new build."),
        ("SPEAKER_00", "The budget for the campaign is forty thousand and the vendor wants a deposit."),
        ("SPEAKER_01", "We agreed to hire an auditor. The churn rate was three percent last quarter."),
    ])
    kv = {"block_size": 16, "recent_tokens": 16, "sink_tokens": 4, "budget_ratio": 1.0,
          "decode_top_k_blocks": 1000, "drift_sample_rate": 1.0}
    preset = _preset(tmp_path, "kv:\n  decode_top_k_blocks: 1\n")
    runtime = scripted_runtime(meeting, tmp_path / "home", kv=kv, canary={
        "preset": str(preset), "fraction": 0.5, "min_sessions": 1, "max_drift_rise": 0.0,
        "max_throughput_drop": 1.0, "max_agreement_drop": 1.0})
    try:
        rollout = runtime.canary
        canary_id, baseline_id = _ids(rollout, "canary", 1)[0], _ids(rollout, "baseline", 1)[0]
        for sid in (canary_id, baseline_id):
            session = runtime.new_session(sid)
            assert session.settings.kv.decode_top_k_blocks == (1 if sid == canary_id else 1000)
            session.feed_audio(meeting.audio, RATE)
            session.finish(timeout=180)
            session.summary()  # decoded from the KV: every step's read is compared with a dense one, after it
            assert session.settle(60)
            assert session.snapshot().kv.get("quality_drift_js") is not None, "the summary sampled the read"
            runtime.close_session(sid)
            # after the canary alone nothing is compared; the baseline's signal decides
            assert rollout.state == ("running" if sid == canary_id else "rolled_back"), rollout.report()
        evidence = rollout.decision.evidence["quality_drift_js"]
        # every block read: the dense pass agrees, up to float sums in another order (the answer in one forward)
        assert evidence["baseline"] < 1e-6 and evidence["canary"] > 1e-5 and evidence["regressed"]
        later = runtime.new_session(_ids(rollout, "canary", 2)[1])  # in the canary's share, but it is rolled back
        assert later.settings.kv.decode_top_k_blocks == 1000
        log_path = tmp_path / "home" / "audit.log"
        records = [json.loads(line) for line in log_path.read_text().splitlines()]
        rollouts = [r for r in records if r.get("op", r.get("operation")) == "rollout"]
        assert len(rollouts) == 1 and rollouts[0]["source"] == rollout.name, records[-1]
        assert verify(log_path, load_master_key(runtime.settings, create_key=False).audit_key()).ok
    finally:
        runtime.close()


def test_the_shipped_canary_presets_are_valid(tmp_path):
    from app.platform.config import preset_path

    presets = sorted((preset_path("cpu-small").parent / "canaries").glob("*.yaml"))
    assert presets
    for preset in presets:
        rollout = rollout_for(load_settings(overrides={"home": str(tmp_path), "canary": {"preset": str(preset)}}))
        assert rollout is not None and rollout.kv_changes
