"""Block stores (device/host memory, disk, segment log, Redis): same behaviour, one block format, crash safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import redis
import torch

from kvstore.stores import BlockNotFound, CorruptBlock, StoreFull, StoreUnavailable, pack_block, unpack_block
from kvstore.stores.disk import DiskStore
from kvstore.stores.memory import MemoryStore
from kvstore.stores.redis_store import RedisStore
from kvstore.stores.segment import SegmentStore

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("device", "host", "disk", "segment", "redis")


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    kind = request.param
    if kind == "device":
        s = MemoryStore("cuda" if torch.cuda.is_available() else "cpu", tier="device")
    elif kind == "host":
        s = MemoryStore("cpu", tier="host")
    elif kind == "disk":
        s = DiskStore(tmp_path / "disk")
    elif kind == "segment":
        s = SegmentStore(tmp_path / "segment")
    else:
        s = RedisStore(request.getfixturevalue("redis_server"), prefix=f"t{time.monotonic_ns()}")
    yield s
    s.close()


def test_block_format_round_trip_every_dtype() -> None:
    tensors = {
        "k": torch.randn(2, 8, 3, dtype=torch.float16),
        "bf": torch.randn(4, dtype=torch.bfloat16),
        "f8": torch.randn(5).to(torch.float8_e4m3fn),
        "codes": torch.randint(0, 255, (3, 7), dtype=torch.uint8),
        "idx": torch.arange(6).view(2, 3),
        "flag": torch.tensor([True, False]),
        "empty": torch.zeros(0, 4),
    }
    data = pack_block(tensors, layer=2, fmt="int8")
    slot = torch.frombuffer(bytearray(data), dtype=torch.uint8)  # a memory tier's slot holding the block
    for source in (data, slot):
        back, attrs = unpack_block(source)
        assert attrs == {"layer": 2, "fmt": "int8"}
        for name, t in tensors.items():
            assert back[name].dtype == t.dtype and back[name].shape == t.shape
            assert torch.equal(back[name].view(torch.uint8) if t.element_size() == 1 else back[name],
                               t.view(torch.uint8) if t.element_size() == 1 else t)
    slot.fill_(0)  # the slot reused: what was unpacked from it is a copy
    assert torch.equal(back["k"], tensors["k"])
    with pytest.raises(CorruptBlock, match="truncated"):
        unpack_block(data[:-3])
    with pytest.raises(CorruptBlock, match="not a minutia block"):
        unpack_block(b"XXXX" + data[4:])
    with pytest.raises(CorruptBlock, match="truncated"):
        unpack_block(torch.frombuffer(bytearray(data[:-3]), dtype=torch.uint8))
    with pytest.raises(CorruptBlock, match="not a minutia block"):
        unpack_block(slot)


def test_store_contract(store) -> None:
    blocks = {f"L0/b{i}": pack_block({"k": torch.full((4, 4), float(i))}) for i in range(5)}
    for block_id, data in blocks.items():
        store.put("meeting-1", block_id, data)
    store.put("meeting-2", "only", b"\x00" * 10)
    store.flush()
    assert store.list("meeting-1") == sorted(blocks)
    assert store.sessions() == ["meeting-1", "meeting-2"]
    assert store.contains("meeting-1", "L0/b3") and not store.contains("meeting-2", "L0/b3")
    assert unpack_block(store.get("meeting-1", "L0/b3"))[0]["k"][0, 0].item() == 3.0
    assert store.read_with("meeting-1", "L0/b3", unpack_block)[0]["k"][0, 0].item() == 3.0  # a lent view
    assert store.read_with("meeting-1", "L0/b2", bytes) == blocks["L0/b2"]
    store.will_read("meeting-1", ["L0/b1", "nope", "L0/b4"])  # a hint: ids it lacks are skipped, nothing changes
    assert store.read_with("meeting-1", "L0/b4", bytes) == blocks["L0/b4"]
    with pytest.raises(BlockNotFound):
        store.read_with("meeting-1", "nope", bytes)
    assert store.nbytes() == sum(map(len, blocks.values())) + 10
    store.put("meeting-1", "L0/b3", b"new")  # overwrite
    assert store.get("meeting-1", "L0/b3") == b"new"
    assert store.delete("meeting-1", "L0/b3") and not store.delete("meeting-1", "L0/b3")
    with pytest.raises(BlockNotFound, match="L0/b3"):
        store.get("meeting-1", "L0/b3")
    assert store.delete_session("meeting-2") == 1
    store.flush()
    assert store.sessions() == ["meeting-1"]


def test_memory_quota_is_a_hard_cap() -> None:
    store = MemoryStore("cpu", tier="device", quota_bytes=100)
    store.put("s", "a", b"x" * 60)
    with pytest.raises(StoreFull, match="device tier full"):
        store.put("s", "b", b"x" * 60)
    assert store.nbytes() == 60 and store.get("s", "a") == b"x" * 60


def test_memory_put_tensor_copies_any_layout_into_its_slot() -> None:
    store = MemoryStore("cpu", tier="host")
    grid = torch.arange(4096, dtype=torch.int32).view(torch.uint8).reshape(64, 256)
    store.put_tensor("s", "2d", grid)
    store.put_tensor("s", "strided", grid[:, ::2])  # not contiguous: copied in order
    store.put_tensor("s", "empty", grid[:0])
    assert torch.equal(store.get_tensor("s", "2d"), grid.reshape(-1))
    assert torch.equal(store.get_tensor("s", "strided"), grid[:, ::2].reshape(-1))
    assert store.get("s", "empty") == b"" and store.nbytes() == grid.numel() * 3 // 2
    view = store.get_tensor("s", "2d")
    grid.zero_()  # the slot holds a copy, not the caller's memory
    store.put_tensor("s", "other", torch.full((16384,), 7, dtype=torch.uint8))
    assert torch.equal(view, torch.arange(4096, dtype=torch.int32).view(torch.uint8))
    with pytest.raises(TypeError):
        store.put_tensor("s", "f", torch.zeros(4))


# ------------------------------------------------------------------------------------------------
# Disk
# ------------------------------------------------------------------------------------------------


def test_disk_reopen_and_damaged_files(tmp_path: Path) -> None:
    with DiskStore(tmp_path) as store:
        for i in range(4):
            store.put("s/1", f"b.{i}", bytes([i]) * 1000)
        store.put("other", "x", b"fine")
    files = sorted((tmp_path / "s%2F1").glob("*.blk"))
    assert len(files) == 4
    files[0].write_bytes(files[0].read_bytes()[:500])  # torn
    raw = bytearray(files[1].read_bytes())
    raw[-1] ^= 0xFF  # bit rot
    files[1].write_bytes(bytes(raw))
    (tmp_path / "s%2F1" / "b%2E9.blk.tmp-1-2").write_bytes(b"half a write")
    store = DiskStore(tmp_path)
    assert [p.name for p, _ in store.skipped] == [files[0].name] and "torn" in store.skipped[0][1]
    assert len(store.removed_temporaries) == 1
    assert store.list("s/1") == ["b.1", "b.2", "b.3"]
    with pytest.raises(CorruptBlock, match="checksum"):
        store.get("s/1", "b.1")
    with pytest.raises(CorruptBlock, match="checksum"):
        store.read_with("s/1", "b.1", bytes)
    assert store.get("s/1", "b.2") == b"\x02" * 1000 and store.get("other", "x") == b"fine"
    assert store.read_with("s/1", "b.2", bytes) == b"\x02" * 1000
    store.close()


def test_disk_quota(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, quota_bytes=2500)
    store.put("s", "a", b"a" * 1000)
    store.put("s", "b", b"b" * 1000)
    with pytest.raises(StoreFull, match="quota"):
        store.put("s", "c", b"c" * 1000)
    store.put("s", "a", b"A" * 1500)  # replacing counts only the difference
    store.close()
    assert DiskStore(tmp_path).get("s", "a") == b"A" * 1500


_WRITER = """
import sys, resource, signal, torch
sys.path.insert(0, {root!r})
from kvstore.stores.disk import DiskStore
from kvstore.stores import pack_block, StoreFull
mode = sys.argv[2]
store = DiskStore(sys.argv[1])
if mode == "fsize":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
i = 0
while True:
    if mode == "fsize":
        size = 1000 if i < 3 else 250_000  # the first flush fits, the next blocks exceed the file size limit
    else:
        size = 20_000 + (i % 7) * 1000
    store.put("meeting", f"b{{i}}", pack_block({{"kv": torch.full((size // 4,), float(i))}}))
    i += 1
    if i % 3 == 0:
        try:
            store.flush()
        except StoreFull as exc:
            print("FULL", exc, flush=True)
            print("READ", store.get("meeting", f"b{{i - 1}}")[:4].hex(), flush=True)
            break
        print("FLUSHED", i, flush=True)
        if mode == "fsize" and i > 30:
            break
"""


def _writer(tmp_path: Path, mode: str) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(_WRITER.format(root=str(ROOT))))
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / "store"), mode], stdout=subprocess.PIPE,
                            text=True)


def test_sigkill_mid_write_keeps_every_flushed_block(tmp_path: Path) -> None:
    """A real SIGKILL while the writer thread is writing: the store opens, flushed blocks are intact."""
    proc = _writer(tmp_path, "kill")
    flushed = 0
    try:
        for line in proc.stdout:
            flushed = int(line.split()[1])
            if flushed >= 30:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # puts of blocks 30.. are in flight
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and flushed >= 30
    store = DiskStore(tmp_path / "store")
    present = set(store.list("meeting"))
    assert {f"b{i}" for i in range(flushed)} <= present
    assert not store.skipped
    for block_id in present:  # every block that is there decodes to its own content
        assert bool((unpack_block(store.get("meeting", block_id))[0]["kv"] == float(block_id[1:])).all())
    store.close()


def test_full_file_system_is_a_clear_error_and_loses_nothing(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the writer's write fail with EFBIG, as a full disk would."""
    proc = _writer(tmp_path, "fsize")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    full = [line for line in out.splitlines() if line.startswith("FULL")]
    assert full and "not written" in full[0] and "session 'meeting'" in full[0]
    assert "READ " + b"MKVB".hex() in out  # the unwritten block is still readable in the writing process
    store = DiskStore(tmp_path / "store")
    assert store.list("meeting") == ["b0", "b1", "b2"] and not store.skipped  # failed writes left no files
    assert not list((tmp_path / "store").rglob("*.tmp*"))
    store.close()


# ------------------------------------------------------------------------------------------------
# Redis
# ------------------------------------------------------------------------------------------------


def test_redis_key_layout_is_cluster_compatible(redis_server: str) -> None:
    store = RedisStore(redis_server, prefix="layout")
    store.put("m1", "L0/b1", b"abc")
    store.flush()
    keys = sorted(k.decode() for k in redis.Redis.from_url(redis_server).keys("layout:*"))
    assert keys == ["layout:sessions", "layout:{m1}:b:L0/b1", "layout:{m1}:index"]
    with pytest.raises(ValueError, match="braces"):
        store.put("bad{x}", "b", b"")
    store.close()


def _commands(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("get", "mget")}


def test_redis_hinted_reads_come_in_batches_and_never_stale(redis_server: str) -> None:
    """A resume's reads (will_read, then get in order) cost one MGET per batch, not a GET per block,
    counted by the real server; a block written or deleted after it was fetched ahead is read fresh."""
    prefix = f"ahead{time.monotonic_ns()}"
    writer = RedisStore(redis_server, prefix=prefix)
    blocks = {f"L{i // 10}/b{i % 10}": os.urandom(4096 + i) for i in range(70)}
    for block_id, data in blocks.items():
        writer.put("m", block_id, data)
    writer.close()
    admin = redis.Redis.from_url(redis_server)
    reader = RedisStore(redis_server, prefix=prefix)  # another process resuming: nothing cached
    order = list(blocks)
    reader.will_read("m", order + ["missing"])
    before = _commands(admin)
    for block_id in order[:40]:
        assert reader.get("m", block_id) == blocks[block_id]
    after = _commands(admin)
    assert after["get"] == before["get"] and after["mget"] - before["mget"] == 2  # 8 first, then 64 (1 MiB of 4 KiB blocks, capped)
    reader.put("m", order[41], b"rewritten")  # fetched ahead already: the new bytes win
    reader.flush()
    assert reader.get("m", order[41]) == b"rewritten"
    assert reader.delete("m", order[42])
    with pytest.raises(BlockNotFound):
        reader.get("m", order[42])
    for block_id in order[43:]:
        assert reader.get("m", block_id) == blocks[block_id]
    with pytest.raises(BlockNotFound):
        reader.get("m", "missing")
    assert reader.get("m", order[0]) == blocks[order[0]]  # read again: a plain GET
    reader.delete_session("m")
    reader.close()


def test_unreachable_redis_is_a_clear_error() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here
    store = RedisStore(f"redis://127.0.0.1:{port}/0", connect_timeout_s=0.5)
    store.put("meeting-7", "b", b"kept")  # buffered until flush
    with pytest.raises(StoreUnavailable, match=r"unreachable.*meeting-7"):
        store.get("meeting-7", "other")
    with pytest.raises(StoreUnavailable, match="unreachable"):
        store.flush()
    assert store.get("meeting-7", "b") == b"kept"  # still buffered, not lost
