"""The room bot's settings (``minutia bot --config``): its rooms and tokens, and the limits that protect it."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class BotSettings(BaseModel):
    """What an operator sets: the rooms and their tokens, and the limits that protect the bot."""

    model_config = ConfigDict(extra="forbid")

    rooms: dict[str, str] = Field(default_factory=dict, description="room name -> bearer token")
    max_peers_per_room: int = Field(4, gt=0)
    max_peers: int = Field(32, gt=0, description="peers over all rooms")
    max_rooms: int = Field(default_factory=lambda: 2 * (os.cpu_count() or 1), gt=0,
                           description="rooms with peers at once (default 2 per CPU: on 2 cores 4 rooms kept up, "
                                       "8 starved the event loop until peers dropped); a new room past it gets 503")
    max_loop_lag_seconds: float = Field(1.0, gt=0, description="a new room gets 503 while the event loop runs later "
                                        "than this (max over 5 s): the bot is overloaded, its peers' ICE consent "
                                        "checks are at risk")
    max_backlog_seconds: float = Field(30.0, gt=0, description="a new room gets 503 while a room's audio waits "
                                       "longer than this for the recogniser")
    joins_per_second: float = Field(1.0, gt=0, description="join rate per client address and room (valid tokens)")
    join_burst: int = Field(5, gt=0)
    failed_joins_per_second: float = Field(0.2, gt=0, description="failed joins (unknown room, missing or wrong "
                                           "token) per client address over all rooms; past it, 429")
    failed_join_burst: int = Field(10, gt=0)
    connect_timeout: float = Field(20.0, gt=0, description="seconds for a peer to connect after its offer")
    max_message_bytes: int = Field(4096, gt=0, description="largest data-channel message accepted")
    video_fps: float = Field(1.0, gt=0, description="video frames a second given to the session")
    audio_chunk_seconds: float = Field(0.2, gt=0, description="audio fed to the session in chunks this long")
    mix_deadline_seconds: float = Field(0.2, gt=0, description="a 20 ms frame waits this long for a lagging "
                                        "speaker, then the laggard's share is silence")
    mix_max_deadline_seconds: float = Field(0.6, gt=0, description="the wait grows with the lateness of speakers' "
                                            "audio (a jitter buffer), up to this")
    mix_backlog_seconds: float = Field(1.0, gt=0, description="how far a speaker who lagged may play behind the "
                                       "others; the oldest audio beyond it is dropped (counted)")
    autosave: bool = Field(False, description="save rooms' sessions to the session store as they go and when "
                                              "their audio ends (needs kv.enabled and a master key)")
    ask_workers: int = Field(2, gt=0, description="questions answered at once over all rooms")
    ice_hosts: list[str] | None = Field(None, description="host candidate addresses (e.g. ['127.0.0.1']); None: all")

    @classmethod
    def from_file(cls, path: str | Path) -> "BotSettings":
        """YAML (or JSON) with the fields above; ``rooms`` maps names to tokens."""
        import yaml

        from encoders.errors import InputError

        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
            return cls(**data)
        except (OSError, yaml.YAMLError, TypeError, ValueError) as exc:
            raise InputError(f"bot settings {path}: {exc}") from exc
