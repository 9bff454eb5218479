"""Diarization: word -> speaker assignment, backend selection, and real quality on real speech."""

from __future__ import annotations

import importlib.resources
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from encoders.audio import load_audio
from encoders.diarize import (
    EmbeddedDiarizer,
    _spectral_labels,
    PyannoteDiarizer,
    SpeakerTurn,
    assign_speakers,
    make_diarizer,
)
from encoders.errors import InputError

SAMPLE_DIR = Path(str(importlib.resources.files("pyannote.audio") / "sample"))


@dataclass
class Word:
    start: float
    end: float


def turns(*spans: tuple[float, float, str]) -> list[SpeakerTurn]:
    return [SpeakerTurn(s, e, who) for s, e, who in spans]


# ---------------------------------------------------------------------------------------------
# assign_speakers


def test_word_goes_to_the_turn_it_overlaps_most():
    t = turns((0, 2, "A"), (2, 4, "B"))
    assert assign_speakers([Word(1.5, 2.2), Word(1.8, 2.9), Word(0.1, 0.4), Word(3.0, 3.5)], t) == ["A", "B", "A", "B"]


def test_overlap_is_summed_per_speaker():
    # A's two short turns cover 0.6 s of the word, B's single turn 0.5 s.
    t = turns((0.0, 0.3, "A"), (0.3, 0.8, "B"), (0.8, 1.1, "A"))
    assert assign_speakers([Word(0.0, 1.1)], t) == ["A"]


def test_word_in_a_gap_gets_the_nearest_turn():
    t = turns((0, 1, "A"), (3, 4, "B"))
    words = [Word(1.2, 1.5), Word(2.6, 2.9), Word(5, 6), Word(-2, -1)]
    assert assign_speakers(words, t) == ["A", "B", "B", "A"]


def test_overlapping_speakers_and_unsorted_turns():
    t = turns((5, 9, "B"), (0, 10, "A"), (6, 7, "C"))
    # Word 6-7: A, B and C each overlap 1 s -> tie goes to the speaker who appears first (A).
    assert assign_speakers([Word(6, 7), Word(10, 11), Word(4.5, 5.5)], t) == ["A", "A", "A"]
    assert assign_speakers([Word(8.5, 11)], turns((0, 9, "A"), (8.5, 12, "B"))) == ["B"]


def test_zero_length_and_reversed_words():
    t = turns((0, 1, "A"), (1, 2, "B"))
    assert assign_speakers([Word(1.5, 1.5), Word(0.9, 0.2), Word(2.5, 2.5)], t) == ["B", "A", "B"]


def test_no_words_and_no_turns():
    assert assign_speakers([], turns((0, 1, "A"))) == []
    with pytest.raises(InputError):
        assign_speakers([Word(0, 1)], [])


def brute_force(words: list[Word], t: list[SpeakerTurn]) -> list[str]:
    """Reference semantics: most summed overlap per speaker, else smallest gap; ties -> first speaker."""
    order = list(dict.fromkeys(x.speaker for x in sorted(t, key=lambda x: (x.start, x.end))))
    out = []
    for w in words:
        grid = np.linspace(w.start, w.end, 2001)[:-1] + (w.end - w.start) / 4000  # midpoint sampling
        ov = {s: sum(np.any([(x.start <= g < x.end) for x in t if x.speaker == s]) for g in grid) for s in order}
        best = max(order, key=lambda s: (ov[s], -order.index(s)))
        if ov[best] == 0:
            gap = {s: min(max(x.start - w.end, w.start - x.end, 0) for x in t if x.speaker == s) for s in order}
            best = min(order, key=lambda s: (gap[s], order.index(s)))
        out.append(best)
    return out


def test_matches_brute_force_on_random_meetings():
    rng = np.random.default_rng(7)
    for _ in range(5):
        t = []
        clock = 0.0
        for _ in range(12):
            clock += rng.uniform(0.0, 1.5)
            t.append(SpeakerTurn(clock, clock + rng.uniform(0.3, 3.0), f"S{rng.integers(3)}"))
        words = []
        for _ in range(30):
            s = rng.uniform(-1, clock + 4)
            words.append(Word(s, s + rng.uniform(0.05, 0.6)))
        assert assign_speakers(words, t) == brute_force(words, t)


