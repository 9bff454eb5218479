"""Voice activity detection: silence is silent, real speech is found where people speak."""

from __future__ import annotations

import importlib.resources
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from encoders.audio import load_audio
from encoders.errors import InputError
from encoders.vad import SpeechRegion, detect_speech

SAMPLE_DIR = Path(str(importlib.resources.files("pyannote.audio") / "sample"))
ROOT = Path(__file__).resolve().parent.parent


def reference_speech(path: Path) -> list[tuple[float, float]]:
    """Union of the RTTM's speaker turns."""
    spans = sorted(
        (float(f[3]), float(f[3]) + float(f[4]))
        for f in (line.split() for line in path.read_text().splitlines())
        if f and f[0] == "SPEAKER"
    )
    merged: list[list[float]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def overlap(a: list[tuple[float, float]], b: list[SpeechRegion]) -> float:
    return sum(max(0.0, min(e, r.end) - max(s, r.start)) for s, e in a for r in b)


@pytest.fixture(scope="module")
def sample() -> np.ndarray:
    return load_audio(SAMPLE_DIR / "sample.wav")


def test_silence_has_no_speech():
    assert detect_speech(np.zeros(16000 * 5, dtype=np.float32)) == []


def test_faint_noise_has_no_speech():
    noise = np.random.default_rng(0).normal(0, 1e-3, 16000 * 5).astype(np.float32)
    assert detect_speech(noise) == []


def test_sample_regions_cover_reference_speech(sample):
    regions = detect_speech(sample)
    ref = reference_speech(SAMPLE_DIR / "sample.rttm")
    ref_total = sum(e - s for s, e in ref)
    hyp_total = sum(r.duration for r in regions)
    covered = overlap(ref, regions)
    assert covered / ref_total >= 0.9, "most reference speech is detected"
    assert (hyp_total - covered) / ref_total <= 0.1, "little non-speech is called speech"
    # Sorted, disjoint, inside the recording.
    assert all(0 <= r.start < r.end <= len(sample) / 16000 for r in regions)
    assert all(a.end <= b.start for a, b in zip(regions, regions[1:]))


def test_other_sample_rates_give_the_same_regions(sample):
    import librosa

    at_48k = librosa.resample(sample, orig_sr=16000, target_sr=48000)
    base, resampled = detect_speech(sample), detect_speech(at_48k, sample_rate=48000)
    assert len(base) == len(resampled)
    assert all(abs(a.start - b.start) < 0.1 and abs(a.end - b.end) < 0.1 for a, b in zip(base, resampled))


def test_concurrent_calls_agree(sample):
    expected = detect_speech(sample)
    results: list[list[SpeechRegion]] = []
    threads = [threading.Thread(target=lambda: results.append(detect_speech(sample))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 3


@pytest.mark.parametrize(
    "audio",
    [np.zeros(0, dtype=np.float32), np.zeros((2, 16000), dtype=np.float32), np.full(16000, np.nan, dtype=np.float32)],
    ids=["empty", "stereo", "nan"],
)
def test_bad_audio_raises_input_error(audio):
    with pytest.raises(InputError):
        detect_speech(audio)


def test_loading_the_model_keeps_torch_threads():
    # Importing silero_vad sets torch to 1 thread process-wide, which would slow every other model.
    code = (
        "import torch, numpy as np; torch.set_num_threads(2); from encoders.vad import detect_speech; "
        "detect_speech(np.zeros(16000, np.float32)); print(torch.get_num_threads())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "2"


# encoders.audio: decoding is what every encoder's input goes through.


def test_load_audio_decodes_wav_exactly(sample):
    import soundfile

    reference, rate = soundfile.read(SAMPLE_DIR / "sample.wav", dtype="float32")
    assert rate == 16000 and sample.dtype == np.float32
    np.testing.assert_allclose(sample, reference, atol=1e-6)


def test_load_audio_resamples_and_downmixes(tmp_path, sample):
    import soundfile

    stereo = np.stack([sample, sample], axis=1)
    soundfile.write(tmp_path / "stereo32k.wav", np.repeat(stereo, 2, axis=0), 32000)  # 2x rate, 2 channels
    decoded = load_audio(tmp_path / "stereo32k.wav")
    assert decoded.ndim == 1 and abs(len(decoded) - len(sample)) <= 160


def test_load_audio_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_audio(tmp_path / "missing.wav")
    (tmp_path / "junk.wav").write_bytes(b"not audio at all" * 100)
    with pytest.raises(InputError):
        load_audio(tmp_path / "junk.wav")
