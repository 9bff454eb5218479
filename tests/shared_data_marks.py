"""``needs_shared``: marks a test that reads the team's development data (bench/shared_data.py: one setting,
``MINUTIA_SHARED_DATA``). Where that data is absent (a user's clone) the test is skipped, naming the folder."""

from __future__ import annotations

import pytest

from bench.shared_data import shared_data


def needs_shared(*parts: str) -> list[pytest.MarkDecorator]:
    """Marks for a test (or a module's ``pytestmark``) that needs ``parts`` of the shared data: a file, or a folder
    with something in it."""
    path = shared_data(*parts)
    present = path.is_file() or (path.is_dir() and any(path.iterdir()))
    return [pytest.mark.shared_data, pytest.mark.skipif(not present, reason=f"shared data {path} is absent "
                                                                              "(set MINUTIA_SHARED_DATA)")]


def mark(marks: list[pytest.MarkDecorator]):
    """Apply a list of marks to one test."""
    def apply(test):
        for one in marks:
            test = one(test)
        return test
    return apply
