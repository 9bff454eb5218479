"""Vision encoders (encoders/vision.py, encoders/video.py) on the bundled slide video samples/standup-video/."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from encoders.audio import load_audio
from encoders.errors import InputError
from encoders.video import has_video, read_video_frames
from encoders.vision import (
    UNTRAINED_WARNING,
    ClipEmbedder,
    ClipOptions,
    KeyframeDetector,
    KeyframeOptions,
    OcrOptions,
    SlideReader,
    TesseractNotFound,
    VisionPipeline,
    check_frame,
)

ROOT = Path(__file__).resolve().parent.parent
STANDUP = ROOT / "samples" / "standup"
VIDEO_DIR = ROOT / "samples" / "standup-video"
VIDEO = VIDEO_DIR / "meeting.webm"

needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs Debian's tesseract-ocr")


@pytest.fixture(scope="module")
def gold() -> dict:
    return json.loads((VIDEO_DIR / "slides.json").read_text())


@pytest.fixture(scope="module")
def frames() -> list[tuple[float, np.ndarray]]:
    return list(read_video_frames(VIDEO))


def _frame_at(frames, t: float) -> np.ndarray:
    return next(f for ft, f in frames if ft >= t)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[0-9a-z$%]+", text.lower().replace(",", "")))


@pytest.fixture(scope="module")
def reader() -> SlideReader:
    if shutil.which("tesseract") is None:
        pytest.skip("needs Debian's tesseract-ocr")
    return SlideReader()


@pytest.fixture(scope="module")
def clip_untrained():
    """ViT-B-32 with untrained weights, and the log records its construction wrote."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler, logger = Keep(level=logging.WARNING), logging.getLogger("encoders.vision")
    logger.addHandler(handler)
    try:
        embedder = ClipEmbedder(ClipOptions(model="ViT-B-32"))
    finally:
        logger.removeHandler(handler)
    return embedder, records


# --------------------------------------------------------------------------- the sample


def test_sample_video_folder(gold):
    from app.batch.pipeline import resolve_input

    assert VIDEO.stat().st_size < 2_000_000
    assert resolve_input(VIDEO_DIR).recording == VIDEO  # one recording per folder
    ref = json.loads((STANDUP / "reference.json").read_text())
    copied = json.loads((VIDEO_DIR / "reference.json").read_text())
    assert copied["source"] == VIDEO.name and copied["turns"] == ref["turns"]
    assert json.loads((VIDEO_DIR / "facts.json").read_text())["questions"] == \
        json.loads((STANDUP / "facts.json").read_text())["questions"]
    slides = gold["slides"]
    assert gold["source"] == VIDEO.name and len(slides) >= 4
    assert slides[0]["start"] == 0.0 and slides[-1]["end"] == ref["duration"]
    starts = {t["start"] for t in ref["turns"]}
    for a, b in zip(slides, slides[1:]):
        assert a["end"] == b["start"] and b["start"] in starts  # a slide changes when a speaker starts its topic
    budget = next(s for s in slides if s["title"] == "Budget")
    turn = ref["turns"][budget["turn"]]
    assert turn["start"] == budget["start"] and "budget" in turn["text"]


def test_sample_video_carries_the_standup_audio():
    assert np.array_equal(load_audio(VIDEO), load_audio(STANDUP / "meeting.ogg"))


def test_read_video_frames(frames, gold):
    assert len(frames) == pytest.approx(gold["duration"] * gold["fps"], abs=1)
    times = [t for t, _ in frames]
    assert times[0] == 0.0 and all(b > a for a, b in zip(times, times[1:]))
    t, f = frames[10]
    assert f.shape == (gold["height"], gold["width"], 3) and f.dtype == np.uint8
    thinned = list(read_video_frames(VIDEO, fps=0.5))
    assert [t for t, _ in thinned[:4]] == [0.0, 2.0, 4.0, 6.0]
    assert len(thinned) == pytest.approx(gold["duration"] / 2, abs=1)
    assert has_video(VIDEO) and not has_video(STANDUP / "meeting.ogg")


