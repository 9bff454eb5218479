"""The Global Timeline Index: stream time <-> token positions <-> KV blocks, per modality.

Every piece of a live meeting that becomes tokens is one *segment* on the timeline: a committed
speech turn ("audio", transcript tokens), a slide's OCR text ("video"), a prompt or note ("text").
The index answers what a question needs: which tokens (and so which KV blocks) belong to a time
window, when a token was said (timestamps cited in answers), and which moments best match a query
across modalities. Hours of meeting are tens of thousands of segments, so segments live in flat
numpy arrays and queries are bisections plus vectorised masks; nothing scans Python objects.

Token ranges are half-open ``[token_start, token_end)`` absolute cache positions; times are stream
seconds. Segments are appended in token order (the order they are prefilled); times may interleave
across modalities (a slide shown at 30 s can be added after speech up to 35 s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from kvstore.modality import MODALITY_NAMES as MODALITIES, Modality


def modality_code(modality: str) -> int:
    return int(Modality.parse(modality))


@dataclass(frozen=True)
class Segment:
    """One timed run of tokens of one modality (a speech turn, a slide's text, a prompt)."""

    index: int
    modality: str
    start_s: float
    end_s: float
    token_start: int
    token_end: int
    speaker: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class SegmentHit:
    segment: Segment
    score: float


@dataclass(frozen=True)
class WindowHit:
    """A time window ranked jointly over modalities, with its best segment per modality."""

    start_s: float
    end_s: float
    score: float
    segments: tuple[Segment, ...]


class _Column:
    """A growable 1-D numpy array (amortised O(1) append)."""

    def __init__(self, dtype: Any) -> None:
        self.data = np.zeros(64, dtype=dtype)
        self.size = 0

    def append(self, value: Any) -> None:
        if self.size == self.data.shape[0]:
            self.data = np.concatenate([self.data, np.zeros_like(self.data)])
        self.data[self.size] = value
        self.size += 1

    def view(self) -> np.ndarray:
        return self.data[: self.size]

    def truncate(self, size: int) -> None:
        self.size = min(self.size, size)


class TimelineIndex:
    """Segments of every modality on one timeline; see the module docstring."""

    def __init__(self) -> None:
        self._start = _Column(np.float64)
        self._end = _Column(np.float64)
        self._tok_start = _Column(np.int64)
        self._tok_end = _Column(np.int64)
        self._modality = _Column(np.int8)
        self._speaker: list[str | None] = []
        self._text: list[str | None] = []
        # Embeddings per modality (dimensions may differ: CLIP for slides, a text encoder for speech).
        self._emb_rows: dict[int, list[int]] = {}
        self._emb_vecs: dict[int, list[np.ndarray]] = {}
        self._emb_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._by_start: np.ndarray | None = None  # argsort of start times (lazy)
        self._max_duration = 0.0

    # ------------------------------------------------------------------------------------------
    # Building
    # ------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._start.size

    def add(
        self,
        modality: str,
        start_s: float,
        end_s: float,
        token_start: int,
        token_end: int,
        speaker: str | None = None,
        text: str | None = None,
        embedding: np.ndarray | torch.Tensor | Sequence[float] | None = None,
    ) -> int:
        """Append a segment; returns its index. Token ranges must not go back before the last one."""
        code = modality_code(modality)
        start_s, end_s = float(start_s), float(end_s)
        token_start, token_end = int(token_start), int(token_end)
        if not (np.isfinite(start_s) and np.isfinite(end_s)) or end_s < start_s:
            raise ValueError(f"bad segment time [{start_s}, {end_s}]")
        if token_end < token_start or token_start < 0:
            raise ValueError(f"bad token range [{token_start}, {token_end})")
        if len(self) and token_start < int(self._tok_end.view()[-1]):
            raise ValueError(f"token range [{token_start}, {token_end}) overlaps the previous segment "
                             f"(ends at {int(self._tok_end.view()[-1])}); segments are added in prefill order")
        index = len(self)
        if index and start_s < self._start.view()[-1]:
            self._by_start = None  # out of time order: re-sort at the next time query
        elif self._by_start is not None:
            self._by_start = np.append(self._by_start, index)
        self._start.append(start_s)
        self._end.append(end_s)
        self._tok_start.append(token_start)
        self._tok_end.append(token_end)
        self._modality.append(code)
        self._speaker.append(speaker)
        self._text.append(text)
        self._max_duration = max(self._max_duration, end_s - start_s)
        if embedding is not None:
            vec = np.asarray(torch.as_tensor(embedding).detach().cpu().float().numpy() if isinstance(embedding, torch.Tensor)
                             else embedding, dtype=np.float32).ravel()
            known = self._emb_vecs.get(code)
            if known and known[0].shape != vec.shape:
                raise ValueError(f"{modality} embeddings have {known[0].shape[0]} dimensions, got {vec.shape[0]}")
            self._emb_rows.setdefault(code, []).append(index)
            self._emb_vecs.setdefault(code, []).append(vec)
            self._emb_cache.pop(code, None)
        return index

    def truncate(self, token_pos: int) -> None:
        """Forget everything from ``token_pos`` on (rollback after a question); a straddling segment is cut."""
        keep = int(np.searchsorted(self._tok_start.view(), token_pos, side="left"))
        for column in (self._start, self._end, self._tok_start, self._tok_end, self._modality):
            column.truncate(keep)
        del self._speaker[keep:], self._text[keep:]
        if keep:
            ends = self._tok_end.view()
            ends[-1] = min(int(ends[-1]), token_pos)
        for code in list(self._emb_rows):
            rows = self._emb_rows[code]
            cut = int(np.searchsorted(np.asarray(rows), keep))
            del rows[cut:], self._emb_vecs[code][cut:]
            self._emb_cache.pop(code, None)
        self._by_start = None
        durations = self._end.view() - self._start.view()
        self._max_duration = float(durations.max()) if durations.size else 0.0

    # ------------------------------------------------------------------------------------------
    # Lookups
    # ------------------------------------------------------------------------------------------

    def segment(self, index: int) -> Segment:
        if not 0 <= index < len(self):
            raise IndexError(index)
        return Segment(
            index=index,
            modality=MODALITIES[int(self._modality.view()[index])],
            start_s=float(self._start.view()[index]),
            end_s=float(self._end.view()[index]),
            token_start=int(self._tok_start.view()[index]),
            token_end=int(self._tok_end.view()[index]),
            speaker=self._speaker[index],
            text=self._text[index],
        )

    def embedding(self, index: int) -> np.ndarray | None:
        """The embedding segment ``index`` was added with (None if it had none)."""
        code = int(self._modality.view()[index])
        rows = self._emb_rows.get(code, [])
        return self._emb_vecs[code][rows.index(index)] if index in rows else None

    def segments(self, indices: Iterable[int] | None = None) -> list[Segment]:
        indices = range(len(self)) if indices is None else indices
        return [self.segment(int(i)) for i in indices]

    def _modality_mask(self, rows: np.ndarray, modality: str | Sequence[str] | None) -> np.ndarray:
        if modality is None:
            return np.ones(rows.shape, dtype=bool)
        names = [modality] if isinstance(modality, str) else list(modality)
        codes = [modality_code(m) for m in names]
        return np.isin(self._modality.view()[rows], codes)

    def indices_in(self, t0: float, t1: float, modality: str | Sequence[str] | None = None) -> np.ndarray:
        """Segments overlapping the time window ``[t0, t1]`` (sorted by token position)."""
        if not len(self):
            return np.zeros(0, dtype=np.int64)
        if self._by_start is None:
            self._by_start = np.argsort(self._start.view(), kind="stable")
        starts = self._start.view()[self._by_start]
        # A segment overlapping [t0, t1] starts in [t0 - longest segment, t1].
        lo = int(np.searchsorted(starts, t0 - self._max_duration, side="left"))
        hi = int(np.searchsorted(starts, t1, side="right"))
        rows = self._by_start[lo:hi]
        ends, begins = self._end.view()[rows], self._start.view()[rows]
        # Closed window; a zero-length segment (a slide change instant) counts when inside it.
        hit = (ends >= t0) & (begins <= t1) & ((ends > t0) | (begins == ends) | (t0 == t1))
        rows = rows[hit & self._modality_mask(rows, modality)]
        return np.sort(rows)

    def segments_in(self, t0: float, t1: float, modality: str | Sequence[str] | None = None) -> list[Segment]:
        return self.segments(self.indices_in(t0, t1, modality))

    def tokens_in(self, t0: float, t1: float, modality: str | Sequence[str] | None = None) -> list[tuple[int, int]]:
        """Merged token ranges ``[start, end)`` of the segments overlapping the window."""
        rows = self.indices_in(t0, t1, modality)
        return _merge_ranges(self._tok_start.view()[rows], self._tok_end.view()[rows])

    def segment_at(self, token_pos: int) -> int | None:
        """Index of the segment holding ``token_pos``, or None (a token of no segment)."""
        row = int(np.searchsorted(self._tok_start.view(), token_pos, side="right")) - 1
        if row < 0 or token_pos >= int(self._tok_end.view()[row]):
            return None
        return row

    def time_of(self, token_pos: int) -> float | None:
        """Stream time of a token, interpolated linearly inside its segment (None outside every segment)."""
        row = self.segment_at(token_pos)
        if row is None:
            return None
        t0, t1 = float(self._start.view()[row]), float(self._end.view()[row])
        k0, k1 = int(self._tok_start.view()[row]), int(self._tok_end.view()[row])
        return t0 + (t1 - t0) * (token_pos - k0) / max(k1 - k0, 1)

    def segments_for_tokens(self, token_start: int, token_end: int) -> list[Segment]:
        """Segments overlapping the token range ``[token_start, token_end)`` (e.g. a kept KV block)."""
        starts, ends = self._tok_start.view(), self._tok_end.view()
        lo = max(int(np.searchsorted(ends, token_start, side="right")), 0)
        hi = int(np.searchsorted(starts, token_end, side="left"))
        return self.segments(range(lo, hi))

    def blocks_for(self, t0: float, t1: float, block_size: int,
                   modality: str | Sequence[str] | None = None) -> torch.Tensor:
        """Sorted unique logical KV block indices holding the window's tokens (``TieredCache`` blocks)."""
        return blocks_of_ranges(self.tokens_in(t0, t1, modality), block_size)

    @property
    def token_end(self) -> int:
        return int(self._tok_end.view()[-1]) if len(self) else 0

    # ------------------------------------------------------------------------------------------
    # Ranking
    # ------------------------------------------------------------------------------------------

    def similarity(self, query: np.ndarray | torch.Tensor | dict[str, Any]) -> np.ndarray:
        """Cosine of each segment's embedding with the query (NaN where a segment has none).

        ``query`` is one vector, or ``{modality: vector}`` when modalities embed differently
        (e.g. CLIP text features for slides, a sentence encoder for speech).
        """
        scores = np.full(len(self), np.nan, dtype=np.float32)
        for code, rows in self._emb_rows.items():
            vec = query.get(MODALITIES[code]) if isinstance(query, dict) else query
            if vec is None or not rows:
                continue
            q = np.asarray(vec.detach().cpu().float().numpy() if isinstance(vec, torch.Tensor) else vec,
                           dtype=np.float32).ravel()
            index, matrix = self._embeddings(code)
            if matrix.shape[1] != q.shape[0]:
                raise ValueError(f"query has {q.shape[0]} dimensions, {MODALITIES[code]} embeddings {matrix.shape[1]}")
            scores[index] = matrix @ (q / max(float(np.linalg.norm(q)), 1e-12))
        return scores

    def _embeddings(self, code: int) -> tuple[np.ndarray, np.ndarray]:
        """Row indices and L2-normalised embedding matrix of one modality (cached until it changes)."""
        if code not in self._emb_cache:
            matrix = np.stack(self._emb_vecs[code])
            matrix = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
            self._emb_cache[code] = (np.asarray(self._emb_rows[code], dtype=np.int64), matrix)
        return self._emb_cache[code]

    def _scores(self, scores: np.ndarray | Sequence[float] | None, query: Any) -> np.ndarray:
        if (scores is None) == (query is None):
            raise ValueError("give either per-segment scores or a query embedding")
        if query is not None:
            return self.similarity(query)
        out = np.asarray(scores, dtype=np.float32)
        if out.shape != (len(self),):
            raise ValueError(f"expected {len(self)} segment scores, got shape {out.shape}")
        return out

    def _candidates(self, window: tuple[float, float] | None, modality: str | Sequence[str] | None) -> np.ndarray:
        if window is not None:
            return self.indices_in(window[0], window[1], modality)
        rows = np.arange(len(self))
        return rows[self._modality_mask(rows, modality)]

    def top_segments(
        self,
        k: int,
        scores: np.ndarray | Sequence[float] | None = None,
        query: Any = None,
        window: tuple[float, float] | None = None,
        modality: str | Sequence[str] | None = None,
    ) -> list[SegmentHit]:
        """The ``k`` best segments by score (or cosine to ``query``), optionally inside a time window."""
        values = self._scores(scores, query)
        rows = self._candidates(window, modality)
        rows = rows[~np.isnan(values[rows])]
        if k <= 0 or not rows.size:
            return []
        order = rows[np.argsort(-values[rows], kind="stable")[:k]]
        return [SegmentHit(self.segment(int(i)), float(values[i])) for i in order]

    def top_windows(
        self,
        k: int,
        window_s: float,
        scores: np.ndarray | Sequence[float] | None = None,
        query: Any = None,
        window: tuple[float, float] | None = None,
        modality: str | Sequence[str] | None = None,
    ) -> list[WindowHit]:
        """Joint top-k over modalities: the ``k`` best non-overlapping windows of ``window_s`` seconds.

        Scores are min-max normalised per modality (a slide's CLIP cosine and a turn's text cosine
        are not on one scale); a window scores the sum over modalities of its best segment, so a
        moment where both the slide and the speech match beats one where only one does. Windows
        are aligned to multiples of ``window_s``; a segment counts in every window it overlaps.
        """
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        values = self._scores(scores, query).astype(np.float64)
        rows = self._candidates(window, modality)
        rows = rows[~np.isnan(values[rows])]
        if k <= 0 or not rows.size:
            return []
        mods = self._modality.view()[rows].astype(np.int64)
        norm = np.zeros(rows.shape, dtype=np.float64)
        for code in np.unique(mods):
            sel = mods == code
            v = values[rows[sel]]
            span = v.max() - v.min()
            norm[sel] = (v - v.min()) / span if span > 0 else (v > 0).astype(np.float64)
        first = np.floor(self._start.view()[rows] / window_s).astype(np.int64)
        last = np.maximum(np.ceil(self._end.view()[rows] / window_s).astype(np.int64) - 1, first)
        # One (segment, window) pair per window a segment overlaps (vectorised expansion).
        counts = last - first + 1
        seg_rep = np.repeat(np.arange(rows.size), counts)
        win = first[seg_rep] + (np.arange(seg_rep.size) - np.repeat(np.cumsum(counts) - counts, counts))
        n_mod = len(MODALITIES)
        key = win * n_mod + mods[seg_rep]
        best = {}  # (window, modality) -> best pair index, via a lexsort by key then score
        order = np.lexsort((-norm[seg_rep], key))
        first_of_key = np.ones(order.size, dtype=bool)
        first_of_key[1:] = key[order][1:] != key[order][:-1]
        winners = order[first_of_key]
        for pair in winners.tolist():
            best.setdefault(int(win[pair]), []).append(pair)
        ranked = sorted(best.items(), key=lambda item: (-sum(norm[seg_rep[p]] for p in item[1]), item[0]))
        hits = []
        for w, pairs in ranked[:k]:
            segs = tuple(self.segment(int(rows[seg_rep[p]])) for p in pairs)
            score = float(sum(norm[seg_rep[p]] for p in pairs))
            hits.append(WindowHit(w * window_s, (w + 1) * window_s, score, segs))
        return hits

    # ------------------------------------------------------------------------------------------
    # Persistence
    # ------------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly state (lists of numbers and strings)."""
        return {
            "version": 1,
            "start_s": self._start.view().tolist(),
            "end_s": self._end.view().tolist(),
            "token_start": self._tok_start.view().tolist(),
            "token_end": self._tok_end.view().tolist(),
            "modality": [MODALITIES[int(c)] for c in self._modality.view()],
            "speaker": list(self._speaker),
            "text": list(self._text),
            "embeddings": {
                MODALITIES[code]: {"rows": list(rows), "vectors": np.stack(self._emb_vecs[code]).tolist()}
                for code, rows in self._emb_rows.items() if rows
            },
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> "TimelineIndex":
        if state.get("version") != 1:
            raise ValueError(f"unsupported timeline state version {state.get('version')!r}")
        index = cls()
        vectors: dict[int, np.ndarray] = {}
        for name, emb in state.get("embeddings", {}).items():
            for row, vec in zip(emb["rows"], emb["vectors"]):
                vectors[int(row)] = np.asarray(vec, dtype=np.float32)
        for i in range(len(state["start_s"])):
            index.add(state["modality"][i], state["start_s"][i], state["end_s"][i], state["token_start"][i],
                      state["token_end"][i], state["speaker"][i], state["text"][i], vectors.get(i))
        return index


def _merge_ranges(starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, int]]:
    """Union of half-open ranges, sorted; touching ranges merge."""
    if not starts.size:
        return []
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    running_end = np.maximum.accumulate(ends)
    new_run = np.ones(starts.size, dtype=bool)
    new_run[1:] = starts[1:] > running_end[:-1]
    run_id = np.cumsum(new_run) - 1
    run_starts = starts[new_run]
    run_ends = np.zeros(run_starts.size, dtype=np.int64)
    np.maximum.at(run_ends, run_id, ends)
    return [(int(s), int(e)) for s, e in zip(run_starts, run_ends) if e > s]


def blocks_of_ranges(ranges: Sequence[tuple[int, int]], block_size: int) -> torch.Tensor:
    """Sorted unique block indices touched by half-open token ranges."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    pieces = [torch.arange(s // block_size, (e - 1) // block_size + 1) for s, e in ranges if e > s]
    if not pieces:
        return torch.zeros(0, dtype=torch.long)
    return torch.unique(torch.cat(pieces))
