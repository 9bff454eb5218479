"""Shared fixtures for the app-layer tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from scripted_parts import ScriptedMeeting, ScriptedTranscriber, VoiceDiarizer, scripted_meeting

ROOT = Path(__file__).resolve().parent.parent

# `make test` runs in two phases. First every test not marked ``realtime``, on TEST_WORKERS pytest-xdist workers, a
# file to a worker (``--dist loadfile``: a file's module fixtures, which load models and run benches, are built once),
# taking files in collection order (``--no-loadscope-reorder``). Then the ``realtime`` files (real-time audio: the
# browser page, the rooms), in one process: their deadlines are wall time, and beside a busy second worker they
# failed in 3 of 4 full runs (session 44).
# These files take minutes each on a 2-core machine (measured, `--durations`): they go first, longest first, so the
# last minutes are not one worker alone on a long file. Order only, and only under xdist.
LONGEST_FIRST = ("test_suite_meetings.py", "test_batch.py", "test_kv_quality_bench.py", "test_app_session.py",
                 "test_room_fleet.py", "test_streaming_asr.py", "test_app_end_to_end.py", "test_kv_formats_bench.py",
                 "test_kv_control.py", "test_forget.py", "test_diarize.py", "test_library.py", "test_app_cli.py",
                 "test_audit.py")


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # one process: files in their usual order
        return
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session")
def tiny_llm_dir(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer Gemma 3 and a small byte-level BPE tokenizer, saved as a local
    HF folder that ``app.llm.engine.LLMEngine`` loads like any model (a few seconds, no downloads)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, PreTrainedTokenizerFast

    corpus = [(ROOT / "samples/standup/reference.txt").read_text(), (ROOT / "configs/prompts/completion.yaml").read_text()]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=1024,
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
        layer_types=["sliding_attention", "full_attention"], sliding_window=128,  # one of each, like Gemma 3
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-gemma3")
    Gemma3ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# ---- issue 17: tiny stand-ins for a session's parts (no Whisper, no diarization model), begin ----
# The stand-ins themselves are in tests/scripted_parts.py (tests that script a meeting import it too).


@pytest.fixture(scope="session")
def scripted_runtime(tiny_llm_dir):
    """Makes Runtimes over the stand-ins for a scripted meeting and the tiny Gemma 3:
    ``scripted_runtime(meeting, home, vision=None, **settings)`` (settings: load_settings overrides beside ``home``;
    ``vision``: a factory of vision pipelines instead of the meeting's)."""
    from app.platform.config import load_settings
    from app.llm.engine import LLMEngine
    from app.live.runtime import Runtime

    def make(meeting: ScriptedMeeting, home: Path, vision=None, **overrides) -> Runtime:
        llm = {"model": str(tiny_llm_dir), "max_new_tokens": 16}  # a summary of 16 tokens: quick on a CPU
        settings = load_settings(overrides={"home": str(home), "llm": llm, **overrides})
        return Runtime(settings, transcriber=ScriptedTranscriber(meeting.vocabulary),
                       engine=LLMEngine.from_settings(settings.llm, settings.home, settings.kv),
                       diarizer=lambda: VoiceDiarizer(meeting.speakers), vision=vision or meeting.vision)

    return make


@pytest.fixture
def session_parts(scripted_runtime, tmp_path):
    """A Runtime over the stand-ins and the tiny Gemma 3, in a home of its own: ``(runtime, meeting)``."""
    meeting = scripted_meeting([
        ("SPEAKER_00", "Good morning. The pilot will cost twelve thousand dollars."),
        ("SPEAKER_01", "Fine. Maria will send the contract on Friday."),
    ], slides=["Budget\nPilot: $12,000", "Next steps\nContract by Friday"])
    runtime = scripted_runtime(meeting, tmp_path)
    yield runtime, meeting
    runtime.close()
# ---- issue 17: tiny stand-ins for a session's parts, end ----


# ---- issue 5 (tiered KV stores): redis_server fixture, begin ----
@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real redis-server on a free loopback port (no persistence), for the whole test session; yields its URL."""
    import socket
    import subprocess
    import time

    import redis

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    folder = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"redis-server did not start on port {port}")
            time.sleep(0.05)
    try:
        yield url
    finally:
        try:
            client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        client.close()
# ---- issue 5 (tiered KV stores): redis_server fixture, end ----
