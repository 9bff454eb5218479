"""The vision side of a meeting session: video frames in, slides (text for the KV, an embedding) out."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from app.llm.context import ContextLine
from app.live.events import SessionOutput, Slide, SlideShown
from encoders.errors import InputError
from encoders.vision import KeyframeDetector

if TYPE_CHECKING:
    from threading import Event

    import numpy as np

    from encoders.ring import ItemRing
    from encoders.vision import Keyframe, SlideEvent

log = logging.getLogger("minutia.session")


class SlidePipeline(Protocol):
    """What a session calls on its vision pipeline (encoders.vision.VisionPipeline; a stand-in in tests):
    one stream's keyframes in order, a SlideEvent for each new slide."""

    def read(self, keyframe: Keyframe) -> SlideEvent | None: ...


class SlideWatcher:
    """Turns a stream's frames into slides: each keyframe with text becomes a slide and a line for the KV; its
    CLIP embedding waits in ``embeddings`` (by slide time) until the line is placed on the timeline.

    Keyframes are found as frames arrive (``keyframe``: a downscaled difference, about a millisecond), and only
    they wait for the worker's OCR: frames that arrive while it reads a slide can no longer push a short slide
    out of the queue. The pipeline is made on the first keyframe (a meeting without video never loads CLIP).
    """

    def __init__(self, session_id: str, output: SessionOutput, slides: list[Slide],
                 pipeline: Callable[[], SlidePipeline]) -> None:
        self._session_id = session_id
        self._lock, self._append_line, self._emit, self._bump = output
        self._slides = slides
        self._make_pipeline = pipeline
        self.embeddings: dict[float, np.ndarray] = {}
        self._detector = KeyframeDetector()
        self._detector_lock = threading.Lock()

    def keyframe(self, frame: np.ndarray, t: float) -> Keyframe | None:
        """``frame`` at stream time ``t`` if it starts a new picture (else None); called as frames arrive. A bad
        frame (time going backwards) is logged and skipped, never fatal."""
        with self._detector_lock:
            try:
                return self._detector.feed(frame, t)
            except InputError as exc:
                log.warning("session %s: frame at %.2f s skipped: %s", self._session_id, t, exc)
                return None

    def run(self, keyframes: ItemRing[Keyframe], closed: Event) -> None:
        """Read ``keyframes`` until they are exhausted or ``closed`` is set."""
        pipeline = None
        while not closed.is_set():
            items = keyframes.get(max_items=1, timeout=0.2)
            if not items:
                if keyframes.exhausted:
                    break
                continue
            if pipeline is None:
                pipeline = self._make_pipeline()
            for _, keyframe in items:
                event = pipeline.read(keyframe)
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

    def keep_pictures(self, shown: Sequence[Slide]) -> None:
        """Slides taken over from an earlier session of the meeting (a forget's rebuild, which saves text and
        times only) get back the pictures that session showed, so the page's strip keeps them."""
        pictures = {(s.time, s.text): s.thumbnail for s in shown if s.thumbnail is not None}
        with self._lock:
            for i, slide in enumerate(self._slides):
                if slide.thumbnail is None and (slide.time, slide.text) in pictures:
                    self._slides[i] = Slide(slide.time, slide.text, pictures[(slide.time, slide.text)])
            self._bump()
