"""Online diarization on the stand-up's real audio (3 voices): label accuracy, stability, bounded state."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from encoders.asr import Word
from encoders.audio import SAMPLE_RATE, load_audio
from encoders.diarize import SpeakerTurn, assign_speakers
from encoders.errors import InputError
from encoders.online_diarize import LabelChange, OnlineDiarizer, make_online_diarizer, speaker_accuracy

STANDUP = Path(__file__).resolve().parent.parent / "samples" / "standup"


def test_speaker_accuracy_uses_the_best_label_mapping():
    assert speaker_accuracy(["x", "x", "y", "z"], ["A", "A", "B", "B"]) == 0.75
    assert speaker_accuracy(["S1", "S0"], ["A", "B"]) == 1.0
    with pytest.raises(InputError):
        speaker_accuracy(["x"], [])


def test_backend_choice_and_bad_input(tmp_path):
    assert isinstance(make_online_diarizer("auto", str(tmp_path)), OnlineDiarizer)  # no config.yaml: embedded
    with pytest.raises(InputError):
        make_online_diarizer("pyannote", None)
    with pytest.raises(InputError):
        make_online_diarizer("magic")
    with pytest.raises(InputError):
        make_online_diarizer("embedded", None, "ecapa")
    live = make_online_diarizer("embedded", None, "camplus+ge2e")  # the config's voice model, words and re-clustering
    assert live.embedder.name == live.clustering.embedding == "camplus+ge2e" and live.clustering.merge_threshold == 0
    default = make_online_diarizer()
    assert default.embedder.name == default.clustering.embedding == "ge2e" and default.clustering.merge_threshold == 0.75
    assert OnlineDiarizer().embedder.name == OnlineDiarizer().clustering.embedding == "ge2e"
    d = OnlineDiarizer()
    with pytest.raises(InputError):
        d.label_words([Word("hi", 0.0, 0.3)])  # no audio yet
    with pytest.raises(InputError):
        d.insert_audio(np.zeros((4, 2), dtype=np.float32))


def replay(diarizer: OnlineDiarizer, audio: np.ndarray, words: list[Word], lag: float = 1.5):
    """Feed audio second by second; commit each word ``lag`` s after it ends (as streaming ASR does)."""
    first: dict[int, str] = {}
    final: dict[int, str] = {}
    changes: list[LabelChange] = []
    i = 0
    for k in range(len(audio) // SAMPLE_RATE + 1):
        diarizer.insert_audio(audio[k * SAMPLE_RATE : (k + 1) * SAMPLE_RATE])
        batch = []
        while i < len(words) and words[i].end <= k + 1 - lag:
            batch.append(words[i])
            i += 1
        for j, label in zip(range(i - len(batch), i), diarizer.label_words(batch)):
            first[j] = final[j] = label
        for c in diarizer.take_changes():
            assert c.index < i - len(batch) or c.index not in first  # only earlier words are relabelled
            final[c.index] = c.new
            changes.append(c)
    for j, label in zip(range(i, len(words)), diarizer.label_words(words[i:])):
        first[j] = final[j] = label
    for c in diarizer.take_changes():
        final[c.index] = c.new
        changes.append(c)
    return [first[j] for j in range(len(words))], [final[j] for j in range(len(words))], changes


@pytest.mark.slow
def test_committed_words_get_the_right_speaker_and_labels_stay_stable():
    """Words of the first 40 s (7 turns of Alice, Bob and Carol), 0.4 s each, re-clustered every 10 s."""
    reference = json.loads((STANDUP / "reference.json").read_text())
    cut = 40.5
    gold_turns = [SpeakerTurn(t["start"], t["end"], t["speaker"]) for t in reference["turns"] if t["end"] <= cut]
    words = []
    for t in gold_turns:
        x = t.start
        while x + 0.4 <= t.end:
            words.append(Word("w", x, x + 0.4))
            x += 0.6
    gold = assign_speakers(words, gold_turns)
    audio = load_audio(STANDUP / "meeting.ogg")[: int(cut * SAMPLE_RATE)]
    diarizer = OnlineDiarizer(history_s=20.0, max_words=60)
    first, final, changes = replay(diarizer, audio, words)
    assert speaker_accuracy(first, gold) >= 0.8  # labels as shown when each word was committed
    assert speaker_accuracy(final, gold) >= 0.9  # after re-clustering corrections
    assert len(set(final)) == 3
    # Stable: the first speaker keeps SPEAKER_00 and most labels shown are never changed.
    assert final[0] == first[0] == "SPEAKER_00"
    assert len({c.index for c in changes}) <= 0.3 * len(words)
    assert speaker_accuracy(final, gold) >= speaker_accuracy(first, gold)  # corrections, not churn
    # Bounded state: audio history and kept embeddings.
    assert len(diarizer._audio) <= 20.0 * SAMPLE_RATE and len(diarizer._words) <= 60


def test_the_online_bench_spreads_reference_words_and_joins_runs_of_one_label():
    """bench/online_diarization.py scores the live diarizer without a recogniser: the reference turns' words
    are spread over each turn in order, and the final labels become turns (short pauses bridged)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.online_diarization import hypothesis_turns, reference_words

    reference = {"turns": [{"speaker": "B", "start": 4.6, "end": 6.0, "text": "yes indeed"},
                           {"speaker": "A", "start": 0.0, "end": 4.0, "text": "the pilot costs money"}]}
    pairs = reference_words(reference)
    assert [(w.text, s) for w, s in pairs] == [("the", "A"), ("pilot", "A"), ("costs", "A"), ("money", "A"),
                                               ("yes", "B"), ("indeed", "B")]
    words = [w for w, _ in pairs]
    assert words[0].start == 0.0 and words[3].end <= 4.0 and all(a.end <= b.start for a, b in zip(words, words[1:]))
    assert words[4].start == 4.6 and words[5].end <= 6.0
    turns = hypothesis_turns(words, ["X", "X", "Y", "Y", "Y", "Y"])
    assert [(t.speaker, t.start) for t in turns] == [("X", 0.0), ("Y", words[2].start)]  # 1 s pause bridged
    assert turns[-1].end == words[5].end
    assert len(hypothesis_turns(words, ["X"] * 6, gap=0.5)) == 2  # a longer pause splits a run


