"""Scorers by name, so a config can say ``weights: {accumulated: 1.0, query: 1.0, ...}``.

Each scorer module registers its class with :func:`register_scorer`; adding a scorer is one new
module (imported by ``kvstore.scoring`` or by whoever defines it) and one entry in the weights.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable, TypeVar

from kvstore.scoring.base import Scorer

S = TypeVar("S", bound=type)

SCORERS: dict[str, type[Scorer]] = {}


def register_scorer(name: str) -> Callable[[S], S]:
    """Class decorator: make ``cls`` the scorer called ``name`` in configs."""

    def register(cls: S) -> S:
        known = SCORERS.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"scorer name {name!r} is taken by {known.__module__}.{known.__qualname__}")
        SCORERS[name] = cls
        return cls

    return register


def get_scorer(name: str, **options: Any) -> Scorer:
    """Build the scorer registered as ``name`` with dataclass ``options``."""
    if name not in SCORERS:
        raise KeyError(f"unknown scorer {name!r}; known: {sorted(SCORERS)}")
    return SCORERS[name](**options)


def check_scorer_names(names: Iterable[str]) -> None:
    """Refuse names no scorer is registered under, naming them and the registered ones (one message for the
    cache's config and the app's settings)."""
    unknown = sorted(set(names) - set(SCORERS))
    if unknown:
        raise ValueError(f"unknown scorers {unknown} (registered: {', '.join(sorted(SCORERS))})")
