"""Where the development data sets live: one setting for every bench and test.

``$MINUTIA_SHARED_DATA`` when it is set, else ``../shared/data`` beside the checkout (the team's layout). A user's
clone has neither: benches then say which folder to give, and tests that need the data skip with that reason
(``tests/conftest.py``'s ``needs_shared`` marks them).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shared_data(*parts: str) -> Path:
    """``parts`` under the shared data folder (read now: a test may point the setting elsewhere)."""
    base = os.environ.get("MINUTIA_SHARED_DATA")
    return (Path(base) if base else ROOT.parent / "shared" / "data").joinpath(*parts)


def qmsum_val() -> Path:
    """QMSum's validation meetings (QMSum-format JSON files)."""
    return shared_data("qmsum", "val")


def elitr() -> Path:
    """ELITR-Bench's development split (transcripts in dev/, questions and published answers beside)."""
    return shared_data("elitr")
