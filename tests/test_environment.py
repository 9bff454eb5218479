"""The pinned stack imports as installed (no patching), and the Debian tools the project needs are there."""

import importlib
import shutil

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "torch", "torchvision", "torchaudio", "torchcodec", "pyannote.audio", "pyannote.metrics", "open_clip",
        "faster_whisper", "ctranslate2", "silero_vad", "resemblyzer", "transformers", "triton", "gradio", "aiortc",
        "pydantic_settings", "typer", "rich", "prometheus_client", "cryptography", "redis", "jiwer", "av", "gguf",
        "kvpress",
    ],
)
def test_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_torch_is_the_pinned_release() -> None:
    import torch
    import torchvision

    assert torch.__version__.split("+")[0] == "2.14.1"
    assert torchvision.__version__.split("+")[0] == "0.29.1"


@pytest.mark.parametrize("tool", ["ffmpeg", "espeak-ng", "sox", "tesseract", "redis-server"])
def test_debian_tool_installed(tool: str) -> None:
    assert shutil.which(tool), f"{tool} missing: `make sysdeps` installs it"
