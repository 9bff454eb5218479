"""Bot parts without network or models: the room mixer (several speakers on one clock, none can stall it),
line messages, and the cold-tier transfer figures on /metrics."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from app.rooms.mixer import MIX_FRAME, AudioMixer
from app.rooms.room_messages import line_message, majority_label


def _tone(value: float, frames: int = 1) -> np.ndarray:
    return np.full(MIX_FRAME * frames, value, np.float32)


def test_frames_are_mixed_once_every_live_speaker_contributed():
    mixer = AudioMixer(deadline=0.1)
    mixer.push("a", _tone(0.25, 2), now=0.0)
    mixer.push("b", _tone(0.5, 1), now=0.0)
    mixed = mixer.pull(now=0.0)
    assert mixed.size == MIX_FRAME and np.allclose(mixed, 0.75)
    assert mixer.wait_time(now=0.02) == pytest.approx(0.08)  # a's second frame waits for b until the deadline
    mixed = mixer.pull(now=0.1)
    assert mixed.size == MIX_FRAME and np.allclose(mixed, 0.25)


def test_each_mixed_frame_records_its_loudest_speaking_lane():
    mixer = AudioMixer(deadline=0.1)
    mixer.push("alice:t1", np.r_[_tone(0.2), _tone(0.001), _tone(0.05)], now=0.0)
    mixer.push("bob:t1", np.r_[_tone(0.1), _tone(0.002), _tone(0.3)], now=0.0)
    assert mixer.pull(now=0.0).size == 3 * MIX_FRAME
    # louder wins; a frame where both are below the speaking level is nobody's
    assert mixer.take_activity() == ["alice:t1", None, "bob:t1"]
    assert mixer.take_activity() == []  # taken once
    mixer.push("alice:t1", _tone(0.2), now=1.0)
    mixer.pull(now=1.2)  # bob sent nothing: his lane gets silence after the deadline
    assert mixer.take_activity() == ["alice:t1"]


def test_a_single_speaker_is_mixed_without_waiting():
    mixer = AudioMixer(deadline=0.1)
    mixer.push("a", _tone(0.25, 3)[:-10], now=0.0)
    mixed = mixer.pull(now=0.0)
    assert mixed.size == 2 * MIX_FRAME and np.allclose(mixed, 0.25)
    assert mixer.wait_time(now=0.0) is None  # the partial frame waits for more audio, not for a deadline


def test_a_laggard_gets_silence_after_the_deadline_and_its_late_audio_follows():
    mixer = AudioMixer(deadline=0.1)
    mixer.push("a", _tone(0.25), now=0.0)
    mixer.push("b", np.zeros(10, np.float32), now=0.0)  # b is live but short of a frame
    assert mixer.pull(now=0.05).size == 0
    mixed = mixer.pull(now=0.1)
    assert mixed.size == MIX_FRAME and np.allclose(mixed, 0.25)
    mixer.push("b", _tone(0.5), now=0.12)
    mixer.push("a", _tone(0.25), now=0.12)
    mixed = mixer.pull(now=0.12)
    assert mixed.size == MIX_FRAME and np.allclose(mixed[10:], 0.75) and np.allclose(mixed[:10], 0.25)


def test_the_wait_grows_with_the_lateness_seen_so_the_same_jitter_cuts_no_second_gap():
    """A speaker whose audio comes 0.15 s late gets a gap in its words once; after it the room waits long enough
    (a jitter buffer), so the next late frame of the same lateness is mixed whole; the wait then settles back."""
    mixer = AudioMixer(deadline=0.1, max_deadline=0.6, settle_seconds=10.0)
    mixer.push("a", _tone(0.25, 2), now=0.0)
    mixer.push("b", _tone(0.5), now=0.0)
    assert mixer.pull(now=0.1).size == 2 * MIX_FRAME  # b's second frame is late: silence in its words
    assert mixer.gaps == 1 and mixer.wait == pytest.approx(0.1)
    mixer.push("b", _tone(0.5), now=0.25)  # 0.15 s after its share was given as silence
    assert mixer.wait == pytest.approx(0.1 + 2 * 0.15 + 0.02)
    mixer.push("a", _tone(0.25), now=1.0)
    assert mixer.pull(now=1.1).size == MIX_FRAME and mixer.gaps == 1  # b's late frame is still there to mix
    mixer.push("a", _tone(0.25), now=1.2)
    assert mixer.pull(now=1.5).size == 0  # ... and the next one is waited for, well past the first deadline
    mixer.push("b", _tone(0.5), now=1.51)
    mixed = mixer.pull(now=1.51)
    assert mixed.size == MIX_FRAME and np.allclose(mixed, 0.75) and mixer.gaps == 1
    mixer.pull(now=31.51)  # three time constants later the wait is nearly back at the deadline
    assert 0.1 < mixer.wait < 0.1 + 0.32 * 0.06


def test_a_speaker_back_after_a_long_pause_leaves_the_wait_as_it_is():
    mixer = AudioMixer(deadline=0.1, max_deadline=0.5)
    mixer.push("a", _tone(0.25), now=0.0)
    mixer.push("b", np.zeros(10, np.float32), now=0.0)
    assert mixer.pull(now=0.1).size == MIX_FRAME and mixer.gaps == 1
    mixer.push("b", _tone(0.5), now=5.0)  # a pause in sending, not jitter: waiting would not have helped
    assert mixer.wait == pytest.approx(0.1)


def test_an_ended_speaker_never_stalls_the_room_and_its_audio_is_not_lost():
    mixer = AudioMixer(deadline=0.1)
    mixer.push("a", _tone(0.25, 2), now=0.0)
    mixer.push("b", _tone(0.5)[:100], now=0.0)
    mixer.end("b")  # its partial frame is still mixed, padded with silence
    mixed = mixer.pull(now=0.0)
    assert mixed.size == 2 * MIX_FRAME
    assert np.allclose(mixed[:100], 0.75) and np.allclose(mixed[100:], 0.25)
    assert mixer.live == 1 and not mixer.idle
    mixer.end("a")
    assert mixer.idle
    mixer.push("a", _tone(0.1), now=1.0)  # a speaker who comes back is live again
    assert mixer.live == 1 and mixer.pull(now=1.0).size == MIX_FRAME


def test_loud_speakers_together_are_scaled_not_clipped():
    mixer = AudioMixer()
    ramp = np.linspace(-0.9, 0.9, MIX_FRAME).astype(np.float32)
    mixer.push("a", ramp, now=0.0)
    mixer.push("b", ramp, now=0.0)
    mixed = mixer.pull(now=0.0)
    assert np.abs(mixed).max() == pytest.approx(1.0)
    assert np.allclose(mixed, ramp / 0.9)  # the shape is kept, only the level drops


def test_a_lane_far_behind_the_others_is_cut_back():
    mixer = AudioMixer(deadline=0.1, backlog=0.1)
    mixer.push("b", np.zeros(1, np.float32), now=0.0)  # b joined, then its network stalls
    for k in range(10):
        mixer.push("a", _tone(0.25), now=0.02 * k)
    assert mixer.pull(now=0.3).size == 10 * MIX_FRAME and mixer.dropped == 0  # a went on alone
    mixer.push("b", _tone(0.5, 10), now=0.3)  # b's stalled audio arrives at once: 0.2 s behind the room
    mixer.push("a", _tone(0.25), now=0.3)
    assert mixer.pull(now=0.3).size == MIX_FRAME
    lanes = mixer.lanes
    assert mixer.dropped > 0 and lanes["b"].held - lanes["a"].held == int(0.1 * 16000)


def test_line_messages_name_the_speaker_once_known():
    words = [SimpleNamespace(text="Sure,", start=7.0, end=7.3, speaker="SPEAKER_01"),
             SimpleNamespace(text="Alice.", start=7.3, end=7.8, speaker="SPEAKER_01"),
             SimpleNamespace(text="Hm", start=7.8, end=7.9, speaker="SPEAKER_00")]
    assert majority_label(words, 7.0, 7.9) == "SPEAKER_01"
    assert majority_label(words, 20.0, 21.0) is None
    named = line_message(SimpleNamespace(start=7.0, end=7.9, speaker="Bob", text="Sure, Alice."), "SPEAKER_01")
    assert named == {"type": "line", "speaker": "Bob", "name": "Bob", "label": "SPEAKER_01",
                     "start": 7.0, "end": 7.9, "text": "Sure, Alice."}
    unnamed = line_message(SimpleNamespace(start=1.0, end=2.0, speaker="SPEAKER_00", text="Hello."), None)
    assert unnamed["speaker"] == unnamed["label"] == "SPEAKER_00" and unnamed["name"] is None


def test_the_cold_tier_placements_transfers_are_scraped():
    """A session whose cache has a cold tier: its placement's moves show on /metrics, per session and tier pair."""
    from app.platform.metrics import Metrics
    from kvstore.placement import Tier, TierPlacement
    from kvstore.tier_guards import WatermarkController
    from kvstore.stores.memory import MemoryStore

    tiers = {Tier.DEVICE: MemoryStore("cpu", tier="device"), Tier.HOST: MemoryStore("cpu", tier="host")}
    placement = TierPlacement(tiers, "s1.cold", WatermarkController(1 << 20))
    placement.put("L0.b0", bytes(4096), 1.0)
    assert placement.move("L0.b0", Tier.HOST)
    cache = SimpleNamespace(cold_tier=SimpleNamespace(placement=placement))  # how MeetingContext holds it
    snap = SimpleNamespace(state="live", kv={}, commit_lag=None, stream_seconds=0.0)
    session = SimpleNamespace(_context=SimpleNamespace(cache=cache), snapshot=lambda: snap)
    text = Metrics(lambda: [("room-a", session)]).render()[0].decode()
    assert 'minutia_kv_placement_transfer_bytes_total{session="room-a",source="device",target="host"} 4096.0' in text
    assert 'minutia_kv_placement_transfer_seconds_total{session="room-a",source="device",target="host"}' in text