def test_read_video_frames_bad_input(tmp_path):
    with pytest.raises(InputError, match="no video stream"):
        next(read_video_frames(STANDUP / "meeting.ogg"))
    with pytest.raises(InputError, match="not found"):
        next(read_video_frames(tmp_path / "missing.webm"))
    junk = tmp_path / "junk.webm"
    junk.write_bytes(b"this is not a video file at all" * 100)
    with pytest.raises(InputError, match="cannot decode"):
        next(read_video_frames(junk))
    assert not has_video(junk)
    with pytest.raises(InputError, match="fps"):
        next(read_video_frames(VIDEO, fps=0))


# --------------------------------------------------------------------------- keyframes


def test_keyframes_find_the_slide_changes(frames, gold):
    detector = KeyframeDetector()
    keys = [k for t, f in frames if (k := detector.feed(f, t)) is not None]
    # Every slide change is found within one frame period, and nothing else fires: the progress
    # bar that moves every frame and the codec noise stay below the threshold.
    assert len(keys) == len(gold["slides"])
    for key, slide in zip(keys, gold["slides"]):
        assert slide["start"] <= key.time <= slide["start"] + 1.0 / gold["fps"] + 1e-6
        assert key.score > detector.options.threshold
        assert key.frame.shape == frames[0][1].shape


def test_keyframe_min_interval_delays_but_does_not_lose_a_change():
    a = np.full((90, 160, 3), 255, np.uint8)
    b = a.copy()
    b[20:70, 20:140] = 0
    c = a.copy()
    c[:, :80] = 30
    det = KeyframeDetector(KeyframeOptions(min_interval=2.0))
    assert det.feed(a, 0.0) is not None
    assert det.feed(a, 0.5) is None
    assert det.feed(b, 1.0) is None  # inside the interval
    key = det.feed(b, 2.0)  # still different from the last keyframe: emitted now
    assert key is not None and key.time == 2.0
    small = b.copy()
    small[0:2, 0:4] = 0  # a cursor-sized change
    assert det.feed(small, 5.0) is None
    assert det.feed(c, 5.1) is None  # within check_interval of the last compared frame: not even looked at
    assert det.feed(c, 6.0) is not None


def test_keyframe_bad_frames():
    det = KeyframeDetector()
    with pytest.raises(InputError, match="HxWx3"):
        det.feed(np.zeros((90, 160), np.uint8), 0.0)
    with pytest.raises(InputError, match="uint8"):
        det.feed(np.zeros((90, 160, 3), np.float32), 0.0)
    det.feed(np.zeros((90, 160, 3), np.uint8), 5.0)
    with pytest.raises(InputError, match="go back"):
        det.feed(np.zeros((90, 160, 3), np.uint8), 4.0)
    with pytest.raises(InputError):
        check_frame(np.zeros((1, 1, 3), np.uint8))


# --------------------------------------------------------------------------- OCR


@needs_tesseract
def test_ocr_reads_the_slides(reader, frames, gold):
    for slide in gold["slides"]:
        mid = (slide["start"] + slide["end"]) / 2
        result = reader.read(_frame_at(frames, mid))
        want, got = _words(slide["text"]), _words(result.text)
        assert _words(slide["title"]) <= got, (slide["title"], result.text)
        assert len(want & got) / len(want) >= 0.9, (slide["text"], result.text)
        assert result.confidence > 80
        assert all(w.confidence >= reader.options.min_confidence for w in result.words)
    key_facts = reader.read(_frame_at(frames, 20.0)).text  # the budget slide
    for fact in ("$30,000", "$50,000", "$12,000"):
        assert fact in key_facts


@needs_tesseract
def test_ocr_word_boxes_are_in_frame_pixels(reader, frames):
    frame = _frame_at(frames, 20.0)
    result = reader.read(frame)
    budget = next(w for w in result.words if w.text == "Budget")
    left, top, width, height = budget.box
    assert top + height <= 78 + 2  # the title bar of the slide (white on dark blue)
    assert 0 <= left < frame.shape[1] and 0 < width < frame.shape[1] // 2


