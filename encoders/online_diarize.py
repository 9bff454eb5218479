"""Online diarization: a speaker for every committed word, as words arrive, with stable labels.

Each committed word gets a voice embedding of the audio around it (inside its run of speech, so a
window never spans the pause of a speaker change); it joins the nearest speaker centroid, or starts a
new speaker when no centroid is close. Incremental decisions drift, so every ``recluster_every_s``
of stream time all kept embeddings are clustered again (the batch diarizer's spectral clustering
and same-voice merging) and the new clusters are matched to the existing labels by Hungarian
assignment on the words they share, so SPEAKER_00 stays SPEAKER_00; words whose label changed are
reported as ``LabelChange`` for the session to correct what it has shown.

Memory and time are bounded: audio is kept for ``history_s`` seconds, embeddings for ``max_words``.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from encoders.asr import Word
from encoders.audio import SAMPLE_RATE
from encoders.diarize import EmbeddedDiarizer, _pipeline_folder
from encoders.errors import InputError
from encoders.speaker_embedding import BACKENDS as BACKEND_NAMES
from encoders.speaker_embedding import FRAME_RATE, _l2norm, speaker_embedding

log = logging.getLogger(__name__)

# (audio, [(start_sample, end_sample), ...]) -> (n, dim) L2-normalised embeddings
Embedder = Callable[[np.ndarray, list[tuple[int, int]]], np.ndarray]


@dataclass(frozen=True)
class BackendEmbedder:
    """An embedded backend (encoders/speaker_embedding.py) as an ``Embedder``: overlapping spans
    are joined into regions so a backend that shares work per region (CAM++) runs once over them."""

    name: str = EmbeddedDiarizer.embedding

    def __call__(self, audio: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
        hop, quantum = SAMPLE_RATE // FRAME_RATE, 25  # lengths in 0.25 s steps: GE2E batches equal lengths
        frames = [(s // hop, s // hop + max(quantum, (e - s) // hop // quantum * quantum)) for s, e in spans]
        regions: list[tuple[int, int]] = []
        owner = []
        for s, e in sorted(frames):
            if regions and s <= regions[-1][1]:
                regions[-1] = (regions[-1][0], max(regions[-1][1], e))
            else:
                regions.append((s, e))
        starts = np.array([r[0] for r in regions])
        for s, _ in frames:
            owner.append(int(np.searchsorted(starts, s, side="right") - 1))
        windows = np.array([(s, e, r) for (s, e), r in zip(frames, owner)], dtype=np.int64).reshape(-1, 3)
        return speaker_embedding(self.name).embed(audio, regions, windows)


class PyannoteEmbedder:
    """The speaker-embedding model of a local pyannote.audio pipeline folder (config.yaml + weights)."""

    def __init__(self, folder: str | Path):
        import os

        os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")
        from pyannote.audio import Pipeline

        try:
            pipeline = Pipeline.from_pretrained(Path(folder))
        except Exception as exc:  # pyannote raises many types for a broken folder
            raise InputError(f"cannot load the pyannote pipeline in {folder}: {exc}") from exc
        self._embedding = getattr(pipeline, "_embedding", None)
        if self._embedding is None:
            raise InputError(f"the pyannote pipeline in {folder} has no speaker-embedding model")

    def __call__(self, audio: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
        import torch

        width = max(e - s for s, e in spans)
        batch = np.zeros((len(spans), 1, width), dtype=np.float32)
        masks = np.zeros((len(spans), width), dtype=np.float32)
        for i, (s, e) in enumerate(spans):
            batch[i, 0, : e - s] = audio[s:e]
            masks[i, : e - s] = 1.0
        emb = self._embedding(torch.from_numpy(batch), masks=torch.from_numpy(masks))
        return _l2norm(np.nan_to_num(np.asarray(emb, dtype=np.float32)))


# The live re-clustering's merge threshold where it differs from the batch one (encoders.diarize.MERGE_THRESHOLDS):
# GE2E's word windows merged best at 0.75 (development seeds 0-23: clean median DER 15.5% -> 10.1% against 0.71).
LIVE_MERGE_THRESHOLDS = {"ge2e": 0.75}


@dataclass(frozen=True)
class LabelChange:
    """Word number ``index`` (0 = the first word ever labelled) is now spoken by ``new``."""

    index: int
    old: str
    new: str


@dataclass
class _Labelled:
    index: int
    start: float
    end: float
    embedding: np.ndarray
    label: str


@dataclass
class OnlineDiarizer:
    """Speakers for committed words (16 kHz mono audio in, labels SPEAKER_00, SPEAKER_01... out)."""

    window_s: float = 1.5  # audio embedded per word, centred on it, inside its speech run
    min_window_s: float = 0.6  # shorter runs are widened even across a pause
    run_gap_s: float = 0.3  # a pause this long may be a speaker change: windows do not cross it
    new_speaker_threshold: float = 0.6  # cosine to the nearest centroid below which a new speaker starts
    recluster_every_s: float = 10.0  # stream seconds between global re-clusterings
    min_recluster_words: int = 40  # below this, spectral clustering is less reliable than the centroids
    # the batch diarizer's clustering over the same voice model as the words' embeddings (``for_embedding``)
    clustering: EmbeddedDiarizer = field(
        default_factory=lambda: EmbeddedDiarizer(embedding="ge2e", merge_threshold=LIVE_MERGE_THRESHOLDS["ge2e"]))
    max_speakers: int = 8
    # A re-clustering may add at most this many speakers to those already labelled (0: any number). On few words the
    # spectral clustering splits one voice into several, each shown as a new person until a later one merges them
    # back (development seed 2: one voice became 4 labels at 21 s, merged 30 s later). More come at the next ones.
    # Held-out seeds 1000-1039, CAM++ + GE2E: meetings ever showing a speaker who was not there 78% -> 62%, words
    # on the right speaker as first shown 75.9% -> 79.7%, final labels unchanged (docs/benchmarks.md, session 48).
    new_per_recluster: int = 2
    history_s: float = 40.0  # audio kept: committed words are never older than the ASR buffer
    max_words: int = 1500  # embeddings kept for re-clustering (and relabelling)
    # GE2E here, the light model tests build; a session takes ``diarization.live_embedding`` (default CAM++ + GE2E,
    # as the batch diarizer: evaluation seeds 1000-1039 mean DER 12.4% -> 10.6%, word accuracy 86.8% -> 88.5%, RTF
    # 0.066 vs 0.020; docs/benchmarks.md). The new-speaker threshold was chosen for GE2E.
    embedder: Embedder = field(default_factory=lambda: BackendEmbedder("ge2e"))
    _audio: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32), repr=False)
    _audio_start: int = 0  # stream sample index of _audio[0]
    _words: deque = field(default_factory=deque, repr=False)
    _count: int = 0
    _last_recluster: float = 0.0
    _changes: list[LabelChange] = field(default_factory=list, repr=False)

    @property
    def stream_seconds(self) -> float:
        return (self._audio_start + len(self._audio)) / SAMPLE_RATE

    def insert_audio(self, samples: np.ndarray) -> None:
        """Append 16 kHz mono float32 samples (the same stream the ASR gets)."""
        samples = np.asarray(samples)
        if samples.ndim != 1 or not np.issubdtype(samples.dtype, np.floating):
            raise InputError(f"diarizer audio must be 1-D float samples at 16 kHz, got {samples.dtype} {samples.shape}")
        self._audio = np.concatenate([self._audio, samples.astype(np.float32, copy=False)])
        extra = len(self._audio) - int(self.history_s * SAMPLE_RATE)
        if extra > 0:
            self._audio = self._audio[extra:].copy()
            self._audio_start += extra

    def label_words(self, words: Sequence[Word]) -> list[str]:
        """Speaker labels for newly committed ``words`` (in stream order), one per word.

        May re-cluster everything kept; label changes of earlier words are then collected for
        ``take_changes``.
        """
        if not words:
            return []
        spans = self._spans(words)
        emb = self.embedder(self._audio, [(s - self._audio_start, e - self._audio_start) for s, e in spans])
        labels = []
        for w, e in zip(words, emb):
            label = self._nearest(e)
            self._words.append(_Labelled(self._count, w.start, w.end, e, label))
            self._count += 1
            labels.append(label)
        while len(self._words) > self.max_words:
            self._words.popleft()
        if words[-1].end - self._last_recluster >= self.recluster_every_s:
            self._last_recluster = words[-1].end
            self._recluster()
            by_index = {r.index: r.label for r in self._words}
            labels = [by_index.get(self._count - len(words) + i, lab) for i, lab in enumerate(labels)]
            new = set(range(self._count - len(words), self._count))
            self._changes = [c for c in self._changes if c.index not in new]  # reported as labels
        return labels

    def take_changes(self) -> list[LabelChange]:
        """Label changes of earlier words since the last call (from re-clustering)."""
        changes, self._changes = self._changes, []
        return changes

    # ------------------------------------------------------------------------------------------

    def _spans(self, words: Sequence[Word]) -> list[tuple[int, int]]:
        """Stream-sample span to embed for each word: ``window_s`` around it, cut at long pauses."""
        lo_audio, hi_audio = self._audio_start, self._audio_start + len(self._audio)
        if hi_audio - lo_audio < SAMPLE_RATE // 10:
            raise InputError("the diarizer has no audio for these words: insert_audio first")
        known = [(r.start, r.end) for r in list(self._words)[-8:]] + [(w.start, w.end) for w in words]
        spans = []
        for w in words:
            run_start, run_end = w.start, w.end
            for s, e in reversed(known):  # grow the run through words closer than run_gap_s
                if s < run_start and run_start - e <= self.run_gap_s:
                    run_start = min(run_start, s)
            for s, e in known:
                if e > run_end and s - run_end <= self.run_gap_s:
                    run_end = max(run_end, e)
            centre = (w.start + w.end) / 2
            a = max(run_start, centre - self.window_s / 2)
            b = min(run_end, centre + self.window_s / 2)
            if b - a < self.window_s:  # use the run's room on the other side
                a, b = max(run_start, b - self.window_s), min(run_end, a + self.window_s)
            if b - a < self.min_window_s:
                a, b = centre - self.min_window_s / 2, centre + self.min_window_s / 2
            s = min(max(int(a * SAMPLE_RATE), lo_audio), hi_audio - SAMPLE_RATE // 10)
            e = max(min(int(b * SAMPLE_RATE), hi_audio), s + SAMPLE_RATE // 10)
            spans.append((s, e))
        return spans

    def _centroids(self) -> tuple[list[str], np.ndarray]:
        names = sorted({r.label for r in self._words})
        if not names:
            return [], np.zeros((0, 1))
        return names, _l2norm(np.stack([np.mean([r.embedding for r in self._words if r.label == n], 0) for n in names]))

    def _nearest(self, emb: np.ndarray) -> str:
        names, centroids = self._centroids()
        if names:
            sims = centroids @ emb
            if sims.max() >= self.new_speaker_threshold or len(names) >= self.max_speakers:
                return names[int(np.argmax(sims))]
        return self._new_name(names)

    def _new_name(self, taken: Sequence[str]) -> str:
        k = 0
        while f"SPEAKER_{k:02d}" in taken:
            k += 1
        return f"SPEAKER_{k:02d}"

    def _recluster(self) -> None:
        """Cluster every kept embedding again; map clusters onto existing labels; record changes."""
        from scipy.optimize import linear_sum_assignment

        records = list(self._words)
        if len(records) < self.min_recluster_words:
            return
        emb = np.stack([r.embedding for r in records])
        old_names = sorted({r.label for r in records})
        high = self.max_speakers
        if self.new_per_recluster:
            high = min(high, len(old_names) + self.new_per_recluster)
        clusters = self.clustering.cluster(emb, 1, high)
        ids = list(np.unique(clusters))
        overlap = np.zeros((len(ids), len(old_names)))
        for r, c in zip(records, clusters):
            overlap[ids.index(c), old_names.index(r.label)] += 1
        rows, cols = linear_sum_assignment(-overlap)
        name_of = {ids[i]: old_names[j] for i, j in zip(rows, cols) if overlap[i, j] > 0}
        taken = list(old_names)
        for c in ids:
            if c not in name_of:
                name_of[c] = self._new_name(taken)
                taken.append(name_of[c])
        for r, c in zip(records, clusters):
            if name_of[c] != r.label:
                self._changes.append(LabelChange(r.index, r.label, name_of[c]))
                r.label = name_of[c]


def for_embedding(embedding: str) -> OnlineDiarizer:
    """An online diarizer whose word windows and re-clustering use the embedded voice model ``embedding``."""
    if embedding not in BACKEND_NAMES:
        raise InputError(f"unknown speaker embedding {embedding!r}; use one of {', '.join(sorted(BACKEND_NAMES))}")
    return OnlineDiarizer(embedder=BackendEmbedder(embedding), clustering=EmbeddedDiarizer(
        embedding=embedding, merge_threshold=LIVE_MERGE_THRESHOLDS.get(embedding, 0.0)))


def make_online_diarizer(backend: str = "auto", model: str | None = None, embedding: str = "ge2e") -> OnlineDiarizer:
    """The batch ``make_diarizer`` rule: pyannote's embedding model when ``model`` is a local
    pyannote pipeline folder, the embedded voice model ``embedding`` otherwise."""
    if backend not in ("auto", "embedded", "pyannote"):
        raise InputError(f"unknown diarization backend {backend!r}; use auto, embedded or pyannote")
    folder = _pipeline_folder(model) if backend != "embedded" else None
    if backend == "pyannote" and folder is None:
        raise InputError("the pyannote diarization backend needs a model: a local pipeline folder with config.yaml")
    if folder is not None:
        return OnlineDiarizer(embedder=PyannoteEmbedder(folder))
    if model and backend == "auto":
        log.warning("diarization model %s is not a pyannote pipeline folder; using the embedded diarizer", model)
    return for_embedding(embedding)


def speaker_accuracy(predicted: Sequence[str], gold: Sequence[str]) -> float:
    """Fraction of words whose label is right under the best one-to-one label mapping (Hungarian)."""
    from scipy.optimize import linear_sum_assignment

    if len(predicted) != len(gold):
        raise InputError(f"{len(predicted)} predicted labels for {len(gold)} gold labels")
    if not gold:
        return float("nan")
    p_names, g_names = sorted(set(predicted)), sorted(set(gold))
    counts = np.zeros((len(p_names), len(g_names)))
    for p, g in zip(predicted, gold):
        counts[p_names.index(p), g_names.index(g)] += 1
    rows, cols = linear_sum_assignment(-counts)
    return float(counts[rows, cols].sum() / len(gold))
