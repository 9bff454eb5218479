"""The vision side of a meeting session: video frames in, slides (text for the KV, an embedding) out."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Protocol

from app.context import ContextLine
from app.events import SessionOutput, Slide, SlideShown
from encoders.errors import InputError

if TYPE_CHECKING:
    from threading import Event

    import numpy as np

    from encoders.ring import ItemRing
    from encoders.vision import SlideEvent

log = logging.getLogger("minutia.session")


class SlidePipeline(Protocol):
    """What a session calls on its vision pipeline (encoders.vision.VisionPipeline; a stand-in in tests):
    one stream's frames in order, a SlideEvent for each new slide."""

    def feed(self, frame: np.ndarray, t: float) -> SlideEvent | None: ...


class SlideWatcher:
    """Turns a stream's frames into slides: each keyframe with text becomes a slide and a line for the KV; its
    CLIP embedding waits in ``embeddings`` (by slide time) until the line is placed on the timeline.

    The pipeline is made on the first frame (a meeting without video never loads CLIP).
    """

    def __init__(self, session_id: str, output: SessionOutput, slides: list[Slide],
                 pipeline: Callable[[], SlidePipeline]) -> None:
        self._session_id = session_id
        self._lock, self._append_line, self._emit, self._bump = output
        self._slides = slides
        self._make_pipeline = pipeline
        self.embeddings: dict[float, np.ndarray] = {}

    def run(self, frames: ItemRing[tuple[float, np.ndarray]], closed: Event) -> None:
        """Read ``frames`` until they are exhausted or ``closed`` is set."""
        pipeline = None
        while not closed.is_set():
            items = frames.get(max_items=1, timeout=0.2)
            if not items:
                if frames.exhausted:
                    break
                continue
            if pipeline is None:
                pipeline = self._make_pipeline()
            for _, (t, frame) in items:
                try:
                    event = pipeline.feed(frame, t)
                except InputError as exc:  # one bad frame (e.g. time going backwards) is skipped, not fatal
                    log.warning("session %s: frame at %.2f s skipped: %s", self._session_id, t, exc)
                    continue
                if event is None or not event.text.strip():
                    continue
                text = "; ".join(part.strip() for part in event.text.splitlines() if part.strip())
                if event.embedding is not None:
                    self.embeddings[event.time] = event.embedding
                self.add(Slide(event.time, text, event.thumbnail))

    def add(self, slide: Slide, embeddings: dict[float, np.ndarray] | None = None) -> None:
        """Show ``slide`` and queue its text for the KV (a slide read from a frame, or one saved earlier, whose
        image embedding ``embeddings`` may hold by time)."""
        if embeddings and slide.time in embeddings:
            self.embeddings[slide.time] = embeddings[slide.time]
        with self._lock:
            self._slides.append(slide)
        self._append_line(ContextLine("video", slide.time, slide.time, None, slide.text, slide_change=True), 0)
        self._bump()
        self._emit(SlideShown(slide))
