"""Durable sessions: save a TieredCache, load it into a new one, get the same next-token logits."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from kvstore.attention import MINUTIA_ATTENTION, register_minutia_attention
from kvstore.blocks import BlockFormat
from kvstore.cache import TieredCache
from kvstore.crypto import EncryptedStore, MasterKey, WrongKeyError
from kvstore.persist import (
    IncompatibleSession,
    SessionNotFound,
    SessionWriter,
    list_sessions,
    load_session,
    save_session,
    session_info,
)
from kvstore.stores import CorruptBlock
from kvstore.stores.disk import DiskStore
from kvstore.stores.memory import MemoryStore
from kvstore.stores.redis_store import RedisStore

try:
    from kv_helpers import feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids

register_minutia_attention()
ROOT = Path(__file__).resolve().parent.parent
EXACT = 1e-5
COMPRESSED = dict(compress=True, budget_ratio=0.6, sink_tokens=4, recent_tokens=16)


def _cache(model, compress: bool) -> TieredCache:
    extra = COMPRESSED if compress else {}
    return TieredCache(config=model.config, block_size=8, **extra)


def _prefill(model, cache: TieredCache) -> None:
    feed(model, cache, token_ids(150), chunk=23)
    cache.annotate([40, 41], 1)
    for step in range(3):
        feed(model, cache, token_ids(1, seed=50 + step))


@pytest.mark.parametrize("compress", [False, True], ids=["exact", "compressed"])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_resumed_session_gives_the_same_logits(arch: str, compress: bool, tmp_path: Path) -> None:
    model = tiny_model(arch, attn=MINUTIA_ATTENTION, sharpen=4.0)
    cache = _cache(model, compress)
    _prefill(model, cache)
    if compress:  # the session really holds compressed blocks (quantized and/or dropped into the summary)
        layer = cache.tiered_layers[0]
        assert float(layer.summary.count.max()) > 0
        if arch == "llama":
            assert bool((layer.table.format != BlockFormat.FULL).any())
    store = EncryptedStore(DiskStore(tmp_path / "s"), MasterKey.generate(tmp_path / "k"))
    app_blob = {"timeline": [[0.0, 1.5, "alice"]], "transcript": "hello", "tokens": [1, 2, 3]}
    save_session(store, "meeting", cache, metadata=app_blob)
    store.close()

    store = EncryptedStore(DiskStore(tmp_path / "s"), MasterKey.load(tmp_path / "k"))
    resumed, blob = load_session(store, "meeting", model.config, settings=cache.settings)
    assert blob == app_blob and resumed.get_seq_length() == cache.get_seq_length() == 153
    diffs = []
    for step in range(4):  # decode steps after the restart (compression keeps running on both)
        nxt = token_ids(1, seed=70 + step)
        diffs.append((feed(model, cache, nxt) - feed(model, resumed, nxt)).abs().max().item())
    more = token_ids(20, seed=80)  # and a prefill chunk that triggers compression
    diffs.append((feed(model, cache, more) - feed(model, resumed, more)).abs().max().item())
    assert max(diffs) <= EXACT, diffs
    store.close()


def test_a_session_with_split_format_blocks_resumes_exactly(tmp_path: Path) -> None:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    cache = TieredCache(config=model.config, block_size=8, warm_kinds=("int4", "k4v2", "int2"),
                        **{**COMPRESSED, "budget_ratio": 0.5})
    _prefill(model, cache)
    assert any(bool((layer.table.format == BlockFormat.K4V2).any()) for layer in cache.tiered_layers)
    store = DiskStore(tmp_path / "s")
    save_session(store, "meeting", cache)
    resumed, _ = load_session(store, "meeting", model.config, settings=cache.settings)
    for layer, again in zip(cache.tiered_layers, resumed.tiered_layers):
        assert torch.equal(layer.table.format, again.table.format)
    nxt = token_ids(1, seed=70)
    assert (feed(model, cache, nxt) - feed(model, resumed, nxt)).abs().max().item() <= EXACT


def test_incremental_saves_and_crash_consistency(tmp_path: Path) -> None:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION)
    cache = _cache(model, compress=False)
    feed(model, cache, token_ids(120), chunk=40)
    store = DiskStore(tmp_path / "s")
    writer = SessionWriter(store, "m")
    first = writer.save(cache, {"n": 1})
    assert first.blocks_written == first.blocks + 1  # every block + the manifest
    feed(model, cache, token_ids(1, seed=3))
    second = writer.save(cache, {"n": 2})
    # per layer only the new tail block and the layer state are written (+ the manifest)
    assert second.blocks_written == 2 * 2 + 1, second
    assert second.blocks_deleted == 2  # the two superseded layer states
    info = session_info(store, "m")
    assert (info.seq_length, info.metadata, len(store.list("m"))) == (121, {"n": 2}, info.blocks + 1)  # + manifest

    # a save cut short (blocks written, manifest not) leaves the previous session loadable
    feed(model, cache, token_ids(30, seed=4))
    crashed = SessionWriter(store, "m")

    def put_until_manifest(block_id: str, data: bytes) -> None:
        if block_id == "manifest":
            raise KeyboardInterrupt("killed before the manifest")
        store.put("m", block_id, data)

    crashed._put = put_until_manifest
    with pytest.raises(KeyboardInterrupt):
        crashed.save(cache)
    store.flush()
    resumed, blob = load_session(store, "m", model.config)
    assert blob == {"n": 2} and resumed.get_seq_length() == 121
    assert list_sessions(store) == ["m"]
    store.close()


def test_faults_are_clear_errors_for_that_session(tmp_path: Path) -> None:
    model = tiny_model("llama", attn=MINUTIA_ATTENTION)
    store = EncryptedStore(DiskStore(tmp_path / "s"), MasterKey.generate(tmp_path / "k"))
    for name in ("good", "bad"):
        cache = _cache(model, compress=False)
        feed(model, cache, token_ids(40))
        save_session(store, name, cache)
    store.flush()
    with pytest.raises(SessionNotFound, match="no saved session 'nope'"):
        load_session(store, "nope", model.config)
    victim = next(p for p in (tmp_path / "s" / "bad").glob("L0%2Eb2*"))
    raw = bytearray(victim.read_bytes())
    raw[-3] ^= 0x40
    victim.write_bytes(bytes(raw))
    reopened = EncryptedStore(DiskStore(tmp_path / "s"), MasterKey.load(tmp_path / "k"))
    with pytest.raises(CorruptBlock, match="'bad'"):
        load_session(reopened, "bad", model.config)
    good, _ = load_session(reopened, "good", model.config)  # other sessions continue
    assert good.get_seq_length() == 40
    with pytest.raises(IncompatibleSession, match="block_size"):
        load_session(reopened, "good", model.config, settings=TieredCache(config=model.config).settings)
    wrong = EncryptedStore(DiskStore(tmp_path / "s"), MasterKey(b"\x01" * 32))
    with pytest.raises(WrongKeyError):
        load_session(wrong, "good", model.config)
    with pytest.raises(IncompatibleSession, match="layers"):
        load_session(reopened, "good", tiny_model("gemma3").config, settings=good.settings)
    reopened.close()


_RESUMER = """
import sys, torch
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
from kv_helpers import feed, tiny_model, token_ids
from kvstore.attention import MINUTIA_ATTENTION
from kvstore.crypto import EncryptedStore, MasterKey
from kvstore.persist import load_session
from kvstore.stores.redis_store import RedisStore
model = tiny_model("qwen2", attn=MINUTIA_ATTENTION, sharpen=4.0)
store = EncryptedStore(RedisStore(sys.argv[1], prefix=sys.argv[2]), MasterKey.load(sys.argv[3]))
cache, blob = load_session(store, "meeting-r", model.config)
torch.save({{"logits": feed(model, cache, token_ids(1, seed=77)), "blob": blob}}, sys.argv[4])
"""


@pytest.mark.slow  # a second Python process imports torch + transformers (~6 s CPU)
def test_second_process_resumes_a_session_from_redis(redis_server: str, tmp_path: Path) -> None:
    model = tiny_model("qwen2", attn=MINUTIA_ATTENTION, sharpen=4.0)
    cache = TieredCache(config=model.config, block_size=8, **COMPRESSED)
    _prefill(model, cache)
    prefix = f"resume{time.monotonic_ns()}"
    key = tmp_path / "k"
    store = EncryptedStore(RedisStore(redis_server, prefix=prefix), MasterKey.generate(key))
    save_session(store, "meeting-r", cache, metadata={"who": "first"}, source="recording-1")
    store.close()
    script = tmp_path / "resume.py"
    script.write_text(textwrap.dedent(_RESUMER.format(root=str(ROOT), tests=str(ROOT / "tests"))))
    subprocess.run([sys.executable, str(script), redis_server, prefix, str(key), str(tmp_path / "out.pt")],
                   check=True, timeout=120)
    out = torch.load(tmp_path / "out.pt")
    expected = feed(model, cache, token_ids(1, seed=77))
    assert out["blob"] == {"who": "first"}
    assert (out["logits"] - expected).abs().max().item() <= EXACT


def test_memory_store_round_trip_keeps_device_placement() -> None:
    model = tiny_model("llama")
    cache = _cache(model, compress=False)
    feed(model, cache, token_ids(20))
    store = MemoryStore("cpu", tier="host")
    save_session(store, "m", cache)
    resumed, _ = load_session(store, "m", model.config, settings=cache.settings, device="cpu")
    assert resumed.tiered_layers[0].pools[BlockFormat.FULL].device.type == "cpu"
    nxt = token_ids(1, seed=9)
    assert (feed(model, cache, nxt) - feed(model, resumed, nxt)).abs().max().item() <= EXACT
