"""Encryption at rest: key file rules, tamper detection, crypto-shredding (disk and Redis)."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

import pytest
import torch

from kvstore.crypto import (
    EncryptedStore,
    KeyFileError,
    MasterKey,
    MissingKeyError,
    TamperedBlock,
    WrongKeyError,
)
from kvstore.stores import CorruptBlock, pack_block, unpack_block
from kvstore.stores.disk import DiskStore
from kvstore.stores.redis_store import RedisStore

PLAIN = b"the budget is 42k euros " * 20


@pytest.fixture
def master(tmp_path: Path) -> MasterKey:
    return MasterKey.generate(tmp_path / "master.key")


def test_key_file_permissions_and_env(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "k"
    key = MasterKey.generate(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert MasterKey.load(path).secret == key.secret and "hidden" in repr(key)
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        MasterKey.load(path)
    with pytest.raises(KeyFileError, match="does not exist"):
        MasterKey.load(tmp_path / "missing")
    monkeypatch.delenv("MINUTIA_MASTER_KEY", raising=False)
    with pytest.raises(KeyFileError, match="MINUTIA_MASTER_KEY"):
        MasterKey.load()
    monkeypatch.setenv("MINUTIA_MASTER_KEY", base64.b64encode(b"k" * 32).decode())
    assert MasterKey.load().secret == b"k" * 32
    monkeypatch.setenv("MINUTIA_MASTER_KEY", base64.b64encode(b"short").decode())
    with pytest.raises(KeyFileError, match="32 bytes"):
        MasterKey.load()


def test_disk_blocks_are_sealed_and_tampering_is_detected(tmp_path: Path, master: MasterKey) -> None:
    store = EncryptedStore(DiskStore(tmp_path / "d"), master)
    block = pack_block({"k": torch.arange(64, dtype=torch.float32)})
    store.put("m1", "L0/b0", PLAIN)
    store.put("m1", "L0/b1", block)
    store.put("m2", "L0/b0", PLAIN)
    store.flush()
    on_disk = b"".join(p.read_bytes() for p in (tmp_path / "d").rglob("*.blk"))
    assert b"budget" not in on_disk and block[40:80] not in on_disk
    assert store.get("m1", "L0/b0") == PLAIN
    assert torch.equal(unpack_block(store.get("m1", "L0/b1"))[0]["k"], torch.arange(64, dtype=torch.float32))
    assert store.list("m1") == ["L0/b0", "L0/b1"]  # key records are hidden

    inner = store.inner
    blob = bytearray(inner.get("m1", "L0/b1"))
    blob[-5] ^= 1
    inner.put("m1", "L0/b1", bytes(blob))
    with pytest.raises(TamperedBlock, match="failed authentication"):
        store.get("m1", "L0/b1")
    inner.put("m1", "L0/b1", bytes(blob[:30]))
    with pytest.raises(TamperedBlock, match="truncated"):
        store.get("m1", "L0/b1")
    inner.put("m1", "L0/b1", inner.get("m1", "L0/b0"))  # a valid block moved to another id
    with pytest.raises(TamperedBlock):
        store.get("m1", "L0/b1")
    inner.put("m2", "L0/b0", inner.get("m1", "L0/b0"))  # ... or to another session (no key for its source there)
    with pytest.raises((TamperedBlock, MissingKeyError)):
        store.get("m2", "L0/b0")
    assert store.get("m1", "L0/b0") == PLAIN  # the rest of the session is fine
    store.close()

    other = EncryptedStore(DiskStore(tmp_path / "d"), MasterKey(os.urandom(32)))
    with pytest.raises(WrongKeyError, match="does not open"):
        other.get("m1", "L0/b0")
    other.close()


@pytest.mark.parametrize("backend", ["disk", "redis"])
def test_crypto_shredding_by_source(backend: str, tmp_path: Path, master: MasterKey, request) -> None:
    if backend == "disk":
        inner = DiskStore(tmp_path / "d")
    else:
        inner = RedisStore(request.getfixturevalue("redis_server"), prefix=f"shred{time.monotonic_ns()}")
    store = EncryptedStore(inner, master)
    for session in ("m1", "m2"):
        store.put(session, "rec-a/0", PLAIN, source="recording-a")
        store.put(session, "spk-bob/0", PLAIN + b"bob", source="speaker-bob")
        store.put(session, "state", b"session state")
    store.flush()
    backup = [(s, b, inner.get(s, b)) for s in ("m1", "m2") for b in ("spk-bob/0",)]
    assert store.sources("m1") == ["m1", "recording-a", "speaker-bob"]
    assert not store.verify_shredded("speaker-bob", backup)

    report = store.shred("speaker-bob")
    assert (report.sessions, report.keys_destroyed, report.blocks_deleted) == (["m1", "m2"], 2, 2)
    assert store.verify_shredded("speaker-bob", backup)
    assert store.list("m1") == ["rec-a/0", "state"]
    # a restored ciphertext copy cannot be opened any more, not even with the master key
    inner.put("m1", "spk-bob/0", backup[0][2])
    fresh = EncryptedStore(inner, master)
    with pytest.raises(MissingKeyError, match="speaker-bob.*crypto-shredded"):
        fresh.get("m1", "spk-bob/0")
    assert fresh.get("m1", "rec-a/0") == PLAIN and fresh.get("m2", "state") == b"session state"
    store.close()


def test_encrypted_disk_reads_from_the_queue_and_from_swapped_files(tmp_path: Path, master: MasterKey) -> None:
    store = EncryptedStore(DiskStore(tmp_path / "d"), master)
    blocks = [PLAIN + bytes([i]) * 1000 for i in range(6)]
    for i, data in enumerate(blocks):
        store.put("m", f"b{i}", data)
    assert [store.get("m", f"b{i}") for i in range(6)] == blocks  # queued or written
    store.flush()
    assert [store.get("m", f"b{i}") for i in range(6)] == blocks  # from the files
    files = {p.name: p for p in (tmp_path / "d").rglob("*.blk")}
    b1, b2 = files["b1.blk"], files["b2.blk"]
    b1.write_bytes(b2.read_bytes())  # another block's file under this name: its header says so
    with pytest.raises(CorruptBlock, match="does not hold"):
        store.get("m", "b1")
    b2.write_bytes(b2.read_bytes()[:-3])  # cut short
    with pytest.raises(CorruptBlock, match="torn"):
        store.get("m", "b2")
    assert store.get("m", "b3") == blocks[3]
    store.close()


class _Keeper(DiskStore):
    """Keeps every blob it is handed (as a store with a long write-behind queue would)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, write_behind=False)
        self.kept: list[bytearray] = []

    def put_owned(self, session: str, block_id: str, data: bytearray) -> None:
        self.kept.append(data)
        super().put_owned(session, block_id, data)


