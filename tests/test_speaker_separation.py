"""bench/speaker_separation.py's measurements on hand-made windows and embeddings (the bench itself runs the real
diarizer on generated meetings; these check what it computes from them)."""

from __future__ import annotations

import numpy as np

from bench.speaker_separation import cross_cosine, one_speaker_split, window_speakers
from encoders.diarize import FRAME_RATE, SpeakerTurn


def test_a_window_belongs_to_the_speaker_covering_most_of_it_or_to_none():
    turns = [SpeakerTurn(0.0, 2.0, "B"), SpeakerTurn(2.0, 4.0, "A")]
    windows = np.array([[0, 150, 0], [100, 250, 0], [250, 400, 0], [180, 220, 0]]) * FRAME_RATE // 100
    # B (index 1) covers all of 0-1.5 s and 67% of 1-2.5 s, A (index 0) all of 2.5-4 s; 1.8-2.2 s is half each
    assert window_speakers(windows, turns).tolist() == [1, 1, 0, -1]


def test_two_voices_are_further_apart_than_one_voice_split_in_two():
    rng = np.random.default_rng(0)

    def voice(centre, n):
        x = centre + 0.3 * rng.standard_normal((n, 16))
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    a, b = rng.standard_normal(16), rng.standard_normal(16)
    one, other = voice(a, 40), voice(b, 40)
    assert cross_cosine(one, one[::-1]) > 0.8
    between = cross_cosine(one, other)
    assert between < one_speaker_split(one) and between < 0.5
    assert one_speaker_split(np.vstack([one, other])) < one_speaker_split(one)  # 2-means finds the two voices
