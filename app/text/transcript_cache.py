"""Recordings are transcribed once and the transcript kept under MINUTIA_HOME for the next command. It holds
everything that was said (phone numbers, addresses), so it is sealed like the saved meetings: AES-256-GCM under a
key derived from the master key (issue 49: the cache held a phone number in clear). A file that does not open (an
old plain one, another key, damage) is a miss: the recording is transcribed again and the file rewritten."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from app.text.transcript import Transcript, _from_json, atomic_write_bytes, to_json
from encoders.errors import InputError

log = logging.getLogger(__name__)

MAGIC = b"minutia sealed transcript v1\n"
NONCE = 12


class TranscriptCache:
    """Sealed transcripts by name in ``folder``."""

    def __init__(self, folder: Path, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.folder = Path(folder)
        self._aead = AESGCM(key)

    def get(self, name: str) -> Transcript | None:
        from cryptography.exceptions import InvalidTag

        path = self.folder / f"{name}.json"
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if not raw.startswith(MAGIC):
            return None  # a plain one from before: rewritten sealed
        body = raw[len(MAGIC):]
        try:
            text = self._aead.decrypt(body[:NONCE], body[NONCE:], name.encode())
            return _from_json(json.loads(text), path)
        except (InvalidTag, ValueError, InputError) as exc:
            log.warning("transcript cache %s does not open (%s): transcribing again", path, type(exc).__name__)
            return None

    def put(self, name: str, transcript: Transcript) -> None:
        nonce = os.urandom(NONCE)
        sealed = self._aead.encrypt(nonce, to_json(transcript).encode(), name.encode())
        atomic_write_bytes(self.folder / f"{name}.json", MAGIC + nonce + sealed)


def transcript_cache(settings, create_key: bool = True) -> TranscriptCache | None:
    """The home's cache, or None (nothing cached) when no master key can be had here (``create_key``: make one)."""
    from app.platform.store import load_master_key

    try:
        master = load_master_key(settings, create_key=create_key)
    except InputError as exc:
        if create_key:
            log.warning("transcripts are not cached: %s", exc)
        return None
    return TranscriptCache(settings.home / "transcripts", master.cache_key("transcripts"))