def test_scales_to_hours():
    rng = np.random.default_rng(0)
    bounds = np.cumsum(rng.uniform(0.5, 8.0, 3000))  # ~4 h of turns
    t = [SpeakerTurn(a, b - 0.2, f"S{i % 5}") for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
    starts = np.sort(rng.uniform(0, bounds[-1], 60000))
    words = [Word(s, s + 0.3) for s in starts]
    begin = time.perf_counter()
    out = assign_speakers(words, t)
    assert time.perf_counter() - begin < 5.0
    assert len(out) == len(words)


# ---------------------------------------------------------------------------------------------
# Backends


def test_auto_pruning_finds_a_speaker_who_says_little():
    """Five talkative voices and one with 12 windows: a fixed 25% neighbourhood spans two
    voices for the quiet one and the eigengap finds 5; the per-file ratio finds 6."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(6, 64))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    emb = np.concatenate([c + rng.normal(size=(n, 64)) / 8 for c, n in zip(centres, (100,) * 5 + (12,))])
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    assert len(np.unique(_spectral_labels(emb, 1, 8, p_neighbors=0.25))) == 5
    assert len(np.unique(_spectral_labels(emb, 1, 8, p_neighbors=0))) == 6


def _short_two_voice_clip(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Six alternating turns of two voices, five 1.5 s windows each every 0.5 s: a window's embedding is its
    voice plus the mean of the three 0.5 s chunks it hears, so windows sharing chunks are alike beyond the voice
    (as real windows sharing audio are). Returns embeddings and (start, end) frame spans."""
    rng = np.random.default_rng(seed)
    voices = rng.normal(size=(2, 64))
    voices /= np.linalg.norm(voices, axis=1, keepdims=True)
    emb, spans, t = [], [], 0
    for turn in range(6):
        chunks = rng.normal(size=(7, 64)) / 4
        for w in range(5):
            emb.append(voices[turn % 2] + chunks[w:w + 3].mean(0))
            spans.append((t + 50 * w, t + 50 * w + 150))
        t += 450
    emb = np.array(emb)
    return emb / np.linalg.norm(emb, axis=1, keepdims=True), np.array(spans)


@pytest.mark.parametrize("seed", [2, 4, 6])
def test_a_short_clip_is_not_split_into_one_speaker_per_turn(seed):
    """With few windows the pruned graph kept only the windows sharing audio as neighbours: each turn became its
    own cluster (a 16 s clip of two voices came out as five speakers). Neighbours now reach past them."""
    emb, spans = _short_two_voice_clip(seed)
    diarizer = EmbeddedDiarizer()
    assert len(np.unique(diarizer.cluster(emb, 1, 8, spans))) == 2
    assert len(np.unique(diarizer.cluster(emb, 1, 8))) >= 4  # without the windows' spans, as before


def test_make_diarizer_picks_backends(tmp_path):
    assert isinstance(make_diarizer("auto", None), EmbeddedDiarizer)
    assert isinstance(make_diarizer("auto", str(tmp_path)), EmbeddedDiarizer)  # no config.yaml
    assert isinstance(make_diarizer("embedded", None), EmbeddedDiarizer)
    assert make_diarizer("auto", None, "ge2e").embedding == "ge2e"  # diarization.embedding in the config
    (tmp_path / "config.yaml").write_text("pipeline: {name: x.Y}\n")
    assert isinstance(make_diarizer("auto", str(tmp_path)), PyannoteDiarizer)
    assert isinstance(make_diarizer("pyannote", str(tmp_path)), PyannoteDiarizer)


def test_make_diarizer_errors(tmp_path):
    with pytest.raises(InputError, match="needs a model"):
        make_diarizer("pyannote", None)
    with pytest.raises(InputError, match="unknown diarization backend"):
        make_diarizer("nemo", None)
    with pytest.raises(InputError, match="not found"):
        make_diarizer("pyannote", str(tmp_path / "missing"))


def test_pyannote_folder_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        PyannoteDiarizer(tmp_path / "nope")
    with pytest.raises(InputError, match="config.yaml"):
        PyannoteDiarizer(tmp_path)
    (tmp_path / "config.yaml").write_text("pipeline: {name: nonexistent_module.Pipeline, params: {}}\n")
    with pytest.raises(InputError, match="cannot load"):
        PyannoteDiarizer(tmp_path).diarize(np.zeros(16000, dtype=np.float32))


# ---------------------------------------------------------------------------------------------
# EmbeddedDiarizer on real speech


def read_rttm(path: Path) -> list[SpeakerTurn]:
    rows = [line.split() for line in path.read_text().splitlines()]
    return [SpeakerTurn(float(f[3]), float(f[3]) + float(f[4]), f[7]) for f in rows if f and f[0] == "SPEAKER"]


def der(reference: list[SpeakerTurn], hypothesis: list[SpeakerTurn], duration: float, collar: float = 0.0) -> float:
    from pyannote.core import Annotation, Segment, Timeline
    from pyannote.metrics.diarization import DiarizationErrorRate

    def ann(ts: list[SpeakerTurn]) -> Annotation:
        a = Annotation()
        for i, t in enumerate(ts):
            a[Segment(t.start, t.end), i] = t.speaker
        return a

    metric = DiarizationErrorRate(collar=collar, skip_overlap=False)
    return metric(ann(reference), ann(hypothesis), uem=Timeline([Segment(0, duration)]))


@pytest.fixture(scope="module")
def sample() -> np.ndarray:
    return load_audio(SAMPLE_DIR / "sample.wav")


@pytest.fixture(scope="module")
def sample_turns(sample) -> list[SpeakerTurn]:
    return EmbeddedDiarizer().diarize(sample)


def test_embedded_der_on_real_two_speaker_recording(sample, sample_turns):
    """Real quality check (pyannote's benchmark setting: collar 0, overlap scored); issue 16's target."""
    reference = read_rttm(SAMPLE_DIR / "sample.rttm")
    assert len({t.speaker for t in sample_turns}) == 2
    assert der(reference, sample_turns, len(sample) / 16000) <= 0.15


def test_fused_embedding_averages_the_two_models_cosines(sample):
    """camplus+ge2e: a pair's cosine is the mean of CAM++'s and GE2E's, each window's vector unit length."""
    from encoders.speaker_embedding import speaker_embedding

    regions = [(0, 3000)]
    windows = np.array([(s, s + 150, 0) for s in range(0, 2850, 300)], dtype=np.int64)
    fused = speaker_embedding("camplus+ge2e").embed(sample, regions, windows)
    parts = [speaker_embedding(name).embed(sample, regions, windows) for name in ("camplus", "ge2e")]
    assert fused.shape == (len(windows), 192 + 256)
    np.testing.assert_allclose(np.linalg.norm(fused, axis=1), 1.0, atol=1e-5)
    expected = (parts[0] @ parts[0].T + parts[1] @ parts[1].T) / 2
    np.testing.assert_allclose(fused @ fused.T, expected, atol=1e-5)
    assert np.ptp(expected) > 0.2  # the windows differ (two speakers), so the check has teeth


def overlapped(turns: list[SpeakerTurn]) -> list[tuple[float, float]]:
    """Stretches where two or more of ``turns`` are spoken at once."""
    from pyannote.core import Annotation, Segment

    ann = Annotation()
    for i, t in enumerate(turns):
        ann[Segment(t.start, t.end), i] = t.speaker
    return [(s.start, s.end) for s in ann.get_overlap()]


def test_overlapped_speech_gets_its_second_speaker(sample, sample_turns):
    """The sample holds 1.9 s where both people talk; without the segmentation model's count that
    speech was missed (DER 15.5%, 8.3 points of it missed speech)."""
    reference = read_rttm(SAMPLE_DIR / "sample.rttm")
    truth = overlapped(reference)
    found = overlapped(sample_turns)
    hit = sum(max(0.0, min(b, d) - max(a, c)) for a, b in truth for c, d in found)
    assert hit >= 0.6 * sum(b - a for a, b in truth)
    assert sum(d - c for c, d in found) <= 2 * sum(b - a for a, b in truth)
    plain = EmbeddedDiarizer(overlap=False).diarize(sample)
    assert overlapped(plain) == []
    assert der(reference, sample_turns, len(sample) / 16000) < der(reference, plain, len(sample) / 16000) - 0.03


def test_turns_are_sorted_and_named_by_first_appearance(sample, sample_turns):
    assert all(0 <= t.start < t.end <= len(sample) / 16000 for t in sample_turns)
    assert [t.start for t in sample_turns] == sorted(t.start for t in sample_turns)
    for name in {t.speaker for t in sample_turns}:  # one speaker never overlaps themself
        own = [t for t in sample_turns if t.speaker == name]
        assert all(a.end <= b.start for a, b in zip(own, own[1:]))
    first_seen = list(dict.fromkeys(t.speaker for t in sample_turns))
    assert first_seen == [f"SPEAKER_{i:02d}" for i in range(len(first_seen))]


def test_speaker_count_hints(sample):
    one = EmbeddedDiarizer().diarize(sample, num_speakers=1)
    assert {t.speaker for t in one} == {"SPEAKER_00"}


def test_one_voice_is_one_speaker(sample):
    # speaker91's longest turn alone, with pauses: must not be split into several speakers.
    alone = np.concatenate([sample[int(21.8 * 16000) : int(27.8 * 16000)], np.zeros(8000, np.float32)] * 2)
    assert len({t.speaker for t in EmbeddedDiarizer().diarize(alone)}) == 1
    from encoders.overlap import overlap_detector

    assert overlap_detector().regions(alone) == []  # one voice is never "two at once"


def test_silence_gives_no_turns():
    assert EmbeddedDiarizer().diarize(np.zeros(16000 * 3, dtype=np.float32)) == []


@pytest.mark.parametrize(
    "kwargs",
    [{"num_speakers": 0}, {"min_speakers": 3, "max_speakers": 2}, {"min_speakers": 0}],
)
def test_bad_speaker_counts(kwargs):
    with pytest.raises(InputError):
        EmbeddedDiarizer().diarize(np.zeros(16000, dtype=np.float32), **kwargs)


def test_bad_audio():
    with pytest.raises(InputError):
        EmbeddedDiarizer().diarize(np.zeros((2, 16000), dtype=np.float32))
    with pytest.raises(InputError):
        EmbeddedDiarizer().diarize(np.zeros(0, dtype=np.float32))


# ---------------------------------------------------------------------------------------------
# Similar synthetic voices (espeak-ng at its default pitch and speed)

ESPEAK_VOICES = ("en-us", "en-gb+f3", "en-us+m3")  # a user's meeting that used to come out as one speaker
ESPEAK_LINES = (
    "Good morning everyone, let's start with the weekly update on the website.",
    "The login page is finished, and the payment page needs one more week of work.",
    "We have spent thirty thousand dollars so far, out of a total budget of fifty thousand.",
    "I called the payment company yesterday, and they want a lower price for the contract.",
    "Should we keep this company, or should we look for a new one before the pilot starts?",
    "I agree with that. We can offer a small discount and keep the release date in April.",
    "The pilot starts on Monday and runs for four weeks with two hundred users.",
    "I will send the new contract to the payment company by Thursday afternoon.",
    "Let's meet again next Tuesday at ten in the morning. Thanks, everyone.",
)


def espeak_meeting(tmp_path: Path, voices=ESPEAK_VOICES, lines=ESPEAK_LINES, pause_s: float = 0.6):
    """Turns that rotate through ``voices`` (default prosody), ``pause_s`` apart; audio + reference."""
    import shutil
    import subprocess

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    pieces, reference, clock = [np.zeros(8000, np.float32)], [], 0.5
    for i, text in enumerate(lines):
        wav = tmp_path / f"turn{i}.wav"
        subprocess.run(["espeak-ng", "-v", voices[i % len(voices)], "-w", str(wav), text], check=True, capture_output=True)
        speech = load_audio(wav)
        voiced = np.flatnonzero(np.abs(speech) > 0.005)  # espeak pads each clip with silence
        speech = speech[voiced[0] : voiced[-1] + 1]
        reference.append(SpeakerTurn(clock, clock + len(speech) / 16000, voices[i % len(voices)]))
        pieces += [speech, np.zeros(int(pause_s * 16000), np.float32)]
        clock += len(speech) / 16000 + pause_s
    return np.concatenate(pieces), reference


@pytest.mark.xfail(strict=True, reason="not solved yet: spectral clustering finds 3 voices but their windows are as alike (CAM++ cosine 0.72-0.74; CAM++ + GE2E did not part them either) as one real voice's, so merging joins them; pitch features did not help (same F0)")
def test_similar_synthetic_voices_are_told_apart(tmp_path):
    """Three espeak-ng voices at the same default pitch: three speakers, turns mostly right."""
    audio, reference = espeak_meeting(tmp_path)
    hyp = EmbeddedDiarizer().diarize(audio)
    assert len({t.speaker for t in hyp}) == 3
    assert der(reference, hyp, len(audio) / 16000, collar=0.25) <= 0.10


def test_pyannote_never_phones_home():
    """pyannote.audio's import turns its telemetry on by default; loading minutia's encoders first
    must leave it off (the overlap model is loaded through pyannote in every batch diarization)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYANNOTE_METRICS_ENABLED"}
    code = ("import encoders.overlap, pyannote.audio\n"
            "from pyannote.audio.telemetry.metrics import is_metrics_enabled\n"
            "print(is_metrics_enabled())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr[-2000:]
