"""Fast paths of the stores: the memory tiers' slab (slot reuse, growth, views) and the disk tier's
write path (sharded writers, owned buffers, parallel fdatasync, checksum-free reads for AEAD callers)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from kvstore.stores import BlockNotFound, CorruptBlock, StoreFull
from kvstore.stores.disk import DiskStore
from kvstore.stores.memory import MIN_SLOT, MemoryStore, slot_size

KIB = 1 << 10


def _block(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------------
# slab
# ------------------------------------------------------------------------------------------------


def test_size_classes_bound_the_slack() -> None:
    assert slot_size(0) == slot_size(1) == slot_size(MIN_SLOT) == MIN_SLOT
    assert slot_size(256 * KIB) == 256 * KIB  # a power of two fits exactly
    assert slot_size(256 * KIB + 100) == 288 * KIB  # a packed block (payload + header): next 1/8 step
    for n in list(range(1, 5000, 37)) + [random.Random(0).randrange(1, 1 << 26) for _ in range(500)]:
        size = slot_size(n)
        assert n <= size and size % MIN_SLOT == 0
        assert size - n < max(MIN_SLOT, n / 8 + 1)  # at most 12.5% slack above the minimum slot


def test_delete_frees_a_slot_and_the_next_put_reuses_it() -> None:
    store = MemoryStore("cpu", tier="host")
    store.put_tensor("s", "a", _block(256 * KIB, 1))
    store.put_tensor("s", "b", _block(256 * KIB, 2))
    first = store.stats()
    ptr_a = store.get_tensor("s", "a").data_ptr()
    assert first["slots_used"] == 2 and first["block_bytes"] == 512 * KIB
    assert store.delete("s", "a")
    after_delete = store.stats()
    assert after_delete["slots_used"] == 1 and after_delete["slots_free"] == first["slots_free"] + 1
    assert after_delete["reserved_bytes"] == first["reserved_bytes"]  # the slab keeps its memory
    store.put_tensor("s", "c", _block(250 * KIB, 3))  # same size class: the freed slot, no new memory
    assert store.get_tensor("s", "c").data_ptr() == ptr_a
    assert store.stats()["reserved_bytes"] == first["reserved_bytes"]
    assert torch.equal(store.get_tensor("s", "c"), _block(250 * KIB, 3))
    assert torch.equal(store.get_tensor("s", "b"), _block(256 * KIB, 2))


def test_slab_grows_by_chunks_and_stats_measure_the_bytes() -> None:
    store = MemoryStore("cpu", tier="host", chunk_bytes=1 << 20)
    sizes = {}
    reserved = []
    for i in range(40):
        n = 64 * KIB - (i % 3) * 1000  # three lengths, one size class
        store.put_tensor("s", f"b{i}", _block(n, i))
        sizes[f"b{i}"] = n
        reserved.append(store.stats()["reserved_bytes"])
    stats = store.stats()
    assert stats["block_bytes"] == store.nbytes() == sum(sizes.values()) and stats["blocks"] == 40
    (cls,) = stats["classes"].values()
    assert cls["used"] == 40 and cls["slots"] >= 40
    # the reserved figure is the chunk tensors' real size, and growth is by chunks, not per block
    chunks = store._classes[slot_size(64 * KIB)].chunks
    assert stats["reserved_bytes"] == sum(c.tensor.numel() for c in chunks) == cls["reserved_bytes"]
    assert len(set(reserved)) == len(chunks) < 10  # capacity grew a few times, each a whole chunk
    assert max(c.tensor.numel() for c in chunks) <= 1 << 20  # chunk_bytes caps a chunk
    assert stats["reserved_bytes"] < 2 * sum(sizes.values())
    for block_id, n in sizes.items():
        assert torch.equal(store.get_tensor("s", block_id), _block(n, int(block_id[1:])))


def test_reserve_preallocates_and_trim_releases_empty_chunks() -> None:
    store = MemoryStore("cpu", tier="host", chunk_bytes=1 << 20)
    store.reserve(256 * KIB, 8)
    reserved = store.stats()["reserved_bytes"]
    assert reserved == 8 * 256 * KIB
    for i in range(8):
        store.put_tensor("s", f"b{i}", _block(256 * KIB, i))
    assert store.stats()["reserved_bytes"] == reserved  # no allocation inside the puts
    assert store.trim() == 0  # every chunk holds blocks
    store.delete_session("s")
    assert store.stats()["reserved_bytes"] == reserved and store.nbytes() == 0
    assert store.trim() == reserved and store.stats()["reserved_bytes"] == 0
    store.put("s", "again", b"x" * 1000)  # the slab grows back on demand
    assert store.get("s", "again") == b"x" * 1000


def test_views_and_out_buffers() -> None:
    store = MemoryStore("cpu", tier="host")
    store.put_tensor("s", "a", _block(5000, 1))
    view = store.get_tensor("s", "a")
    assert view.numel() == 5000  # the block's bytes, not the slot's
    out = torch.empty(5000, dtype=torch.uint8)
    assert store.get_tensor("s", "a", out=out) is out and torch.equal(out, _block(5000, 1))
    with pytest.raises(ValueError, match="5000"):
        store.get_tensor("s", "a", out=torch.empty(10, dtype=torch.uint8))
    # overwriting takes a new slot: the old view is untouched until a later put reuses its slot
    store.put_tensor("s", "a", _block(5000, 2))
    assert torch.equal(view, _block(5000, 1)) and torch.equal(store.get_tensor("s", "a"), _block(5000, 2))
    # out= copies survive the block's deletion and the slot's reuse
    store.delete("s", "a")
    store.put_tensor("s", "z", _block(5000, 3))
    assert torch.equal(out, _block(5000, 1))
    with pytest.raises(BlockNotFound):
        store.get_tensor("s", "a")


def test_tier_to_tier_move_then_delete_keeps_the_bytes() -> None:
    """What TierPlacement.move does: put_tensor(get_tensor(...)) into another store, delete the source."""
    host, dev = MemoryStore("cpu", tier="host"), MemoryStore("cpu", tier="device")
    for i in range(6):
        host.put_tensor("s", f"b{i}", _block(70 * KIB, i))
    for i in range(6):
        dev.put_tensor("s", f"b{i}", host.get_tensor("s", f"b{i}"))
        host.delete("s", f"b{i}")
        host.put_tensor("s", f"new{i}", _block(70 * KIB, 100 + i))  # reuses the freed host slot at once
    for i in range(6):
        assert torch.equal(dev.get_tensor("s", f"b{i}"), _block(70 * KIB, i))
        assert torch.equal(host.get_tensor("s", f"new{i}"), _block(70 * KIB, 100 + i))


def test_random_puts_and_deletes_match_a_dict_model() -> None:
    rng = random.Random(7)
    store = MemoryStore("cpu", tier="host", quota_bytes=3 << 20, chunk_bytes=256 * KIB)
    model: dict[str, bytes] = {}
    for step in range(1500):
        block_id = f"b{rng.randrange(60)}"
        if rng.random() < 0.35:
            assert store.delete("s", block_id) == (block_id in model)
            model.pop(block_id, None)
            continue
        data = rng.randbytes(rng.choice([0, 1, 255, 257, 4000, 64 * KIB, 100 * KIB + 7]))
        try:
            store.put("s", block_id, data)
        except StoreFull:
            assert sum(map(len, model.values())) - len(model.get(block_id, b"")) + len(data) > 3 << 20
            continue
        model[block_id] = data
    assert store.list("s") == sorted(model) and store.nbytes() == sum(map(len, model.values()))
    for block_id, data in model.items():
        assert store.get("s", block_id) == data
    stats = store.stats()
    assert stats["slots_used"] == sum(1 for d in model.values() if d)  # empty blocks take no slot
    for cls in store._classes.values():  # the open list is exactly the chunks with a free slot, once each
        assert sorted(map(id, cls.open)) == sorted(id(c) for c in cls.chunks if c.free)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_slot_reuse_waits_for_queued_copies() -> None:
    host, dev = MemoryStore("cpu", tier="host"), MemoryStore("cuda", tier="device")
    assert host.pin
    host.put_tensor("s", "a", _block(1 << 20, 1))
    dev.put_tensor("s", "a", host.get_tensor("s", "a"))  # asynchronous from the pinned slot
    host.delete("s", "a")
    assert host.stats()["pending_frees"] == 1  # not reusable until the copy has run
    torch.cuda.synchronize()
    host.put_tensor("s", "b", _block(1 << 20, 2))
    assert host.stats()["pending_frees"] == 0
    assert torch.equal(dev.get_tensor("s", "a").cpu(), _block(1 << 20, 1))


# ------------------------------------------------------------------------------------------------
# disk
# ------------------------------------------------------------------------------------------------


def test_put_owned_keeps_the_buffer_and_reads_stay_bytes(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, writers=1)
    buf = bytearray(b"owned" * 100)
    store.put_owned("s", "a", buf)
    with store._lock:
        pending = store._pending.get(("s", "a"))
    assert pending is None or pending is buf  # kept, not copied (None: already written)
    got = store.get("s", "a")
    assert type(got) is bytes and got == bytes(buf)
    mutable = bytearray(b"copied")
    store.put("s", "b", mutable)  # a plain put copies a mutable buffer: later changes do not leak in
    mutable[:] = b"XXXXXX"
    store.flush()
    reopened = DiskStore(tmp_path)
    assert reopened.get("s", "a") == b"owned" * 100 and reopened.get("s", "b") == b"copied"
    reopened.close()
    store.close()


def test_sharded_writers_keep_each_blocks_order(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, writers=4, sync_threads=4)
    expected: dict[str, bytes] = {}
    for round_ in range(30):
        for k in range(8):
            block_id = f"b{k}"
            if (round_ + k) % 5 == 4:
                store.delete("s", block_id)
                expected.pop(block_id, None)
            else:
                data = bytes([round_, k]) * (1000 + 97 * round_)
                store.put("s", block_id, data)
                expected[block_id] = data
    store.flush()
    assert not store._syncs.files
    store.close()
    reopened = DiskStore(tmp_path)
    assert reopened.list("s") == sorted(expected) and not reopened.skipped
    for block_id, data in expected.items():
        assert reopened.get("s", block_id) == data
    assert not list(tmp_path.rglob("*.tmp*"))
    reopened.close()


def test_get_unverified_skips_only_the_checksum(tmp_path: Path) -> None:
    with DiskStore(tmp_path) as store:
        store.put("s", "a", b"A" * 4000)
    (path,) = (tmp_path / "s").glob("*.blk")
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0x01
    path.write_bytes(bytes(raw))
    store = DiskStore(tmp_path)
    with pytest.raises(CorruptBlock, match="checksum"):
        store.get("s", "a")
    assert store.get_unverified("s", "a") == bytes(raw[-4000:])  # for callers that authenticate it themselves
    path.write_bytes(bytes(raw[:-1]))  # structural damage is still caught
    with pytest.raises(CorruptBlock, match="torn"):
        store.get_unverified("s", "a")
    store.close()


def test_drain_writes_without_syncing(tmp_path: Path) -> None:
    store = DiskStore(tmp_path)
    for i in range(10):
        store.put("s", f"b{i}", bytes([i]) * 5000)
    store.drain()
    assert len(list((tmp_path / "s").glob("*.blk"))) == 10 and len(store._syncs.files) == 10
    store.flush()
    assert not store._syncs.files
    store.close()


# ------------------------------------------------------------------------------------------------
# Redis
# ------------------------------------------------------------------------------------------------


def test_redis_sends_behind_and_keeps_order(redis_server: str) -> None:
    import time

    from kvstore.stores.redis_store import RedisStore

    prefix = f"behind{time.monotonic_ns()}"
    store = RedisStore(redis_server, prefix=prefix, buffer_bytes=3000)  # every other put hands a batch over
    expected: dict[str, bytes] = {}
    for i in range(60):
        block_id = f"b{i % 9}"
        if i % 7 == 6:
            store.delete("m", block_id)  # waits for the batch in flight: never overtaken by its put
            expected.pop(block_id, None)
        else:
            data = bytes([i]) * 2000
            store.put_owned("m", block_id, bytearray(data)) if i % 2 else store.put("m", block_id, data)
            expected[block_id] = data
            assert store.get("m", block_id) == data and store.contains("m", block_id)  # buffered or in flight
    store.close()
    fresh = RedisStore(redis_server, prefix=prefix)
    assert fresh.list("m") == sorted(expected)
    for block_id, data in expected.items():
        assert fresh.get("m", block_id) == data
    fresh.close()


def test_redis_failed_background_batch_is_kept_and_reported() -> None:
    import socket

    from kvstore.stores import StoreUnavailable
    from kvstore.stores.redis_store import RedisStore

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here
    store = RedisStore(f"redis://127.0.0.1:{port}/0", connect_timeout_s=0.3, buffer_bytes=100)
    store.put("m", "a", b"A" * 150)  # handed to the sender, which fails
    with pytest.raises(StoreUnavailable, match="unreachable"):
        store.flush()
    assert store.get("m", "a") == b"A" * 150  # back in the buffer, not lost
    with pytest.raises(StoreUnavailable):
        store.flush()
    assert store.get("m", "a") == b"A" * 150
