"""The streams a token can come from: one enum, and the names configs and the timeline use.

Torch-free so that the app's config models can build their literals from it without loading torch.
"""

from __future__ import annotations

import enum


class Modality(enum.IntEnum):
    """Which stream a token came from; each modality has its own budget and stats (DESIGN: KV store).

    The codes are stored per token (TokenAnnotations) and per timeline segment: never renumber.
    """

    TEXT = 0
    AUDIO = 1
    VIDEO = 2

    @classmethod
    def parse(cls, value: "Modality | int | str") -> "Modality":
        """``"audio"`` / ``Modality.AUDIO`` / ``1`` -> ``Modality.AUDIO`` (clear error otherwise)."""
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                raise ValueError(f"unknown modality {value!r} (expected one of {', '.join(MODALITY_NAMES)})") from None
        return cls(int(value))

    @property
    def label(self) -> str:
        return self.name.lower()


MODALITY_NAMES: tuple[str, ...] = tuple(m.label for m in Modality)  # in code order: names[code]
