"""Encoders: audio decoding, VAD, ASR, diarization, vision. They emit timed events and never import app/kvstore/ui."""

import os

# pyannote.audio 4 sends usage telemetry to its servers unless told not to, and importing it sets its
# default ("true") for the process; a meeting assistant must not phone home, so set ours before any
# pyannote import (an explicit user setting wins).
os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")
