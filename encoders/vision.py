"""Vision encoders: keyframes of the video stream, slide/screen text (OCR), CLIP embeddings, slide events.

A meeting's video is mostly a shared screen or a camera that changes little, so the expensive work
(OCR, ViT) runs only on keyframes: frames that differ enough from the last keyframe. Each block is a
small ABC with one implementation (diart style), and :class:`VisionPipeline` chains them into one
``feed(frame, t) -> SlideEvent | None`` call for the live session.

Frames are HxWx3 uint8 RGB arrays everywhere (what :func:`encoders.video.read_video_frames` yields).
"""

from __future__ import annotations

import difflib
import logging
import pickle
import re
import shutil
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from encoders.errors import InputError

log = logging.getLogger(__name__)

UNTRAINED_WARNING = "untrained weights"


def check_frame(frame: np.ndarray) -> np.ndarray:
    """Validate the frame convention once, so every block can fail with one clear line."""
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.shape[0] < 2 or frame.shape[1] < 2:
        raise InputError(f"a video frame must be HxWx3 RGB, got shape {frame.shape}")
    if frame.dtype != np.uint8:
        raise InputError(f"a video frame must be uint8, got dtype {frame.dtype}")
    return frame


def thumbnail(frame: np.ndarray, max_size: tuple[int, int] = (160, 90)) -> np.ndarray:
    """A small HxWx3 uint8 copy of ``frame`` (aspect ratio kept) for timelines and UIs."""
    from PIL import Image

    img = Image.fromarray(check_frame(frame))
    img.thumbnail(max_size, Image.Resampling.BILINEAR)
    return np.asarray(img, dtype=np.uint8).copy()


def _signature(frame: np.ndarray, width: int) -> np.ndarray:
    """Downscaled grayscale frame (int16, so differences do not wrap) for cheap change detection."""
    from PIL import Image

    img = Image.fromarray(frame).convert("L")
    height = max(1, round(img.height * width / img.width))
    return np.asarray(img.resize((width, height), Image.Resampling.BOX), dtype=np.int16)


def _changed_fraction(a: np.ndarray, b: np.ndarray, pixel_delta: int) -> float:
    if a.shape != b.shape:  # resolution changed (screen share switched): a new picture
        return 1.0
    return float((np.abs(a - b) > pixel_delta).mean())


# --------------------------------------------------------------------------- keyframes


@dataclass(frozen=True)
class Keyframe:
    time: float
    frame: np.ndarray  # HxWx3 uint8 RGB, the frame as fed
    score: float  # fraction of downscaled pixels that changed against the previous keyframe (1.0 for the first)
    region: tuple[int, int, int, int] | None = None  # a minor change's box in frame pixels: left, top, right, bottom

    @property
    def minor(self) -> bool:
        """A small settled change (one figure or line): a new slide only if its text changed."""
        return self.region is not None


class BaseKeyframeDetector(ABC):
    @abstractmethod
    def feed(self, frame: np.ndarray, t: float) -> Keyframe | None:
        """Return a Keyframe when ``frame`` starts a new picture, else None."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the previous keyframe (the next frame is a keyframe)."""


@dataclass
class KeyframeOptions:
    width: int = 160  # frames are compared at this width (grayscale): ignores compression noise, fast
    pixel_delta: int = 24  # a downscaled pixel counts as changed when its gray level moves more than this
    threshold: float = 0.02  # a keyframe when more than this fraction of pixels changed
    # A minor keyframe (a slide that keeps its layout and changes a figure or a line) when more than this many
    # pixels changed at ``fine_width``, leaving out pixels that keep changing (a clock, a webcam, a pointer)
    # and pixels still changing now (the change must have settled). Two digits of 24-point text on a 1280-wide
    # screen are about 40 pixels at 320.
    fine_width: int = 320
    minor_pixels: int = 24
    minor_rows: int = 5  # ...spread over at least this many rows at fine_width: a thin strip is a progress bar
    busy_half_life: float = 5.0  # seconds: how long a pixel's changes count towards it being "busy"
    busy_changes: float = 1.5  # a pixel that changed about twice within a half-life is busy
    min_interval: float = 1.0  # seconds between keyframes; a change inside it is emitted when it ends
    check_interval: float = 0.2  # frames closer than this to the last compared one are skipped unread (30 fps feeds)


