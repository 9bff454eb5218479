"""Which QMSum validation meetings may be tuned on, and which are held out to be only scored.

The split is fixed by a hash of the file name (never by content or order), ~60% tuning. The KV store was
built on five validation meetings before the split existed (docs/benchmarks.md, issues 3-5): they count
as tuning whatever their hash says, so a held-out figure never comes from a meeting anyone looked at.
"""

from __future__ import annotations

import hashlib

PARTS = ("tuning", "held-out")
# Meetings the KV store's policies were built on (sessions 3-10, `kv_quality.py --limit 5`).
KV_BUILT_ON = frozenset({"TS3010c", "education_22", "Bro022", "Bed010", "TS3010b"})


def split_of(name: str, tuning_share: float = 0.6) -> str:
    """'tuning' or 'held-out' for a meeting's file name, by its hash alone."""
    bucket = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 1000
    return "tuning" if bucket < tuning_share * 1000 else "held-out"


def kv_part_of(name: str) -> str:
    """The part of a meeting for the KV benches: its hash split, except that the meetings the KV store was
    built on are tuning."""
    stem = name.removesuffix(".json")
    return "tuning" if stem in KV_BUILT_ON else split_of(name)
