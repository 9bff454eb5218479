"""Test peers and fixtures for the app that benchmarks use too (so they live in the package, not in tests/)."""
