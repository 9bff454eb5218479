"""Why the speaker count is wrong: how far apart the voice model puts the suite's speakers, against how far apart
it puts two halves of one speaker.

    .venv/bin/python bench/speaker_separation.py SUITE_DIR [--condition clean] [--limit N]

For each generated meeting (bench/suites/meetings.py) the embedded diarizer runs as usual; its clustering windows
are labelled with the reference speaker who covers at least 60% of each. Two distributions of the statistic the
diarizer merges clusters by (mean window cosine between two groups, encoders/diarize.py::_merge_similar):
- two speakers: every pair of reference speakers of a meeting, and apart the pairs the diarizer put in one cluster;
- one speaker split in two: each reference speaker's windows split by 2-means (the split a clustering could make
  of one voice).
Where a merged pair's cosine lies inside the one-speaker distribution, no threshold on this statistic can tell the
two voices apart without splitting single speakers as often; a merged pair below it is a speaker the clustering
missed (most often one with a few seconds of speech). Prints both distributions' percentiles and each merged pair.

Evidence beyond the voice: a cluster in which two people introduce themselves ("I'm Omar", "This is Chloe") holds
two speakers whatever their voices. For each under-counted meeting it also counts whether every speaker of every
merged cluster introduced themselves (the suite's facts.json), i.e. whether introductions, even heard perfectly,
could split its clusters back to the right count.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.diarization import read_rttm, suite_samples  # noqa: E402
from encoders.audio import load_audio  # noqa: E402
from encoders.diarize import FRAME_RATE, EmbeddedDiarizer  # noqa: E402


class _Recording(EmbeddedDiarizer):
    """The embedded diarizer, keeping the clustering windows, their embeddings and labels of its last run."""

    def _embed(self, audio, regions, sets):
        out = super()._embed(audio, regions, sets)
        self.windows, self.embeddings = sets[0], out[0]
        return out

    def cluster(self, emb, low, high, spans=None):
        self.labels = super().cluster(emb, low, high, spans)
        return self.labels


def window_speakers(windows: np.ndarray, reference) -> np.ndarray:
    """Index of the reference speaker covering >= 60% of each window, -1 where none does."""
    names = sorted({t.speaker for t in reference})
    out = np.full(len(windows), -1)
    for k, (s, e, _) in enumerate(windows):
        a, b = s / FRAME_RATE, e / FRAME_RATE
        cover = [sum(max(0.0, min(b, t.end) - max(a, t.start)) for t in reference if t.speaker == n) for n in names]
        best = int(np.argmax(cover))
        if cover[best] >= 0.6 * (b - a):
            out[k] = best
    return out


def cross_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Mean pairwise cosine between two groups of unit vectors (the diarizer's merge statistic)."""
    return float(a.sum(0) @ b.sum(0) / (len(a) * len(b)))


def one_speaker_split(emb: np.ndarray) -> float:
    from sklearn.cluster import KMeans

    halves = KMeans(2, n_init=10, random_state=0).fit_predict(emb)
    return cross_cosine(emb[halves == 0], emb[halves == 1])


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import track

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", type=Path)
    ap.add_argument("--condition", default=None, help="only meetings of this condition (clean, noisy, ...)")
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args(argv)
    todo = [m for m in suite_samples(args.suite) if args.condition in (None, m[3])][: args.limit]
    if not todo:
        raise SystemExit(f"error: no meetings in {args.suite}" + (f" of condition {args.condition}" if args.condition else ""))
    diarizer = _Recording(overlap=False)
    pairs, merged, single, wrong, under, split_by_intros = [], [], [], 0, 0, 0
    for name, audio_path, rttm, _ in track(todo, description="embedding", console=Console(stderr=True)):
        reference = read_rttm(rttm)
        facts = json.loads((audio_path.parent / "facts.json").read_text())
        introduced = {s["name"] for s in facts["speakers"] if s.get("named_by") == "introduction"}
        diarizer.diarize(load_audio(audio_path))
        who = window_speakers(diarizer.windows, reference)
        emb, labels = diarizer.embeddings, diarizer.labels
        names = sorted({t.speaker for t in reference})  # window_speakers' indices
        n, found = len(names), len(np.unique(labels))
        wrong += found != n
        # each reference speaker's cluster: the one most of its windows went to
        cluster_of = {i: int(np.bincount(labels[who == i]).argmax()) for i in range(n) if (who == i).any()}
        for i in range(n):
            if (who == i).sum() >= 6:
                single.append(one_speaker_split(emb[who == i]))
            for j in range(i + 1, n):
                if i not in cluster_of or j not in cluster_of:
                    continue
                c = cross_cosine(emb[who == i], emb[who == j])
                pairs.append(c)
                if cluster_of[i] == cluster_of[j]:
                    merged.append((name, c, int(min((who == i).sum(), (who == j).sum()))))
        if found < n:
            under += 1
            groups: dict[int, set[str]] = {}
            for i, cluster in cluster_of.items():
                groups.setdefault(cluster, set()).add(names[i])
            shared = [group for group in groups.values() if len(group) > 1]
            split_by_intros += bool(shared) and all(group <= introduced for group in shared)
    single_arr, pairs_arr = np.array(single), np.array(pairs)
    pct = (5, 10, 25, 50)
    print(f"`python bench/speaker_separation.py {args.suite}{f' --condition {args.condition}' if args.condition else ''}`"
          f": {len(todo)} meetings, speaker count wrong in {wrong}\n")
    print("| groups | n | " + " | ".join(f"p{p}" for p in pct) + " | max |")
    print("|---|---:|" + "---:|" * (len(pct) + 1))
    print(f"| one speaker split in two (2-means) | {len(single_arr)} | "
          + " | ".join(f"{np.percentile(single_arr, p):.3f}" for p in pct) + f" | {single_arr.max():.3f} |")
    print(f"| two different speakers (all pairs) | {len(pairs_arr)} | "
          + " | ".join(f"{np.percentile(pairs_arr, p):.3f}" for p in pct) + f" | {pairs_arr.max():.3f} |")
    floor = np.percentile(single_arr, 5)
    inside = [m for m in merged if m[1] >= floor]
    print(f"\npairs the diarizer put in one cluster: {len(merged)}; {len(inside)} of them at or above the 5th percentile "
          f"of one-speaker splits ({floor:.3f}); the others' smaller speaker has median "
          f"{np.median([m[2] for m in merged if m[1] < floor] or [0]):.0f} windows (0.5 s apart)")
    for name, c, size in sorted(merged, key=lambda m: m[1]):
        print(f"- {name}: cosine {c:.3f}, smaller speaker {size} windows")
    print(f"\nunder-counted meetings: {under}; where every speaker of every shared cluster introduced themselves (so "
          f"introductions heard perfectly could split them): {split_by_intros}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
