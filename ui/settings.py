"""Settings of the live page (MINUTIA_UI_* in the environment); the meeting settings stay in app.platform.config."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

ROOT = Path(__file__).resolve().parent.parent
SAMPLES_DIR = ROOT / "samples"
SAMPLE_NAMES = ("standup", "standup-video")


class UISettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MINUTIA_UI_", extra="forbid")

    max_upload_mb: float = Field(200.0, gt=0, description="largest recording accepted by upload")
    replay_speed: float = Field(4.0, ge=0, le=32, description="default replay speed (x real time; 0 = as fast as possible)")
    poll_seconds: float = Field(1.0, gt=0, description="how often the page refreshes from the session")
    summary_every_s: float | None = Field(
        90.0, description="refresh the rolling summary after this many new seconds of meeting (None: button only)"
    )
    kv_history_points: int = Field(600, gt=0, description="KV dashboard points kept per tab")
    export_dir: Path | None = Field(None, description="where exported files are written (default: a temp folder)")


def bundled_samples() -> dict[str, Path]:
    """The sample meetings shipped in samples/ that exist on this machine: name -> recording."""
    found = {}
    for name in SAMPLE_NAMES:
        folder = SAMPLES_DIR / name
        media = sorted(p for p in folder.glob("meeting.*") if p.suffix.lower() not in {".json", ".txt", ".rttm"}) if folder.is_dir() else []
        if media:
            found[name] = media[0]
    return found