def test_a_recluster_adds_at_most_two_speakers_to_those_already_shown():
    """Spectral clustering on few words can split one voice into several, each shown as a new person until a later
    re-clustering merges them. So one re-clustering may add at most ``new_per_recluster`` speakers (2); more come at the
    next ones, if the voices stay apart."""
    rng = np.random.default_rng(0)
    voices = np.eye(8, dtype=np.float32)[:5]

    def five_voices(audio: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:  # word k sounds like voice k % 5
        rows = np.stack([voices[(s // (SAMPLE_RATE // 2)) % 5] for s, _ in spans]) + 0.05 * rng.standard_normal((len(spans), 8))
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)

    words = [Word("w", k * 0.5 + 0.1, k * 0.5 + 0.4) for k in range(60)]

    def labels_after_one_recluster(**settings) -> set[str]:
        # every word joins the first speaker as it comes (threshold -1); the re-clustering at 10 s decides
        d = OnlineDiarizer(embedder=five_voices, window_s=0.3, min_window_s=0.3, new_speaker_threshold=-1.0, **settings)
        d.insert_audio(np.zeros(int(31 * SAMPLE_RATE), dtype=np.float32))
        shown = set(d.label_words(words))
        return shown | {c.new for c in d.take_changes()}

    assert labels_after_one_recluster(new_per_recluster=0) == {f"SPEAKER_0{k}" for k in range(5)}  # all at once
    assert labels_after_one_recluster() == {"SPEAKER_00", "SPEAKER_01", "SPEAKER_02"}  # the one shown + at most 2
    assert labels_after_one_recluster(new_per_recluster=1) == {"SPEAKER_00", "SPEAKER_01"}
