"""kvstore.control: the PID on device memory, the sparsity bandit, and the controller a live context steps."""

from __future__ import annotations

import random

import pytest

from kvstore.attention import MINUTIA_ATTENTION
from kvstore.cache import TieredCache
from kvstore.control import PID, ControllerConfig, KVController, SparsityBandit, cap_binds

try:
    from kv_helpers import feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids

SETTINGS = dict(block_size=8, compress=True, budget_ratio=1.0, warm_kinds=("int4",), sink_tokens=4,
                recent_tokens=16, allow_drop=True)


def test_the_pid_settles_a_plant_with_an_offset_at_its_setpoint() -> None:
    # The plant holds 94% of what it is asked for (like compression's hysteresis): P alone stays short of the
    # setpoint, the integral closes the gap.
    pid = PID(0.85, kp=0.5, ki=0.3, low=0.3, high=0.95)
    measured = 0.0
    for _ in range(60):
        measured = 0.94 * pid.step(measured)
    assert measured == pytest.approx(0.85, abs=0.005)
    assert pid.output == pytest.approx(0.85 / 0.94, abs=0.01)
    only_p = PID(0.85, kp=0.5, ki=0.0, low=0.3, high=0.95)
    measured = 0.0
    for _ in range(60):
        measured = 0.94 * only_p.step(measured)
    assert measured < 0.83, "without the integral the offset stays"


def test_the_pid_does_not_wind_up_while_its_output_is_clamped() -> None:
    pid = PID(0.85, kp=0.5, ki=0.3, low=0.3, high=0.95)
    for _ in range(50):  # a plant that cannot follow: the error stays positive, the output at its ceiling
        pid.step(0.2)
    assert pid.output == 0.95
    steps = 0
    while pid.step(0.9) >= 0.95 and steps < 20:  # the plant overshoots: the output must come down at once
        steps += 1
    assert steps <= 1, "an integral wound up during the clamp would hold the output at the ceiling for long"