def _changed_region(mask: np.ndarray, min_pixels: int, min_rows: int) -> tuple[int, int, int, int] | None:
    """The box (left, top, right, bottom) around the patches of ``mask`` (pixels joined across 1-pixel gaps)
    that could be text, when one of them is big enough to be a change: ``min_pixels`` pixels over ``min_rows``
    rows (a thin strip is a progress bar, a speck JPEG noise or the tip of a pointer). The box takes every patch
    of 3 rows or more, so a small figure changed beside a moved bar is read too. None when nothing qualifies."""
    from scipy import ndimage

    if not mask.any():
        return None
    labels, _ = ndimage.label(ndimage.binary_dilation(mask, np.ones((3, 3), bool)))
    boxes, changed = [], False
    for index, found in enumerate(ndimage.find_objects(labels), start=1):
        rows, cols = found
        height = rows.stop - rows.start
        if height >= 3:
            boxes.append((cols.start, rows.start, cols.stop, rows.stop))
        changed |= height >= min_rows and int((mask[found] & (labels[found] == index)).sum()) >= min_pixels
    if not changed:
        return None
    return min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes)


class KeyframeDetector(BaseKeyframeDetector):
    """Frame difference against the last keyframe on a downscaled grayscale copy.

    Comparing with the last keyframe (not the previous frame) means a slow change (a scroll, a fade)
    still adds up to a keyframe, and a change inside ``min_interval`` is not lost: it is still there,
    and emitted, once the interval has passed. Small changes (under ``threshold``) count as a minor
    keyframe once they have settled and lie outside the parts of the screen that keep moving.
    """

    def __init__(self, options: KeyframeOptions | None = None) -> None:
        self.options = options or KeyframeOptions()
        if not 0.0 < self.options.threshold < 1.0:
            raise InputError(f"keyframe threshold must be in (0, 1), got {self.options.threshold}")
        self.reset()

    def reset(self) -> None:
        self._reference: np.ndarray | None = None
        self._fine_reference: np.ndarray | None = None
        self._previous: np.ndarray | None = None  # the last compared frame, at fine_width
        self._busy: np.ndarray | None = None  # decayed count of each pixel's changes between compared frames
        self._last_time: float | None = None
        self._last_seen: float | None = None
        self._last_checked: float | None = None

    def _watch(self, sig: np.ndarray, t: float) -> np.ndarray | None:
        """Update how busy each pixel is; returns the pixels that changed since the last compared frame."""
        previous, last = self._previous, self._last_checked
        self._previous = sig
        if previous is None or previous.shape != sig.shape:
            self._busy = np.zeros(sig.shape, np.float32)
            return None
        moving = np.abs(sig - previous) > self.options.pixel_delta
        decay = 0.5 ** ((t - last) / self.options.busy_half_life) if last is not None else 1.0
        self._busy = self._busy * np.float32(decay) + moving
        return moving

    def feed(self, frame: np.ndarray, t: float) -> Keyframe | None:
        frame = check_frame(frame)
        if self._last_seen is not None and t < self._last_seen:
            raise InputError(f"video frame times must not go back: {t:.3f} s after {self._last_seen:.3f} s")
        self._last_seen = t
        if self._last_checked is not None and t - self._last_checked < self.options.check_interval:
            return None
        sig = _signature(frame, self.options.width)
        fine = _signature(frame, self.options.fine_width)
        moving = self._watch(fine, t)
        self._last_checked = t
        if self._last_time is not None and t - self._last_time < self.options.min_interval:
            return None
        if self._reference is None or self._reference.shape != sig.shape:
            return self._emit(sig, fine, t, frame, 1.0)
        score = _changed_fraction(sig, self._reference, self.options.pixel_delta)
        if score > self.options.threshold:
            return self._emit(sig, fine, t, frame, score)
        if moving is not None and self._fine_reference.shape == fine.shape:
            changed = np.abs(fine - self._fine_reference) > self.options.pixel_delta
            settled = changed & ~moving & (self._busy < self.options.busy_changes)
            region = _changed_region(settled, self.options.minor_pixels, self.options.minor_rows)
            if region is not None:
                scale = frame.shape[1] / fine.shape[1]
                return self._emit(sig, fine, t, frame, score, tuple(int(v * scale) for v in region))
        return None

    def _emit(self, sig: np.ndarray, fine: np.ndarray, t: float, frame: np.ndarray, score: float,
              region: tuple[int, int, int, int] | None = None) -> Keyframe:
        self._reference, self._fine_reference, self._last_time = sig, fine, t
        return Keyframe(time=t, frame=frame, score=score, region=region)