@needs_tesseract
def test_ocr_blank_frame_has_no_text(reader):
    result = reader.read(np.full((360, 640, 3), 255, np.uint8))
    assert result.text == "" and result.confidence == 0.0 and result.words == []


def test_ocr_missing_tesseract_is_a_clear_error(tmp_path):
    with pytest.raises(TesseractNotFound, match="apt-get install tesseract-ocr"):
        SlideReader(OcrOptions(tesseract_cmd=str(tmp_path / "no-tesseract")))


@needs_tesseract
def test_ocr_missing_language_is_a_clear_error():
    with pytest.raises(TesseractNotFound, match="tesseract-ocr-xyz"):
        SlideReader(OcrOptions(lang="xyz"))


# --------------------------------------------------------------------------- CLIP


def test_clip_untrained_warns_and_embeds(clip_untrained, frames):
    embedder, records = clip_untrained
    assert not embedder.pretrained and embedder.dim == 512
    assert any(r.levelno == logging.WARNING and UNTRAINED_WARNING in r.getMessage() for r in records)
    images = [_frame_at(frames, t) for t in (5.0, 20.0, 30.0)]
    emb = embedder.embed_images(images)
    assert emb.shape == (3, 512) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    # deterministic and batch-free, up to the float sums a batch of another size may order differently
    np.testing.assert_allclose(embedder.embed_images(images[:1])[0], emb[0], rtol=0, atol=1e-5)
    assert not np.allclose(emb[0], emb[1])
    texts = embedder.embed_texts(["the budget slide", "pilot plan", "the budget slide"])
    assert texts.shape == (3, 512) and texts.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(texts, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(texts[0], texts[2], atol=1e-6)
    assert embedder.embed_images([]).shape == (0, 512) and embedder.embed_texts([]).shape == (0, 512)
    with pytest.raises(InputError):
        embedder.embed_texts("one string")
    with pytest.raises(InputError):
        embedder.embed_images([np.zeros((4, 4), np.uint8)])


@pytest.fixture(scope="module")
def tiny_clip_model(tmp_path_factory) -> str:
    """A tiny open_clip architecture registered in-process (a checkpoint of it is a few MB)."""
    import open_clip

    name = "minutia-test-tiny-vit"
    folder = tmp_path_factory.mktemp("clip-config")
    (folder / f"{name}.json").write_text(json.dumps({
        "embed_dim": 32,
        "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
    }))
    open_clip.add_model_config(folder)
    return name


def test_clip_untrained_is_deterministic_across_instances_and_checkpoint_loads(tiny_clip_model, frames, tmp_path,
                                                                                caplog):
    import torch

    images = [_frame_at(frames, 5.0), _frame_at(frames, 50.0)]
    a = ClipEmbedder(ClipOptions(model=tiny_clip_model, seed=0))
    b = ClipEmbedder(ClipOptions(model=tiny_clip_model, seed=0))
    c = ClipEmbedder(ClipOptions(model=tiny_clip_model, seed=1))
    ea = a.embed_images(images)
    np.testing.assert_array_equal(ea, b.embed_images(images))
    assert not np.allclose(ea, c.embed_images(images))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ClipEmbedder(ClipOptions(model=tiny_clip_model, seed=0))
    assert torch.equal(torch.rand(3), expected)  # building a model leaves the caller's torch RNG stream alone

    path = tmp_path / "tiny.pt"
    torch.save({"state_dict": a._model.state_dict()}, path)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="encoders.vision"):
        loaded = ClipEmbedder(ClipOptions(model=tiny_clip_model, checkpoint=path, seed=7))
    assert loaded.pretrained and not any(UNTRAINED_WARNING in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(loaded.embed_images(images), ea, atol=1e-6)
    np.testing.assert_allclose(loaded.embed_texts(["budget"]), a.embed_texts(["budget"]), atol=1e-6)


def test_clip_bad_configuration(tiny_clip_model, tmp_path):
    with pytest.raises(InputError, match="not found"):
        ClipEmbedder(ClipOptions(model=tiny_clip_model, checkpoint=tmp_path / "missing.pt"))
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="cannot load"):
        ClipEmbedder(ClipOptions(model=tiny_clip_model, checkpoint=corrupt))
    with pytest.raises(InputError, match="unknown open_clip model"):
        ClipEmbedder(ClipOptions(model="no-such-model"))
    with pytest.raises(InputError, match="Hugging Face"):
        ClipEmbedder(ClipOptions(model="ViT-B-16-SigLIP"))