def test_sealed_blob_buffers_are_reused_only_once_the_store_let_them_go(tmp_path: Path, master: MasterKey,
                                                                       monkeypatch) -> None:
    import kvstore.crypto as crypto

    monkeypatch.setattr(crypto, "_BLOBS", crypto._BlobPool(crypto.POOL_BYTES))  # not the buffers earlier tests left
    keeper = _Keeper(tmp_path / "d")
    store = EncryptedStore(keeper, master)
    for i in range(40):
        store.put("m", f"b{i}", bytes([i]) * 5000)
    assert len({id(b) for b in keeper.kept}) == len(keeper.kept)  # all held: no buffer handed out twice
    assert [store.get("m", f"b{i}") for i in range(40)] == [bytes([i]) * 5000 for i in range(40)]
    kept_ids = {id(b) for b in keeper.kept[1:]}
    keeper.kept.clear()  # the store let them go: the next puts reuse them
    for i in range(40, 50):
        store.put("m", f"b{i}", bytes([i]) * 5000)
    assert {id(b) for b in keeper.kept} & kept_ids
    assert [store.get("m", f"b{i}") for i in range(50)] == [bytes([i]) * 5000 for i in range(50)]
    store.close()


def test_kept_block_ciphers_never_outlive_their_data_key(tmp_path: Path, master: MasterKey) -> None:
    store = EncryptedStore(DiskStore(tmp_path / "d"), master)
    store.put("m", "b0", b"first", source="alice")
    assert store.get("m", "b0") == b"first" and store._ciphers  # the put's cipher served the read
    store.shred("alice")
    assert not store._ciphers
    store.put("m", "b0", b"second", source="alice")  # a new data key: a new cipher, never the old one
    store.put("x", "b1", b"other")
    store.delete_session("x")
    assert not store._ciphers
    store.close()
    reopened = EncryptedStore(DiskStore(tmp_path / "d"), master)  # nothing cached: keys from the store
    assert reopened.sessions() == ["m"] and reopened.get("m", "b0") == b"second"
    reopened.close()