# --------------------------------------------------------------------------- OCR


@dataclass(frozen=True)
class OcrWord:
    text: str
    confidence: float  # 0-100, tesseract's word confidence
    box: tuple[int, int, int, int]  # left, top, width, height in the frame's pixels


@dataclass(frozen=True)
class SlideText:
    text: str  # lines joined with "\n", words of a line with " "
    confidence: float  # mean word confidence 0-100 (0.0 when no words)
    words: list[OcrWord] = field(default_factory=list)


class TesseractNotFound(RuntimeError):
    """The tesseract binary is not installed; OCR cannot run (install Debian's tesseract-ocr)."""


class BaseSlideReader(ABC):
    @abstractmethod
    def read(self, frame: np.ndarray) -> SlideText:
        """The text on ``frame``."""


@dataclass
class OcrOptions:
    lang: str = "eng"
    psm: int = 3  # tesseract page segmentation: 3 = automatic layout (titles, bullets, columns)
    min_confidence: float = 50.0  # words below this are dropped (noise, bullet glyphs read as letters)
    min_height: int = 360  # smaller frames are upscaled to this height first (small screen text)
    polarity_radius: int = 24  # box radius (px) for the local background estimate, see preprocess()
    tesseract_cmd: str | None = None  # path of the tesseract binary; None = found on PATH


