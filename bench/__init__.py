"""Benchmarks; figures go to docs/benchmarks.md. A package so that `python -m bench.suites...` works."""
