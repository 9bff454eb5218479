"""Who spoke when: speaker turns for a recording, and a speaker for every transcribed word.

Two backends. ``EmbeddedDiarizer`` needs nothing downloaded (silero VAD + resemblyzer's packaged
GE2E voice encoder + spectral clustering), so the app always works offline. ``PyannoteDiarizer``
runs a pyannote.audio pipeline the user has put in a local folder, for better quality on hard
audio (overlap, many speakers).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, Sequence

import numpy as np

from encoders.audio import SAMPLE_RATE, check_audio, resample
from encoders.errors import InputError
from encoders.vad import SpeechRegion, detect_speech

FRAME_RATE = 100  # resemblyzer's mel frames: 10 ms hop at 16 kHz


@dataclass(frozen=True)
class SpeakerTurn:
    """One speaker talking from ``start`` to ``end`` (seconds)."""

    start: float
    end: float
    speaker: str


class Timed(Protocol):
    start: float
    end: float


class Diarizer(ABC):
    """Backend-independent interface, so the session engine never cares which one runs."""

    @abstractmethod
    def diarize(
        self,
        audio: np.ndarray,
        sample_rate: int = 16000,
        num_speakers: int | None = None,
        min_speakers: int = 1,
        max_speakers: int = 8,
    ) -> list[SpeakerTurn]:
        """Speaker turns sorted by start; speakers named SPEAKER_00, SPEAKER_01... by first appearance."""


def _check_counts(num_speakers: int | None, min_speakers: int, max_speakers: int) -> tuple[int, int]:
    """Validate speaker-count hints and fold them into one (low, high) range."""
    if num_speakers is not None:
        if num_speakers < 1:
            raise InputError(f"num_speakers must be at least 1, got {num_speakers}")
        return num_speakers, num_speakers
    if min_speakers < 1 or max_speakers < min_speakers:
        raise InputError(f"need 1 <= min_speakers <= max_speakers, got {min_speakers} and {max_speakers}")
    return min_speakers, max_speakers


def _named_turns(starts: Sequence[float], ends: Sequence[float], labels: Sequence[object]) -> list[SpeakerTurn]:
    """Sort turns and rename labels SPEAKER_00, SPEAKER_01... in order of first appearance."""
    order = sorted(range(len(starts)), key=lambda i: (starts[i], ends[i]))
    names: dict[object, str] = {}
    turns = []
    for i in order:
        name = names.setdefault(labels[i], f"SPEAKER_{len(names):02d}")
        turns.append(SpeakerTurn(float(starts[i]), float(ends[i]), name))
    return turns


# --------------------------------------------------------------------------------------------
# Embedded backend


_encoder = None
_encoder_lock = threading.Lock()


def _voice_encoder():
    """resemblyzer's GE2E encoder (weights ship inside the package), loaded once per process."""
    global _encoder
    if _encoder is None:
        with _encoder_lock:
            if _encoder is None:
                from resemblyzer import VoiceEncoder

                _encoder = VoiceEncoder(device="cpu", verbose=False).eval()
    return _encoder


def _windows(regions: list[tuple[int, int]], width: int, step: int) -> np.ndarray:
    """(start, end) frame windows inside each speech region; a short region is one short window."""
    out = []
    for s, e in regions:
        if e - s <= width:
            out.append((s, e))
            continue
        starts = list(range(s, e - width + 1, step))
        if starts[-1] + width < e:
            starts.append(e - width)  # cover the region's tail
        out.extend((x, x + width) for x in starts)
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def _l2norm(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _ge2e_embeddings(audio: np.ndarray, windows: np.ndarray, batch: int = 128) -> np.ndarray:
    """One L2-normalised GE2E embedding per window, from one mel spectrogram of the whole file.

    resemblyzer's ``preprocess_wav`` would cut long pauses and shift every timestamp, so only its
    volume normalisation is applied; the VAD has already decided where speech is.
    """
    import torch
    from resemblyzer.audio import normalize_volume, wav_to_mel_spectrogram
    from resemblyzer.hparams import audio_norm_target_dBFS

    encoder = _voice_encoder()
    if np.abs(audio).max() > 0:
        audio = normalize_volume(audio, audio_norm_target_dBFS, increase_only=True)
    mel = wav_to_mel_spectrogram(audio)
    out = np.zeros((len(windows), 256), dtype=np.float32)
    lengths = windows[:, 1] - windows[:, 0]
    with torch.inference_mode():
        for length in np.unique(lengths):  # the LSTM batches only equal lengths
            idx = np.flatnonzero(lengths == length)
            for i in range(0, len(idx), batch):
                part = idx[i : i + batch]
                x = np.stack([mel[s : s + length] for s in windows[part, 0]])
                if x.shape[1] < length:  # the last mel frame may be missing at the file's end
                    x = np.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0)))
                out[part] = encoder(torch.from_numpy(x)).numpy()
    return out