class SlideReader(BaseSlideReader):
    """OCR of slides and shared screens with tesseract (Debian's tesseract-ocr, through pytesseract)."""

    def __init__(self, options: OcrOptions | None = None) -> None:
        import pytesseract

        self.options = options or OcrOptions()
        cmd = self.options.tesseract_cmd or shutil.which("tesseract")
        if cmd is None or shutil.which(cmd) is None:
            raise TesseractNotFound(
                f"tesseract not found ({cmd or 'not on PATH'}): install it with `apt-get install tesseract-ocr`"
            )
        self._pytesseract = pytesseract
        self._cmd = cmd
        try:
            langs = self._run(lambda: pytesseract.get_languages(config=""))
        except pytesseract.TesseractError as exc:
            raise TesseractNotFound(f"tesseract at {cmd} does not run: {exc}") from exc
        missing = [lang for lang in self.options.lang.split("+") if lang not in langs]
        if missing:
            raise TesseractNotFound(
                f"tesseract has no language data for {', '.join(missing)} (has {', '.join(langs)}): "
                f"install tesseract-ocr-{missing[0]}"
            )

    def _run(self, call):
        # pytesseract keeps the binary's path in a module global; set it around each call so two
        # readers with different binaries do not interfere.
        self._pytesseract.pytesseract.tesseract_cmd = self._cmd
        return call()

    def preprocess(self, frame: np.ndarray):
        """Grayscale, upscaled when small, light-on-dark regions inverted.

        Slides mix dark text on light background with light text on dark bars (titles, headers);
        tesseract reads dark-on-light best, so pixels whose neighbourhood is mostly dark are inverted.
        """
        from PIL import Image, ImageFilter

        img = Image.fromarray(check_frame(frame)).convert("L")
        if img.height < self.options.min_height:
            scale = self.options.min_height / img.height
            img = img.resize((round(img.width * scale), self.options.min_height), Image.Resampling.LANCZOS)
        gray = np.asarray(img)
        dark = Image.fromarray(((gray < 128) * 255).astype(np.uint8))
        dark_around = np.asarray(dark.filter(ImageFilter.BoxBlur(self.options.polarity_radius))) > 127
        return Image.fromarray(np.where(dark_around, 255 - gray, gray).astype(np.uint8))

    def read(self, frame: np.ndarray) -> SlideText:
        pt = self._pytesseract
        img = self.preprocess(frame)
        scale = frame.shape[0] / img.height
        try:
            data = self._run(lambda: pt.image_to_data(
                img, lang=self.options.lang, config=f"--psm {self.options.psm}", output_type=pt.Output.DICT))
        except pt.TesseractError as exc:
            raise InputError(f"OCR failed on a {frame.shape[1]}x{frame.shape[0]} frame: {exc}") from exc
        lines: dict[tuple[int, int, int], list[str]] = {}
        words: list[OcrWord] = []
        for i, raw in enumerate(data["text"]):
            text, conf = raw.strip(), float(data["conf"][i])
            if not text or conf < self.options.min_confidence or not re.search(r"[0-9A-Za-z]", text):
                continue
            box = tuple(round(data[k][i] * scale) for k in ("left", "top", "width", "height"))
            words.append(OcrWord(text, conf, box))  # type: ignore[arg-type]
            lines.setdefault((data["block_num"][i], data["par_num"][i], data["line_num"][i]), []).append(text)
        confidence = float(np.mean([w.confidence for w in words])) if words else 0.0
        return SlideText("\n".join(" ".join(ws) for ws in lines.values()), confidence, words)


# --------------------------------------------------------------------------- CLIP embeddings


