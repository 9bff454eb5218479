"""app/text/transcript_cache.py (issue 49 F4): the cached transcript of a recording is sealed under the master key; a
file that does not open is a miss, never an error or a wrong transcript."""

from __future__ import annotations

import os
import stat

from app.platform.config import load_settings
from app.text.transcript import Transcript, Turn
from app.text.transcript_cache import TranscriptCache, transcript_cache

SAID = Transcript([Turn("Alice", "Call me on (415) 555-0132 after the review.", 0.0, 3.0)], source="call.ogg")


def test_the_cached_transcript_is_sealed_and_reads_back(tmp_path):
    settings = load_settings(overrides={"home": str(tmp_path / "home")})
    cache = transcript_cache(settings)
    cache.put("abc", SAID)
    path = settings.home / "transcripts" / "abc.json"
    assert b"555-0132" not in path.read_bytes() and b"Alice" not in path.read_bytes()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    back = transcript_cache(settings).get("abc")
    assert [(t.speaker, t.text) for t in back.turns] == [(t.speaker, t.text) for t in SAID.turns]
    assert cache.get("missing") is None


def test_a_file_that_does_not_open_is_a_miss(tmp_path):
    folder = tmp_path / "t"
    TranscriptCache(folder, b"k" * 32).put("abc", SAID)
    assert TranscriptCache(folder, b"x" * 32).get("abc") is None  # another key
    (folder / "abc.json").write_bytes((folder / "abc.json").read_bytes()[:-5])  # damaged
    assert TranscriptCache(folder, b"k" * 32).get("abc") is None
    (folder / "old.json").write_text('{"turns": []}')  # a plain one from before
    assert TranscriptCache(folder, b"k" * 32).get("old") is None
    TranscriptCache(folder, b"k" * 32).put("old", SAID)  # rewritten sealed
    assert TranscriptCache(folder, b"k" * 32).get("old").turns[0].speaker == "Alice"


def test_a_recogniser_that_hears_differently_is_not_served_an_old_transcript(tmp_path, monkeypatch):
    """A transcript is cached under the recording, the ASR settings and the recogniser's revision: after a fix that
    changes the words (RECOGNISER_REVISION raised) the recording is transcribed again, not read back stale."""
    import app.batch.pipeline as pipeline

    recording = tmp_path / "call.wav"
    recording.write_bytes(b"RIFF....WAVE")
    settings = load_settings(overrides={"home": str(tmp_path / "home")})
    key = pipeline._cache_key(recording, settings)
    assert pipeline._cache_key(recording, settings) == key
    monkeypatch.setattr(pipeline, "RECOGNISER_REVISION", pipeline.RECOGNISER_REVISION + 1)
    assert pipeline._cache_key(recording, settings) != key
