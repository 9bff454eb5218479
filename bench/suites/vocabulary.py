"""Which vocabulary the suite generator speaks: the original one (topics.py and phrases.py
beside this file) or one written afresh by a helper who never read app/.

- ``fresh`` (bench/suites/fresh/): other topics, names and every template phrased anew; its wrong
  answers may be looked at (a development vocabulary);
- ``unseen`` (bench/suites/unseen/): a third, written by another helper after the fixes made while
  looking at ``fresh``; only its score is read, never its answers.

The generator-swap bench (bench/generator_swap.py) regenerates the suites with each: if the answer
pipeline only works for the original templates, the scores part. Chosen by the environment
(MINUTIA_SUITE_VOCABULARY) so that the generator's worker processes and the scorer read the same one.
"""

from __future__ import annotations

import importlib
import os

VOCABULARIES = ("original", "fresh", "unseen")
ENV = "MINUTIA_SUITE_VOCABULARY"


def chosen() -> str:
    name = os.environ.get(ENV, "original").strip() or "original"
    if name not in VOCABULARIES:
        raise SystemExit(f"{ENV}={name!r}: choose one of {', '.join(VOCABULARIES)}")
    return name


def _load(module: str):
    package = "bench.suites" if chosen() == "original" else f"bench.suites.{chosen()}"
    return importlib.import_module(f"{package}.{module}")


topics = _load("topics")
phrases = _load("phrases")
