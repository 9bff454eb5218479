"""Encoders: audio decoding, VAD, ASR, diarization, vision. They emit timed events and never import app/kvstore/ui."""
