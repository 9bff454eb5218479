"""Shared fixtures for the app-layer tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_llm_dir(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer Gemma 3 and a small byte-level BPE tokenizer, saved as a local
    HF folder that ``app.llm.LLMEngine`` loads like any model (a few seconds, no downloads)."""
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
# As diart's tests do with dummy segmentation and embedding models: the session runs for real around them.
# A script of (speaker, sentence) turns becomes audio in which every word is a run of one constant level;
# the stand-in recogniser reads the words back from the levels, the stand-in diarizer gives the speaker
# whose turn it is.
SCRIPT_RATE = 16000
SCRIPT_LEVEL = 1 / 1024  # word number n sounds at (n + 1) levels; silence between words


@dataclass(frozen=True)
class ScriptedMeeting:
    audio: np.ndarray  # 16 kHz mono float32
    vocabulary: list[str]  # word number -> text
    turns: list[tuple[float, float, str]]  # (start, end, speaker) in stream seconds


def scripted_meeting(script: Sequence[tuple[str, str]], word_s: float = 0.3, gap_s: float = 0.1,
                     pause_s: float = 0.5) -> ScriptedMeeting:
    """Audio for ``script``'s turns, each word ``word_s`` long, ``gap_s`` apart, turns ``pause_s`` apart."""
    pieces: list[np.ndarray] = []
    vocabulary: list[str] = []
    turns: list[tuple[float, float, str]] = []
    clock = 0.0
    for speaker, sentence in script:
        start = clock
        for word in sentence.split():
            if word not in vocabulary:
                vocabulary.append(word)
            level = (vocabulary.index(word) + 1) * SCRIPT_LEVEL
            pieces += [np.full(int(word_s * SCRIPT_RATE), level, np.float32),
                       np.zeros(int(gap_s * SCRIPT_RATE), np.float32)]
            clock += word_s + gap_s
        turns.append((start, clock, speaker))
        pieces.append(np.zeros(int(pause_s * SCRIPT_RATE), np.float32))
        clock += pause_s
    return ScriptedMeeting(np.concatenate(pieces), vocabulary, turns)


class ScriptedTranscriber:
    """Reads a scripted meeting's words back from its audio (encoders.asr.Transcriber's ``transcribe``)."""

    def __init__(self, vocabulary: Sequence[str]) -> None:
        self.vocabulary = list(vocabulary)

    def transcribe(self, audio: np.ndarray, options=None) -> Iterator:
        from encoders.asr import Segment, Word

        codes = np.rint(np.asarray(audio) / SCRIPT_LEVEL).astype(np.int64) - 1
        edges = np.flatnonzero(np.diff(codes)) + 1
        words = []
        for start, end in zip(np.r_[0, edges], np.r_[edges, len(codes)]):
            if 0 <= codes[start] < len(self.vocabulary):
                words.append(Word(self.vocabulary[codes[start]], start / SCRIPT_RATE, end / SCRIPT_RATE, 0.9))
        if words:
            yield Segment(words[0].start, words[-1].end, " ".join(w.text for w in words), tuple(words))


class TimedDiarizer:
    """Labels a word with the speaker whose scripted turn holds its middle (encoders.online_diarize's calls)."""

    def __init__(self, turns: Sequence[tuple[float, float, str]]) -> None:
        self.turns = list(turns)
        self.samples = 0

    def insert_audio(self, samples: np.ndarray) -> None:
        self.samples += len(samples)

    def label_words(self, words) -> list[str]:
        return [self._speaker((w.start + w.end) / 2) for w in words]

    def take_changes(self) -> list:
        return []

    def _speaker(self, t: float) -> str:
        return next((speaker for start, end, speaker in self.turns if start <= t < end), self.turns[-1][2])


@pytest.fixture
def session_parts(tiny_llm_dir, tmp_path):
    """A Runtime over the stand-ins and the tiny Gemma 3, in a home of its own: ``(runtime, meeting)``."""
    from app.config import load_settings
    from app.llm import LLMEngine
    from app.runtime import Runtime

    meeting = scripted_meeting([
        ("SPEAKER_00", "Good morning. The pilot will cost twelve thousand dollars."),
        ("SPEAKER_01", "Fine. Maria will send the contract on Friday."),
    ])
    llm = {"model": str(tiny_llm_dir), "max_new_tokens": 16}  # a summary of 16 tokens: quick on a CPU
    settings = load_settings(overrides={"home": str(tmp_path), "llm": llm})
    runtime = Runtime(settings, transcriber=ScriptedTranscriber(meeting.vocabulary),
                      engine=LLMEngine.from_settings(settings.llm, settings.home, settings.kv),
                      diarizer=lambda: TimedDiarizer(meeting.turns))
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