def _mfcc_embeddings(audio: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """Baseline: per-window mean and std of MFCCs, standardised across the file."""
    import librosa

    mfcc = librosa.feature.mfcc(y=audio, sr=SAMPLE_RATE, n_mfcc=20, n_fft=400, hop_length=160).T
    csum = np.vstack([np.zeros((1, mfcc.shape[1])), np.cumsum(mfcc, 0)])
    csq = np.vstack([np.zeros((1, mfcc.shape[1])), np.cumsum(mfcc**2, 0)])
    s, e = np.minimum(windows[:, 0], len(mfcc) - 1), np.minimum(windows[:, 1], len(mfcc))
    n = np.maximum(e - s, 1)[:, None]
    mean = (csum[e] - csum[s]) / n
    std = np.sqrt(np.maximum((csq[e] - csq[s]) / n - mean**2, 0))
    feats = np.hstack([mean, std])
    feats = (feats - feats.mean(0)) / (feats.std(0) + 1e-8)
    return _l2norm(feats).astype(np.float32)


def _cluster_units(
    windows: np.ndarray, emb: np.ndarray, width: int, step: int, min_len: float, pure_fraction: float, hop: int
) -> np.ndarray:
    """Indices of windows clean enough, and far enough apart, to define speakers.

    A window is dropped when it is short, or when the windows half a width before and after it
    (same region) sound like different voices: it likely straddles a speaker change, and such
    mixed windows pull the centroids of two speakers together. Of the rest, one window per
    ``hop`` frames is kept: heavily overlapping windows are near copies that form tight chains
    in the affinity graph, which the eigengap then counts as extra speakers.
    """
    lengths = windows[:, 1] - windows[:, 0]
    full = np.flatnonzero(lengths >= min(width, min_len))
    if len(full) == 0:
        full = np.arange(len(windows))
    d = max(1, width // (2 * step))
    change = np.ones(len(windows))
    i = np.arange(d, len(windows) - d)
    # Contiguous means both neighbours are d steps away within the same speech region.
    ok = (windows[i + d, 0] - windows[i - d, 0] == 2 * d * step) & (windows[i, 0] - windows[i - d, 0] == d * step)
    i = i[ok]
    change[i] = np.einsum("ij,ij->i", emb[i - d], emb[i + d])
    cut = np.quantile(change[full], 1.0 - pure_fraction) if pure_fraction < 1.0 else -np.inf
    pure = full[change[full] >= cut]
    if len(pure) < 2:
        pure = full
    # The purest window in each hop-long bin of time.
    order = pure[np.lexsort((-change[pure], windows[pure, 0] // hop))]
    bins = windows[order, 0] // hop
    return np.sort(order[np.r_[True, bins[1:] != bins[:-1]]])


def _spectral_labels(emb: np.ndarray, low: int, high: int, p_neighbors: float) -> np.ndarray:
    """Spectral clustering on a pruned cosine affinity; the eigengap picks the speaker count.

    Pruning each row to its nearest neighbours (Park et al., 2019, "auto-tuning spectral
    clustering") keeps the graph's components per speaker, which makes the eigengap reliable.
    """
    from sklearn.cluster import KMeans

    n = len(emb)
    high = min(high, n)
    low = min(low, high)
    if high <= 1:
        return np.zeros(n, dtype=np.int64)
    aff = np.clip(emb @ emb.T, 0.0, 1.0)
    keep = max(2, int(round(p_neighbors * n)))
    thresh = -np.sort(-aff, axis=1)[:, keep - 1 : keep]
    pruned = np.where(aff >= thresh, aff, 0.0)
    pruned = (pruned + pruned.T) / 2
    deg = pruned.sum(1)
    d = 1.0 / np.sqrt(np.maximum(deg, 1e-12))
    lap = np.eye(n) - d[:, None] * pruned * d[None, :]
    vals, vecs = np.linalg.eigh(lap)
    # The eigengap cannot tell one speaker from two (vals[1] - vals[0] is small either way), so
    # it chooses among k >= 2 and _merge_similar decides whether two clusters are one voice.
    k_low = max(low, 2)
    if k_low >= high:
        k = high
    else:
        gaps = np.diff(vals[: high + 1])  # gaps[k-1] = vals[k] - vals[k-1]: k clusters
        k = int(np.argmax(gaps[k_low - 1 : high])) + k_low
    spec = _l2norm(vecs[:, :k])
    return KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(spec).astype(np.int64)


def _merge_similar(emb: np.ndarray, labels: np.ndarray, low: int, threshold: float) -> np.ndarray:
    """Average-linkage merging: join the two clusters whose windows sound most alike, on average,
    while that average cosine is above ``threshold``.

    This decides one speaker vs several and undoes eigengap over-counts. The raw average is
    used, not the cosine of normalised centroids: centroids of small clusters are noisy, and
    the raw average separated same-voice splits (>= 0.74) from distinct voices (<= 0.67) on
    both samples, where centroid cosines overlapped.
    """
    labels = labels.copy()
    while True:
        ids = np.unique(labels)
        if len(ids) <= max(low, 1):
            return labels
        means = np.stack([emb[labels == i].mean(0) for i in ids])
        cross = means @ means.T  # mean pairwise cosine between the clusters' windows
        np.fill_diagonal(cross, -np.inf)
        a, b = np.unravel_index(np.argmax(cross), cross.shape)
        if cross[a, b] < threshold:
            return labels
        labels[labels == ids[b]] = ids[a]


def _viterbi(scores: np.ndarray, switch_penalty: float) -> np.ndarray:
    """Best label path through per-frame scores with a fixed cost per speaker change."""
    n, k = scores.shape
    back = np.zeros((n, k), dtype=np.int64)
    total = scores[0].copy()
    for t in range(1, n):
        best = int(np.argmax(total))
        stay = total
        move = total[best] - switch_penalty
        back[t] = np.where(stay >= move, np.arange(k), best)
        total = np.maximum(stay, move) + scores[t]
    path = np.zeros(n, dtype=np.int64)
    path[-1] = int(np.argmax(total))
    for t in range(n - 1, 0, -1):
        path[t - 1] = back[t, path[t]]
    return path


@dataclass
class EmbeddedDiarizer(Diarizer):
    """Offline diarization: VAD -> sliding-window voice embeddings -> spectral clustering ->
    frame-level resegmentation against the cluster centroids, smoothed by a Viterbi pass."""

    window_s: float = 1.5
    step_s: float = 0.1
    embedding: Literal["ge2e", "mfcc"] = "ge2e"
    cluster_hop_s: float = 0.75  # spacing of the windows that are clustered
    min_cluster_window_s: float = 1.0  # shorter windows are too noisy to define a speaker
    max_cluster_units: int = 1000  # bounds the O(n^2) affinity and O(n^3) eigensolve on long audio
    p_neighbors: float = 0.25
    pure_fraction: float = 0.7  # share of windows, least likely to straddle a change, clustered
    count: str = "eigengap"
    reseg_window_s: float | None = None
    merge_threshold: float = 0.71  # mean window cosine above which two clusters are one voice
    switch_penalty: float = 0.3  # in summed cosine units per 10 ms frame
    fill_gap_s: float = 0.0  # same-speaker turns closer than this become one

    def diarize(
        self,
        audio: np.ndarray,
        sample_rate: int = 16000,
        num_speakers: int | None = None,
        min_speakers: int = 1,
        max_speakers: int = 8,
    ) -> list[SpeakerTurn]:
        low, high = _check_counts(num_speakers, min_speakers, max_speakers)
        audio = resample(check_audio(audio, sample_rate), sample_rate, SAMPLE_RATE)
        regions = detect_speech(audio, SAMPLE_RATE)
        return self.diarize_regions(audio, regions, low, high)

    def diarize_regions(
        self, audio: np.ndarray, regions: list[SpeechRegion], low: int, high: int
    ) -> list[SpeakerTurn]:
        """Diarize 16 kHz ``audio`` given its speech regions (lets callers reuse a VAD pass)."""
        n_frames = len(audio) // (SAMPLE_RATE // FRAME_RATE) + 1
        frames = [(int(round(r.start * FRAME_RATE)), min(int(round(r.end * FRAME_RATE)), n_frames)) for r in regions]
        frames = [(s, e) for s, e in frames if e > s]
        if not frames:
            return []
        width, step = int(round(self.window_s * FRAME_RATE)), max(1, int(round(self.step_s * FRAME_RATE)))
        windows = _windows(frames, width, step)
        if self.embedding == "ge2e":
            emb = _ge2e_embeddings(audio, windows)
        elif self.embedding == "mfcc":
            emb = _mfcc_embeddings(audio, windows)
        else:
            raise InputError(f"unknown embedding {self.embedding!r}; use 'ge2e' or 'mfcc'")

        # Cluster the reliable windows: full length, not straddling a speaker change, and
        # subsampled to bound the cost.
        speech = sum(e - s for s, e in frames)
        hop = max(int(self.cluster_hop_s * FRAME_RATE), -(-speech // self.max_cluster_units), 1)
        units = _cluster_units(windows, emb, width, step, self.min_cluster_window_s * FRAME_RATE, self.pure_fraction, hop)
        if self.count == "ahc":
            from sklearn.cluster import AgglomerativeClustering
            u = emb[units]
            if len(u) < 2:
                k = 1
            else:
                ah = AgglomerativeClustering(n_clusters=None, metric="cosine", linkage="average", distance_threshold=1 - self.merge_threshold).fit_predict(u)
                k = int(np.clip(ah.max() + 1, low, min(high, len(u))))
            labels = _spectral_labels(u, k, k, self.p_neighbors) if k > 1 else np.zeros(len(u), np.int64)
        else:
            labels = _spectral_labels(emb[units], low, high, self.p_neighbors)
        labels = _merge_similar(emb[units], labels, low, self.merge_threshold)
        ids = np.unique(labels)
        centroids = _l2norm(np.stack([emb[units][labels == i].mean(0) for i in ids]))

        # Frame scores: mean cosine to each centroid over the windows covering the frame.
        if self.reseg_window_s and self.reseg_window_s != self.window_s:
            windows = _windows(frames, int(round(self.reseg_window_s * FRAME_RATE)), step)
            emb = _ge2e_embeddings(audio, windows) if self.embedding == "ge2e" else _mfcc_embeddings(audio, windows)
        sims = emb @ centroids.T
        diff = np.zeros((n_frames + 1, len(ids)))
        np.add.at(diff, windows[:, 0], sims)
        np.add.at(diff, windows[:, 1], -sims)
        cover = np.zeros(n_frames + 1)
        np.add.at(cover, windows[:, 0], 1.0)
        np.add.at(cover, windows[:, 1], -1.0)
        scores = np.cumsum(diff, 0)[:n_frames] / np.maximum(np.cumsum(cover)[:n_frames, None], 1)

        # Resegment each speech region, a speaker change costing switch_penalty.
        starts, ends, who = [], [], []
        for s, e in frames:
            path = _viterbi(scores[s:e], self.switch_penalty) if len(ids) > 1 else np.zeros(e - s, np.int64)
            cuts = np.flatnonzero(np.diff(path)) + 1
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, e - s]):
                lab = int(path[a])
                if who and who[-1] == lab and (s + a) / FRAME_RATE - ends[-1] <= self.fill_gap_s:
                    ends[-1] = (s + b) / FRAME_RATE
                else:
                    starts.append((s + a) / FRAME_RATE)
                    ends.append((s + b) / FRAME_RATE)
                    who.append(lab)
        return _named_turns(starts, ends, who)


# --------------------------------------------------------------------------------------------
# pyannote backend


def _pipeline_folder(model: str | Path | None) -> Path | None:
    """The folder if ``model`` is a local pyannote pipeline (has config.yaml), else None."""
    if model is None:
        return None
    path = Path(model).expanduser()
    return path if (path / "config.yaml").is_file() else None


class PyannoteDiarizer(Diarizer):
    """A pyannote.audio pipeline from a local folder (config.yaml + the weights it points to)."""

    def __init__(self, folder: str | Path, device: str = "cpu"):
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise InputError(f"pyannote pipeline folder not found: {path}")
        if not (path / "config.yaml").is_file():
            raise InputError(f"{path} has no config.yaml; download a pyannote.audio pipeline folder there first")
        self.folder = path
        self.device = device
        self._pipeline = None
        self._lock = threading.Lock()

    def _load(self):
        with self._lock:
            if self._pipeline is None:
                import torch
                from pyannote.audio import Pipeline

                try:
                    pipeline = Pipeline.from_pretrained(self.folder)
                except Exception as exc:  # pyannote raises many types for a broken folder
                    raise InputError(f"cannot load the pyannote pipeline in {self.folder}: {exc}") from exc
                if pipeline is None:
                    raise InputError(f"cannot load the pyannote pipeline in {self.folder}")
                self._pipeline = pipeline.to(torch.device(self.device))
        return self._pipeline

    def diarize(
        self,
        audio: np.ndarray,
        sample_rate: int = 16000,
        num_speakers: int | None = None,
        min_speakers: int = 1,
        max_speakers: int = 8,
    ) -> list[SpeakerTurn]:
        import torch

        low, high = _check_counts(num_speakers, min_speakers, max_speakers)
        audio = check_audio(audio, sample_rate)
        pipeline = self._load()
        hints = {"num_speakers": num_speakers} if num_speakers else {"min_speakers": low, "max_speakers": high}
        output = pipeline({"waveform": torch.from_numpy(audio)[None], "sample_rate": sample_rate}, **hints)
        # pyannote.audio 4 returns a DiarizeOutput; 3.x returned the Annotation itself.
        annotation = getattr(output, "speaker_diarization", output)
        tracks = list(annotation.itertracks(yield_label=True))
        return _named_turns([s.start for s, _, _ in tracks], [s.end for s, _, _ in tracks], [l for _, _, l in tracks])


def make_diarizer(backend: str = "auto", model: str | None = None) -> Diarizer:
    """Pick a backend: "auto" uses pyannote when ``model`` is a local pipeline folder, else embedded."""
    if backend == "auto":
        folder = _pipeline_folder(model)
        return PyannoteDiarizer(folder) if folder else EmbeddedDiarizer()
    if backend == "embedded":
        return EmbeddedDiarizer()
    if backend == "pyannote":
        if not model:
            raise InputError("the pyannote diarization backend needs a model: a local pipeline folder with config.yaml")
        return PyannoteDiarizer(model)
    raise InputError(f"unknown diarization backend {backend!r}; use auto, embedded or pyannote")


# --------------------------------------------------------------------------------------------
# Words -> speakers


def _union(intervals: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint (starts, ends) covering the same time as ``intervals``."""
    starts: list[float] = []
    ends: list[float] = []
    for s, e in sorted(intervals):
        if starts and s <= ends[-1]:
            ends[-1] = max(ends[-1], e)
        else:
            starts.append(s)
            ends.append(e)
    return np.array(starts), np.array(ends)


def assign_speakers(words: Sequence[Timed], turns: Sequence[SpeakerTurn]) -> list[str]:
    """The speaker of each word: most time-overlap with that speaker's turns, else the nearest turn.

    Vectorised per speaker with prefix sums of speaking time and binary search, i.e.
    O(speakers * words * log turns): hours of meeting take milliseconds. Ties go to the
    speaker who appears first.
    """
    if not words:
        return []
    if not turns:
        raise InputError("cannot assign speakers: diarization found no speaker turns")
    ws = np.array([float(w.start) for w in words])
    we = np.array([float(w.end) for w in words])
    ws, we = np.minimum(ws, we), np.maximum(ws, we)
    speakers = list(dict.fromkeys(t.speaker for t in sorted(turns, key=lambda t: (t.start, t.end))))
    overlap = np.zeros((len(speakers), len(words)))
    gap = np.full((len(speakers), len(words)), np.inf)
    for k, name in enumerate(speakers):
        s, e = _union([(t.start, t.end) for t in turns if t.speaker == name and t.end > t.start])
        if len(s) == 0:  # only zero-length turns: usable as nearest, never as overlap
            s, e = _union([(t.start, t.start) for t in turns if t.speaker == name])
        cum = np.r_[0.0, np.cumsum(e - s)]

        def spoken_until(t: np.ndarray) -> np.ndarray:
            """This speaker's total speaking time in (-inf, t]."""
            i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
            last = np.maximum(i - 1, 0)
            partial = np.where(i > 0, np.clip(t - s[last], 0.0, e[last] - s[last]), 0.0)
            return cum[last] + partial

        overlap[k] = spoken_until(we) - spoken_until(ws)
        prev = np.searchsorted(s, ws, side="right") - 1  # last interval starting at or before the word
        nxt = np.searchsorted(s, ws, side="left")  # first interval starting at or after it
        gap_prev = np.where(prev >= 0, np.maximum(ws - e[np.maximum(prev, 0)], 0.0), np.inf)
        gap_next = np.where(nxt < len(s), np.maximum(s[np.minimum(nxt, len(s) - 1)] - we, 0.0), np.inf)
        gap[k] = np.minimum(gap_prev, gap_next)
    best = np.where(overlap.max(0) > 0, overlap.argmax(0), gap.argmin(0))
    return [speakers[i] for i in best]