# --------------------------------------------------------------------------- the pipeline


@needs_tesseract
def test_vision_pipeline_end_to_end(frames, gold, reader, clip_untrained):
    embedder, _ = clip_untrained
    pipeline = VisionPipeline(reader=reader, embedder=embedder)
    events = [e for t, f in frames if (e := pipeline.feed(f, t)) is not None]
    assert len(events) == len(gold["slides"]) and pipeline.duplicates == 0
    for event, slide in zip(events, gold["slides"]):
        assert slide["start"] <= event.time <= slide["start"] + 1.0 / gold["fps"] + 1e-6
        assert event.text.splitlines()[0] == slide["title"]
        assert event.embedding.shape == (512,) and event.embedding.dtype == np.float32
        assert event.thumbnail.dtype == np.uint8 and event.thumbnail.shape == (90, 160, 3)
    # The same key frames, embedded in one batch, give the events' embeddings.
    batch = embedder.embed_images([_frame_at(frames, e.time) for e in events])
    np.testing.assert_allclose(np.stack([e.embedding for e in events]), batch, atol=1e-5)


@needs_tesseract
def test_vision_pipeline_emits_a_slide_once(frames, reader):
    first, budget = _frame_at(frames, 5.0), _frame_at(frames, 20.0)
    overlay = budget.copy()
    overlay[200:340, 430:630] = np.arange(200, dtype=np.uint8)[None, :, None] % 255  # a camera tile over the slide
    pipeline = VisionPipeline(reader=reader)  # no embedder: event.embedding is None
    times_and_frames = [(0.0, first), (2.0, budget), (4.0, overlay), (6.0, budget), (8.0, first)]
    events = [e for t, f in times_and_frames if (e := pipeline.feed(f, t)) is not None]
    assert [e.time for e in events] == [0.0, 2.0]
    assert events[0].embedding is None and "Budget" in events[1].text
    # The overlay is a new picture (a keyframe) but the same text; going back to the budget and
    # first slides are pixel repeats. None reaches the timeline twice.
    assert pipeline.keyframes == 5 and pipeline.duplicates == 3


def test_the_runtime_embeds_slides_only_with_pretrained_weights(tiny_clip_model, tmp_path):
    """No CLIP weights ship on PyPI and untrained vectors mean nothing: by default the runtime's vision pipeline
    reads keyframes and text without CLIP; a checkpoint in ``vision.clip_checkpoint`` turns the step on."""
    import torch

    from app.platform.config import load_settings
    from app.live.runtime import Runtime

    plain = Runtime(load_settings())
    assert plain.vision_pipeline().embedder is None
    path = tmp_path / "tiny.pt"
    torch.save({"state_dict": ClipEmbedder(ClipOptions(model=tiny_clip_model))._model.state_dict()}, path)
    given = Runtime(load_settings(overrides={"vision": {"clip_checkpoint": str(path), "clip_model": tiny_clip_model}}))
    embedder = given.vision_pipeline().embedder
    assert embedder is not None and embedder.pretrained and embedder.dim == 32
    assert given.vision_pipeline().embedder is embedder  # one model shared by the sessions
    missing = Runtime(load_settings(overrides={"vision": {"clip_checkpoint": str(tmp_path / "none.pt")}}))
    with pytest.raises(InputError, match="CLIP checkpoint not found"):
        missing.vision_pipeline()