class BaseImageEmbedder(ABC):
    dim: int

    @abstractmethod
    def embed_images(self, frames: Sequence[np.ndarray]) -> np.ndarray:
        """(n, dim) float32, rows L2-normalised."""

    @abstractmethod
    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) float32 in the same space as the images, rows L2-normalised."""


@dataclass
class ClipOptions:
    model: str = "ViT-B-32"  # an open_clip architecture with its built-in tokenizer
    checkpoint: Path | None = None  # local open_clip checkpoint file; None = untrained weights
    device: str = "cpu"
    seed: int = 0  # initialisation of untrained weights (so two processes embed alike)
    batch_size: int = 16
    resize_mode: str = "longest"  # whole frame, padded to a square: slide text at the edges stays in view


class ClipEmbedder(BaseImageEmbedder):
    """open_clip ViT image and text towers. Never touches the network.

    With ``checkpoint`` the real pretrained weights are loaded from that local file; without it the
    same architecture is initialised at random (deterministic from ``seed``) and a WARNING says
    "untrained weights": embeddings then have the right shape and are stable, but carry no meaning.
    """

    def __init__(self, options: ClipOptions | None = None) -> None:
        import open_clip
        import torch

        self.options = opts = options or ClipOptions()
        config = open_clip.get_model_config(opts.model)
        if config is None:
            raise InputError(f"unknown open_clip model {opts.model!r} (see open_clip.list_models())")
        text_cfg = config.get("text_cfg", {})
        if text_cfg.get("hf_model_name") or "hf_tokenizer_name" in text_cfg:
            raise InputError(f"open_clip model {opts.model!r} needs files from the Hugging Face hub; "
                             "choose one with a built-in tokenizer, e.g. ViT-B-32")
        checkpoint = None
        if opts.checkpoint is not None:
            checkpoint = Path(opts.checkpoint).expanduser()
            if not checkpoint.is_file():
                raise InputError(f"CLIP checkpoint not found: {checkpoint} (give a local open_clip .pt/.bin file)")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(opts.seed)
            try:
                model, _, preprocess = open_clip.create_model_and_transforms(
                    opts.model, pretrained=str(checkpoint) if checkpoint else None, device=opts.device,
                    pretrained_text=False, image_resize_mode=opts.resize_mode)
            except (RuntimeError, KeyError, ValueError, EOFError, pickle.UnpicklingError) as exc:
                raise InputError(f"cannot load CLIP checkpoint {checkpoint} into {opts.model}: {exc}") from exc
        self.pretrained = checkpoint is not None
        if not self.pretrained:
            log.warning("CLIP %s has %s (no checkpoint given): image embeddings carry no meaning",
                        opts.model, UNTRAINED_WARNING)
        self._model = model.eval()
        self._preprocess = preprocess
        self._tokenizer = open_clip.get_tokenizer(opts.model)
        self._torch = torch
        self.dim = int(config["embed_dim"])

    def _normalised(self, x) -> np.ndarray:
        x = x.float()
        return (x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)).cpu().numpy().astype(np.float32)

    def embed_images(self, frames: Sequence[np.ndarray]) -> np.ndarray:
        from PIL import Image

        if not len(frames):
            return np.zeros((0, self.dim), np.float32)
        out = []
        with self._torch.inference_mode():
            for i in range(0, len(frames), self.options.batch_size):
                chunk = frames[i:i + self.options.batch_size]
                batch = [self._preprocess(Image.fromarray(check_frame(f))) for f in chunk]
                x = self._torch.stack(batch).to(self.options.device)
                out.append(self._normalised(self._model.encode_image(x)))
        return np.concatenate(out)

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise InputError("embed_texts takes a list of strings, got one string")
        if not len(texts):
            return np.zeros((0, self.dim), np.float32)
        out = []
        with self._torch.inference_mode():
            for i in range(0, len(texts), self.options.batch_size):
                tokens = self._tokenizer(list(texts[i:i + self.options.batch_size])).to(self.options.device)
                out.append(self._normalised(self._model.encode_text(tokens)))
        return np.concatenate(out)


# --------------------------------------------------------------------------- the pipeline


@dataclass(frozen=True)
class SlideEvent:
    time: float  # stream time of the keyframe, seconds
    text: str  # OCR text ("" when the picture has no readable text)
    confidence: float  # OCR mean word confidence 0-100
    embedding: np.ndarray | None  # (dim,) float32 L2-normalised CLIP image embedding; None without an embedder
    thumbnail: np.ndarray  # small HxWx3 uint8
    score: float  # the keyframe's change score


@dataclass
class VisionOptions:
    remember: int = 32  # a keyframe that repeats one of the last `remember` slides is not emitted again
    same_picture: float = 0.002  # at most this fraction of downscaled pixels changed: the same slide (no OCR)
    thumbnail_size: tuple[int, int] = (160, 90)


_LOOK = KeyframeOptions()  # the downscale and pixel tolerance of the "same picture" comparison


def _norm_text(text: str) -> str:
    return " ".join(re.findall(r"[0-9a-z%$]+", text.lower()))


def _overlaps(box: tuple[int, int, int, int], region: tuple[int, int, int, int], margin: int = 4) -> bool:
    """An OCR word box (left, top, width, height) against a region (left, top, right, bottom)."""
    left, top, width, height = box
    return (left < region[2] + margin and left + width > region[0] - margin
            and top < region[3] + margin and top + height > region[1] - margin)


_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?\b")  # a clock or a timer on the screen ticks: not a new slide


def _content_words(text: str) -> set[str]:
    """The words that tell one slide from another: of 3+ letters or with a digit, clock readings left out."""
    return {w for w in _norm_text(_CLOCK.sub(" ", text)).split() if len(w) >= 3 or any(c.isdigit() for c in w)}


def _unexplained(words: set[str], seen: set[str]) -> bool:
    """Some word that no word of ``seen`` matches or nearly matches (difflib ratio 0.8)."""
    return any(w not in seen and not any(difflib.SequenceMatcher(None, w, s).ratio() >= 0.8 for s in seen)
               for w in words)


class VisionPipeline:
    """Keyframes -> OCR -> CLIP, one ``feed`` per frame; emits a SlideEvent for each new slide.

    De-duplication: the detector fires on any big enough change, including a camera overlay or a
    return to an earlier slide. A keyframe is dropped when it looks the same (downscaled pixels) as one of
    the last ``remember`` emitted slides, or when every word it reads is one such a slide has (or nearly:
    OCR noise), so a slide reaches the timeline once; a minor keyframe is judged by the words read where
    it changed. A changed figure is a word no earlier slide has, so a slide that keeps its layout and changes
    one number is a new slide.
    One thread feeds a pipeline (the session's video consumer); OCR and CLIP run only on keyframes.
    """

    def __init__(self, detector: BaseKeyframeDetector | None = None, reader: BaseSlideReader | None = None,
                 embedder: BaseImageEmbedder | None = None, options: VisionOptions | None = None) -> None:
        self.detector = detector or KeyframeDetector()
        self.reader = reader
        self.embedder = embedder
        self.options = options or VisionOptions()
        self._seen: deque[tuple[np.ndarray, set[str]]] = deque(maxlen=max(1, self.options.remember))
        self.keyframes = 0  # counters for metrics and tests
        self.duplicates = 0

    def _duplicate(self, signature: np.ndarray, words: set[str]) -> bool:
        """Looks like a recent slide, or says nothing one did not (``words``: its content words, empty before OCR)."""
        if any(_changed_fraction(signature, seen_sig, _LOOK.pixel_delta) <= self.options.same_picture
               for seen_sig, _ in self._seen):
            return True
        return bool(words) and self._said_before(words)

    def _said_before(self, words: set[str]) -> bool:
        """Every word is one a recent slide has, or close to one there (OCR noise)."""
        return any(not _unexplained(words, seen_words) for _, seen_words in self._seen)

    def feed(self, frame: np.ndarray, t: float) -> SlideEvent | None:
        """One frame of the stream: a SlideEvent when it starts a new slide (detector, then ``read``)."""
        keyframe = self.detector.feed(frame, t)
        return None if keyframe is None else self.read(keyframe)

    def _same_text(self, slide_text: SlideText, region: tuple[int, int, int, int] | None) -> bool:
        """Whether a minor keyframe says nothing a recent slide did not where it changed: every word read
        inside the changed region (of 3+ letters, or with a digit) is in that slide's text, or close to one
        there; a changed figure or an added line is a word that is not. OCR noise elsewhere on the slide
        does not count."""
        inside = [w.text for w in slide_text.words if region is None or _overlaps(w.box, region)]
        words = _content_words(" ".join(inside))
        return not words or self._said_before(words)

    def read(self, keyframe: Keyframe) -> SlideEvent | None:
        """A keyframe found by a detector elsewhere (a session finds them as frames arrive, cheaply, so a slow
        OCR never makes it miss one): a SlideEvent unless it repeats a recent slide. A minor keyframe (the
        same layout, a small change) is a new slide only when its text is not one already shown."""
        self.keyframes += 1
        signature = _signature(keyframe.frame, _LOOK.width)
        if not keyframe.minor and self._duplicate(signature, set()):  # cheap check first: no OCR for a picture seen
            self.duplicates += 1
            return None
        slide_text = self.reader.read(keyframe.frame) if self.reader else SlideText("", 0.0)
        words = _content_words(slide_text.text)
        if self._same_text(slide_text, keyframe.region) if keyframe.minor else self._duplicate(signature, words):
            self.duplicates += 1
            return None
        self._seen.append((signature, words))
        embedding = self.embedder.embed_images([keyframe.frame])[0] if self.embedder else None
        return SlideEvent(time=keyframe.time, text=slide_text.text, confidence=slide_text.confidence,
                          embedding=embedding, thumbnail=thumbnail(keyframe.frame, self.options.thumbnail_size),
                          score=keyframe.score)
