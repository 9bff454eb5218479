"""Pool several ``bench/kv_quality.py`` runs into one row per method: needles summed over the runs, NLL recovery
averaged. One run of ~60 needles moves by about 0.1 of the full cache's accuracy with nothing but the torch thread
count or the needle seed changed (docs/benchmarks.md, session 32), so a needle figure is given over several runs.

    python bench/kv_pool.py bench/out/RUN1 bench/out/RUN2 ...   (each a folder holding kv_quality.json)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def pool(reports: list[dict]) -> dict[str, dict[str, float]]:
    """Per method present in every report: needles right / needles the full cache got right (pooled), mean NLL
    recovery, mean span retention, and the spread of the single runs' needle figures."""
    methods = set.intersection(*(set(r["results"]) for r in reports)) if reports else set()
    out: dict[str, dict[str, float]] = {}
    for method in sorted(methods):
        rows = [(r["results"][method], r["results"]["full"]) for r in reports]
        if any("error" in row or "error" in full for row, full in rows):
            continue
        right = sum(row["needle_accuracy"] * row["needles"] for row, _ in rows)
        full_right = sum(full["needle_accuracy"] * full["needles"] for _, full in rows)
        single = [row["needle_accuracy"] / full["needle_accuracy"] for row, full in rows if full["needle_accuracy"]]
        out[method] = {
            "runs": len(rows),
            "needles": sum(row["needles"] for row, _ in rows),
            "needle_vs_full": right / full_right if full_right else float("nan"),
            "needle_vs_full_min": min(single, default=float("nan")),
            "needle_vs_full_max": max(single, default=float("nan")),
            "nll_recovery": sum(row["nll_recovery"] for row, _ in rows) / len(rows),
            "span_retention": sum(row["span_retention"] for row, _ in rows) / len(rows),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="folders of kv_quality.py runs (or their kv_quality.json)")
    args = ap.parse_args(argv)
    reports = []
    for run in args.runs:
        path = run / "kv_quality.json" if run.is_dir() else run
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            print(f"kv_pool: cannot read {path}: {exc}", file=sys.stderr)
            return 2
    print(f"| method ({len(reports)} runs) | needles | needles of full, pooled (single runs) | NLL recovery | span retention |")
    print("|---|---:|---|---:|---:|")
    for method, row in pool(reports).items():
        print(f"| {method} | {row['needles']} | {row['needle_vs_full']:.3f} ({row['needle_vs_full_min']:.3f}-"
              f"{row['needle_vs_full_max']:.3f}) | {row['nll_recovery']:.3f} | {row['span_retention']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
