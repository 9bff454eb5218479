"""The cost of a meeting (issue 19 item 5): its measured use of the machine, priced (app/platform/cost.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from app.platform.config import CostSettings
from app.platform.cost import GIB, Usage, UsageMeter, meeting_cost

RATE = 16000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _kv(device_mib: float, host_mib: float = 0.0) -> dict:
    mib = 1024 * 1024
    return {"bytes_by_tier": {"L1": int(device_mib * mib * 0.75), "sliding": int(device_mib * mib * 0.25),
                              "cold_host": int(host_mib * mib), "cold_disk": 5 * mib}}


def test_the_meter_shares_the_machine_between_the_meetings_open_and_integrates_the_kv():
    clock = Clock()
    meter = UsageMeter(every=5.0, clock=clock)  # the meeting starts now
    assert not meter.due()
    clock.now += 5
    assert meter.due()
    meter.tick(_kv(4), open_meetings=1, meeting_seconds=0.0, remote_bytes=0)
    assert not meter.due() and meter.snapshot().wall_seconds == 5
    clock.now += 10
    meter.tick(_kv(8, host_mib=2), open_meetings=1, meeting_seconds=10.0, remote_bytes=1000)
    clock.now += 10
    meter.tick(_kv(6), open_meetings=4, meeting_seconds=20.0, remote_bytes=3000)  # three more rooms opened
    used = meter.snapshot()
    assert used.wall_seconds == 25 and used.machine_seconds == pytest.approx(5 + 10 + 10 / 4)
    # by trapezoids: 0 -> 4 MiB over 5 s, 4 -> 8 over 10 s, 8 -> 6 over 10 s
    assert used.device_kv_byte_seconds == pytest.approx((5 * 2 + 10 * 6 + 10 * 7) * 2**20, rel=1e-6)
    assert used.host_kv_byte_seconds == pytest.approx((10 * 1 + 10 * 1) * 2**20, rel=1e-6)  # cold_disk is no memory
    assert used.peak_device_kv_bytes == pytest.approx(8 * 2**20, rel=1e-6) and used.meeting_seconds == 20
    assert used.remote_bytes == 3000
    meter.saved(4096)
    meter.saved(4000)  # what the store holds after the last save, not a sum
    assert meter.snapshot().stored_bytes == 4000
    meter.saved(4096)
    assert Usage.from_dict(meter.snapshot().to_dict()) == meter.snapshot()  # saved with the meeting, read back
    # a rebuilt or resumed meeting goes on from what it used; its tiers count from 0 again
    later = UsageMeter(Usage.from_dict(meter.snapshot().to_dict()), clock=clock)
    later.tick(_kv(1), 1, 25.0, remote_bytes=10)
    assert later.snapshot().remote_bytes == 3010 and later.snapshot().stored_bytes == 4096
    assert later.snapshot().peak_device_kv_bytes == used.peak_device_kv_bytes  # a peak is not added up
    # a save to a remote session store (Redis) moves its bytes over the network: counted, and kept by later ticks
    later.saved(8192, sent=5000)
    later.tick(_kv(1), 1, 26.0, remote_bytes=20)
    assert later.snapshot().remote_bytes == 3000 + 5000 + 20


def test_the_price_follows_the_formula_of_the_source_document():
    """(GPU rate x GPUs + CPU rate x cores) x machine share + storage + network, per meeting-hour."""
    prices = CostSettings(cpu_core_hour=0.05, gpu_hour=3.0, storage_gib_month=0.02, network_gib=0.1)
    usage = Usage(meeting_seconds=1800, wall_seconds=1800, machine_seconds=900, stored_bytes=GIB // 2,
                  remote_bytes=2 * GIB)
    report = meeting_cost(usage, prices, cores=8, gpus=1)
    assert report.compute == pytest.approx((3.0 + 8 * 0.05) * 0.25)
    assert report.storage == pytest.approx(0.01) and report.network == pytest.approx(0.2)
    assert report.per_meeting_hour == pytest.approx(report.total * 2)
    assert meeting_cost(Usage(), prices, cores=2, gpus=0).per_meeting_hour is None  # no meeting yet: no rate
    with pytest.raises(ValueError):
        CostSettings(cpu_core_hour=-1)
    # priced on the machine the meeting ran on, when it was recorded
    assert meeting_cost(Usage(meeting_seconds=3600, machine_seconds=3600, cores=4, gpus=0), prices).cores == 4
    with pytest.raises(ValueError):
        Usage.from_dict({"wall_seconds": "a lot"})  # a damaged record is refused, not priced
    # issue 49 F9: a damaged record priced at -13,333 USD with "wall time nan s"
    for damaged in ({"machine_seconds": -4.8e7}, {"wall_seconds": "nan"}, {"remote_bytes": float("inf")},
                    {"stored_bytes": -1}):
        with pytest.raises(ValueError):
            Usage.from_dict(damaged)


def test_a_meeting_measures_its_use_saves_it_and_shows_its_cost(session_parts):
    """A real session (the stand-in recogniser, the tiny Gemma 3 through the TieredCache): its use is measured
    while it runs, goes on /metrics as a cost, is saved with the meeting and resumed from, and `minutia cost`
    prices it."""
    from prometheus_client.parser import text_string_to_metric_families

    from app.platform.metrics import Metrics

    runtime, meeting = session_parts
    session = runtime.new_session("priced")
    session._usage.every = 0.0  # measure at every step of the LLM worker (a short meeting)
    audio = meeting.audio
    for start in range(0, len(audio), RATE // 2):
        session.feed_audio(audio[start:start + RATE // 2], RATE)
    session.finish(timeout=120)
    used = session.usage()
    assert used.wall_seconds > 0 and used.machine_seconds > 0 and used.device_kv_byte_seconds > 0
    assert used.peak_device_kv_bytes > 0 and used.meeting_seconds == pytest.approx(len(audio) / RATE, abs=0.6)
    text = Metrics(lambda: [("priced", session)]).render()[0].decode()
    gauges = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
              if s.name.startswith("minutia_session_cost")}
    assert gauges["minutia_session_cost_usd"] > 0 and gauges["minutia_session_cost_per_meeting_hour_usd"] > 0
    session.save()
    stored = session.usage().stored_bytes
    session.save()  # a save replaces what the one before wrote: the meeting does not take twice the space
    assert 0 < session.usage().stored_bytes <= stored * 1.2, (stored, session.usage().stored_bytes)
    runtime.close_session("priced")
    resumed = runtime.resume_session("priced")
    assert resumed.usage().machine_seconds >= used.machine_seconds  # it goes on from what it used
    assert resumed.usage().device_kv_byte_seconds >= used.device_kv_byte_seconds
    runtime.close_session("priced")

    env = {**os.environ, "MINUTIA_HOME": str(runtime.settings.home), "COLUMNS": "160"}
    result = subprocess.run([sys.executable, "-m", "app.cli", "cost", "priced"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "machine share" in result.stdout and "per meeting-hour" in result.stdout
    stored = re.search(r"storage \(a month\)\s*│\s*([\d.]+) MiB", result.stdout)
    assert stored and float(stored.group(1)) > 0, result.stdout  # measured in the store
    missing = subprocess.run([sys.executable, "-m", "app.cli", "cost", "no-such-meeting"], capture_output=True,
                             text=True, env=env, timeout=120)
    assert missing.returncode == 2 and "no saved session 'no-such-meeting'" in missing.stderr, missing.stderr[-2000:]


def test_saves_to_a_redis_session_store_count_as_network(scripted_runtime, tmp_path, redis_server):
    """A meeting kept in Redis (rooms on a cluster) sends every save over the network: its bytes are priced as
    network; on a disk store they are not."""
    from scripted_parts import scripted_meeting

    from kvstore.crypto import MasterKey

    meeting = scripted_meeting([("SPEAKER_00", "Good morning. The pilot will cost twelve thousand dollars."),
                                ("SPEAKER_01", "Fine. Maria will send the contract on Friday.")])
    MasterKey.generate(tmp_path / "master.key")
    for backend in ("redis", "disk"):
        runtime = scripted_runtime(meeting, tmp_path / backend, store={
            "backend": backend, "redis_url": redis_server, "key_file": str(tmp_path / "master.key"),
            "path": str(tmp_path / backend / "sessions")})
        try:
            session = runtime.new_session(f"net-{backend}")
            session.feed_audio(meeting.audio, RATE)
            session.finish(timeout=120)
            before = session.usage().remote_bytes
            report = session.save()
            sent = session.usage().remote_bytes - before
            assert report.bytes_written > 0
            assert sent == (report.bytes_written if backend == "redis" else 0), (backend, sent, report.bytes_written)
            if backend == "redis":
                assert meeting_cost(session.usage(), CostSettings()).network > 0
        finally:
            runtime.close()


def test_the_engine_figures_move_while_nothing_is_said(scripted_runtime, tmp_path):
    """The Engine tab's cost goes up as the meeting holds the machine, whether or not anything is committed: the
    timer sends the Engine figures when they changed, not only with new words (it did only with new words)."""
    import time

    import gradio as gr
    from scripted_parts import scripted_meeting

    from ui.app import TAB_OUTPUTS, LivePage
    from ui.settings import UISettings

    meeting = scripted_meeting([("SPEAKER_00", "Good morning. The pilot will cost twelve thousand dollars.")])
    runtime = scripted_runtime(meeting, tmp_path)
    page = LivePage(runtime, UISettings(export_dir=tmp_path / "exports"))
    tab_request = gr.Request(session_hash="tab")
    try:
        page.start_replay(None, str(meeting.write_wav(tmp_path / "meeting.wav")), 0.0, tab_request)
        tab = page.tab(tab_request)
        deadline = time.monotonic() + 120
        while tab.session is None or tab.session.state != "finished":
            assert time.monotonic() < deadline, "the replay did not finish"
            time.sleep(0.1)
        page.refresh(tab_request)  # the final summary starts (a thread)...
        while tab.summary_version == 0:
            assert time.monotonic() < deadline, "the final summary did not come"
            time.sleep(0.1)
        assert tab.session.settle(60)  # ...and its answer's comparisons run in the background
        page.refresh(tab_request)  # what the summary and its comparison changed
        assert page.refresh(tab_request)[5] == gr.skip()  # nothing new
        tab.session._usage.saved(10 * 2**30)  # the meeting now holds 10 GiB in the store: its cost moved
        engine = page.refresh(tab_request)
        assert len(engine) == TAB_OUTPUTS and engine[1] == gr.skip()  # the transcript did not change...
        assert "cost so far" in engine[5]  # ...the Engine figures did, and are sent
        assert page.refresh(tab_request)[5] == gr.skip()
    finally:
        page.close()
        runtime.close()
