"""espeak-ng voices for synthetic speakers: an English accent plus a voice variant, drawn without
replacement, at espeak's default prosody (the hard case for diarization: similar pitch and pace)
or with random pitch, speed and amplitude."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

# espeak-ng's own English voices (the mbrola ones need extra packages and are left out).
ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan",
           "en-gb-x-gbcwmd", "en-us-nyc")
# Variants checked to exist (`espeak-ng --voices=variant`; an unknown one silently falls back to
# the default). "" = the accent's own voice. Whisper, robot and novelty variants are left out.
VARIANTS = ("", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "klatt",
            "klatt2", "klatt3", "klatt4", "Annie", "Andrea", "linda", "steph", "david", "john",
            "paul", "robert", "max", "Andy")
DEFAULT_PITCH, DEFAULT_SPEED, DEFAULT_AMPLITUDE = 50, 175, 100


@dataclass(frozen=True)
class Voice:
    accent: str
    variant: str
    pitch: int = DEFAULT_PITCH
    speed: int = DEFAULT_SPEED  # words per minute
    amplitude: int = DEFAULT_AMPLITUDE
    explicit: bool = False  # False: no -p/-s/-a flags, espeak's defaults apply

    @property
    def name(self) -> str:
        return f"{self.accent}+{self.variant}" if self.variant else self.accent

    def args(self) -> list[str]:
        extra = ["-p", str(self.pitch), "-s", str(self.speed), "-a", str(self.amplitude)] if self.explicit else []
        return ["-v", self.name, *extra]

    def to_json(self) -> dict:
        return {"voice": self.name, **asdict(self), "espeak_args": self.args()}


def draw_voices(rng: random.Random, count: int, default_prosody: bool) -> list[Voice]:
    """Distinct accents and distinct variants, so no two speakers share a voice."""
    accents = rng.sample(ACCENTS, count)
    variants = rng.sample(VARIANTS, count)
    if default_prosody:
        return [Voice(a, v) for a, v in zip(accents, variants)]
    return [Voice(a, v, rng.randint(20, 80), rng.randint(130, 190), rng.randint(80, 150), True)
            for a, v in zip(accents, variants)]