def _scripted_bandit_run(bandit: SparsityBandit, speed: dict, js: dict, answers: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    for _ in range(answers):
        arm = bandit.choose(resident_blocks=40)
        bandit.update(arm, 40, speed[arm] * (1 + rng.gauss(0, 0.03)), [js[arm]])
    return dict(bandit.pulls)


def test_the_bandit_learns_the_arm_with_the_best_reward_and_the_js_penalty_counts() -> None:
    speed = {4: 30.0, 16: 24.0, None: 18.0}
    clean = {4: 0.01, 16: 0.005, None: 0.0}
    pulls = _scripted_bandit_run(SparsityBandit((4, 16, None)), speed, clean, 60)
    assert pulls[4] >= 45, pulls  # fastest, within the JS threshold
    # The fastest arm now reads badly (JS 1.0: reward x 0.51): the middle one is the best.
    pulls = _scripted_bandit_run(SparsityBandit((4, 16, None)), speed, {**clean, 4: 1.0}, 60)
    assert pulls[16] >= 40 and pulls[4] <= 10, pulls


def test_the_bandit_tries_every_arm_first_and_refuses_bad_arms() -> None:
    bandit = SparsityBandit((8, None, 2))
    seen = []
    for _ in range(3):
        arm = bandit.choose(10)
        seen.append(arm)
        bandit.update(arm, 10, 20.0, [])
    assert seen == [8, None, 2]
    # Rewards come when an answer's quality signal is measured, after the answer: arms chosen before any reward
    # came are still taken in turn, never one arm again and again.
    waiting = SparsityBandit((8, None, 2))
    assert [waiting.choose(10) for _ in range(4)] == [8, None, 2, 8] and not waiting.pulls
    waiting.update(None, 10, 20.0, [])
    assert waiting.pulls[0] == 1 and waiting.choose(10) in (8, None, 2)
    assert bandit.reward(20.0, 0.02) == pytest.approx(1.0) and bandit.reward(20.0, 0.22) == pytest.approx(0.9)
    with pytest.raises(ValueError):
        SparsityBandit((4, 4))
    with pytest.raises(ValueError):
        SparsityBandit(())


def _capped_meeting(controller: bool, squeeze_at: int = 1024):
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    ids = token_ids(2048)
    probe = TieredCache(config=model.config, block_size=8)
    feed(model, probe, ids, chunk=32)
    cap = int(0.3 * probe.kv_bytes())
    cache = TieredCache(config=model.config, **{**SETTINGS, "device_cap_bytes": cap})
    ctl = KVController(cache, ControllerConfig()) if controller else None
    pressures, peaks = [], []
    for start in range(0, 2048, 32):
        if start == squeeze_at:
            cap = int(0.6 * cap)
            if ctl is not None:
                ctl.set_cap(cap)
            else:
                cache.settings.device_cap_bytes = cap
                cache.compress()
            cache.peak_device_bytes = cache.device_bytes()
        feed(model, cache, ids[:, start:start + 32])
        if ctl is not None:
            ctl.after_prefill(32)
        peaks.append(cache.peak_device_bytes / cap)
        if cap_binds(cache):
            pressures.append(cache.device_bytes() / cap)
    return pressures, peaks


def test_the_controller_holds_device_memory_at_its_setpoint_through_a_squeeze_and_never_crosses_the_cap() -> None:
    pressures, peaks = _capped_meeting(controller=True)
    settled = pressures[2:]
    assert len(settled) > 20
    assert all(abs(p - 0.85) <= 0.05 * 0.85 for p in settled), [round(p, 3) for p in settled]
    assert abs(sum(settled) / len(settled) - 0.85) < 0.01
    assert max(peaks) <= 1.0, "the hard cap is never crossed, the squeeze included"
    # The fixed watermark it replaces keeps the bytes a few points under the setpoint (compression's hysteresis).
    fixed, fixed_peaks = _capped_meeting(controller=False)
    assert sum(fixed[2:]) / len(fixed[2:]) < 0.83 and max(fixed_peaks) <= 1.0


def test_a_context_steps_its_controller_and_reports_it(tiny_llm_dir) -> None:
    from app.platform.config import ControllerSettings, KVSettings, LLMSettings
    from app.llm.context import ContextLine, MeetingContext
    from app.llm.engine import LLMEngine

    kv = KVSettings(budget_ratio=1.0, block_size=16, recent_tokens=32, drift_sample_rate=0.5,
                    shadow_question_rate=0.0, decode_top_k_blocks=2,
                    controller=ControllerSettings(sparsity_arms=(2, 4, None)))
    engine = LLMEngine(tiny_llm_dir, LLMSettings(model=str(tiny_llm_dir), dtype="float32"), kv)
    context = MeetingContext(engine, kv, header="Meeting:\n")
    assert context.controller is not None and context.controller.bandit is not None
    for i in range(40):
        context.append(ContextLine("audio", float(i), i + 1.0, "Alice", f"line {i} about the budget of {i * 7} euros"))
    context.flush()
    arms = []
    for _ in range(6):
        generation = context.generate("\nQuestion: what was the budget?\nAnswer:", max_new_tokens=6, stop=())
        arms.append(context.cache.settings.decode_top_k_blocks)
        assert generation.tokens_per_second is not None
        assert context.shadow.wait(60)  # the sampled steps compared: the arm's reward with its JS
    assert arms[:3] == [2, 4, None], "each arm once first"
    stats = context.stats()
    assert sum(arm["pulls"] for arm in stats["controller_arms"].values()) == 6
    assert stats["controller_reward"] is not None and stats["controller_share"] is None  # no cap: no PID
    # A first device cap (a squeeze) starts holding memory: the share and the pressure are reported.
    cap = int(context.cache.device_bytes() * 0.9)
    context.set_device_cap(cap)
    assert context.cache.device_bytes() <= cap
    stats = context.stats()
    assert stats["controller_share"] is not None and stats["controller_pressure"] <= 1.0
    context.close()


def test_no_controller_without_a_cap_or_arms_and_bad_caps_are_refused(tiny_llm_dir) -> None:
    from app.platform.config import ControllerSettings, KVSettings, LLMSettings
    from app.llm.context import MeetingContext
    from app.llm.engine import LLMEngine
    from encoders.errors import InputError

    kv = KVSettings()
    engine = LLMEngine(tiny_llm_dir, LLMSettings(model=str(tiny_llm_dir), dtype="float32"), kv)
    context = MeetingContext(engine, kv, header="Meeting:\n")
    assert context.controller is None and "controller_share" not in context.stats()
    with pytest.raises(InputError):
        context.set_device_cap(0)
    context.close()
    off = KVSettings(device_cap_mib=1.0, controller=ControllerSettings(enabled=False))
    context = MeetingContext(engine, off, header="Meeting:\n")
    assert context.controller is None
    context.close()
    with pytest.raises(ValueError):
        ControllerSettings(sparsity_arms=(4, 4))
    with pytest.raises(ValueError):
        ControllerSettings(sparsity_arms=(0,))


def test_controller_config_is_checked() -> None:
    with pytest.raises(ValueError):
        ControllerConfig(setpoint=1.0)
    with pytest.raises(ValueError):
        ControllerConfig(min_share=0.9, setpoint=0.85)
