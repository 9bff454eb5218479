"""Sealed block format v3: the source key derivation, reading v1 and v2 blocks, AAD binding, zero-copy paths."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

from kvstore.crypto import EncryptedStore, MasterKey, MissingKeyError, TamperedBlock
from kvstore.stores.disk import DiskStore
from kvstore.stores.memory import MemoryStore

PLAIN = os.urandom(70_000)


@pytest.fixture
def store(tmp_path: Path) -> EncryptedStore:
    s = EncryptedStore(DiskStore(tmp_path / "d"), MasterKey(os.urandom(32)))
    yield s
    s.close()


def test_block_key_is_hkdf_expand_of_the_data_key() -> None:
    data_key = os.urandom(32)
    source_key = HKDFExpand(algorithm=hashes.SHA256(), length=32, info=b"minutia blocks v3").derive(data_key)
    assert EncryptedStore.block_key(data_key, "L3/b17") == source_key
    assert {EncryptedStore.block_key(data_key, f"b{i}") for i in range(100)} == {source_key}  # one key per source
    assert EncryptedStore.block_key(os.urandom(32), "b0") != source_key  # and per data key
    expand = HKDFExpand(algorithm=hashes.SHA256(), length=32, info=b"minutia block v2\0L3/b17").derive(data_key)
    assert EncryptedStore.block_key(data_key, "L3/b17", version=2) == expand
    full = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"minutia block v1\0L3/b17").derive(data_key)
    assert EncryptedStore.block_key(data_key, "L3/b17", version=1) == full
    keys = {EncryptedStore.block_key(data_key, f"b{i}", version=2) for i in range(100)}
    assert len(keys) == 100  # the older formats: one key per block id


def test_v3_layout_and_round_trip(store: EncryptedStore) -> None:
    store.put("m", "b", PLAIN, source="rec")
    blob = store.inner.get("m", "b")
    magic, version, n = struct.unpack_from("<4sBH", blob)
    assert (magic, version, blob[7:7 + n]) == (b"MKVE", 3, b"rec")
    assert len(blob) == 7 + n + 12 + len(PLAIN) + 16  # header, source, nonce, ciphertext, tag: nothing else
    assert PLAIN[:64] not in blob
    assert store.get("m", "b") == PLAIN
    store.put("m", "empty", b"")
    assert store.get("m", "empty") == b""
    store.put("m", "view", memoryview(PLAIN)[100:200])  # any buffer is accepted
    assert store.get("m", "view") == PLAIN[100:200]


@pytest.mark.parametrize("version", [1, 2])
def test_blocks_of_older_formats_are_still_read(store: EncryptedStore, version: int) -> None:
    """A block sealed the way format 1 or 2 did (a key per block) opens; the version is authenticated."""
    store.put("m", "new", b"x")  # creates the data key of source "m"
    data_key = store._data_key("m", "m", create=False)
    nonce = os.urandom(12)
    key = AESGCM(EncryptedStore.block_key(data_key, "old", version=version))
    aad = b"MKVE" + bytes([version]) + b"\0".join([b"m", b"old", b"m"])
    old = struct.pack("<4sBH", b"MKVE", version, 1) + b"m" + nonce + key.encrypt(nonce, b"old bytes", aad)
    store.inner.put("m", "old", old)
    assert store.get("m", "old") == b"old bytes"
    v3 = bytearray(store.inner.get("m", "new"))
    v3[4] = version  # claims the older version: other key and AAD, so it fails
    store.inner.put("m", "new", bytes(v3))
    with pytest.raises(TamperedBlock, match="failed authentication"):
        store.get("m", "new")
    v3[4] = 9
    store.inner.put("m", "new", bytes(v3))
    with pytest.raises(TamperedBlock, match="not an encrypted minutia block"):
        store.get("m", "new")


def test_aad_binds_session_block_and_source(store: EncryptedStore) -> None:
    store.put("m", "a", PLAIN, source="srcA")
    store.put("m", "b", PLAIN, source="srcB")  # same length tag, both sources have keys
    blob = bytearray(store.inner.get("m", "a"))
    blob[7:11] = b"srcB"  # relabel the block as another source's
    store.inner.put("m", "a", bytes(blob))
    with pytest.raises(TamperedBlock, match="failed authentication"):
        store.get("m", "a")
    store.inner.put("m", "c", store.inner.get("m", "b"))  # moved to another block id
    with pytest.raises(TamperedBlock):
        store.get("m", "c")
    store.put("n", "b", b"other session", source="srcB")
    store.inner.put("n", "b", store.inner.get("m", "b"))  # moved to another session, same id and source
    with pytest.raises(TamperedBlock):
        store.get("n", "b")
    assert store.get("m", "b") == PLAIN


def test_flipped_bit_on_disk_is_caught_without_the_crc(store: EncryptedStore, tmp_path: Path) -> None:
    """Encrypted reads skip the disk CRC (get_unverified); the GCM tag still catches every flipped bit."""
    store.put("m", "a", PLAIN)
    store.flush()
    path = next((tmp_path / "d" / "m").glob("a.blk"))
    for offset in (-1, -20, -30_000):  # tag, ciphertext end, ciphertext middle
        raw = bytearray(path.read_bytes())
        raw[offset] ^= 0x10
        path.write_bytes(bytes(raw))
        reopened = EncryptedStore(DiskStore(tmp_path / "d"), store.master)
        with pytest.raises(TamperedBlock, match="'m'"):
            reopened.get("m", "a")
        reopened.close()
        raw[offset] ^= 0x10
        path.write_bytes(bytes(raw))
    reopened = EncryptedStore(DiskStore(tmp_path / "d"), store.master)
    assert reopened.get("m", "a") == PLAIN
    reopened.close()


def test_sealed_blob_goes_to_the_inner_store_uncopied(tmp_path: Path) -> None:
    handed: list[object] = []

    class Spy(MemoryStore):
        def put_owned(self, session: str, block_id: str, data: bytearray) -> None:
            handed.append(data)
            super().put_owned(session, block_id, data)

    store = EncryptedStore(Spy("cpu", tier="host"), MasterKey(os.urandom(32)))
    store.put("m", "a", PLAIN)
    assert len(handed) == 1 and isinstance(handed[0], bytearray)  # the buffer encrypt_into wrote
    assert store.get("m", "a") == PLAIN


def test_shredded_source_stays_unreadable_in_format_2(store: EncryptedStore) -> None:
    store.put("m", "keep", b"keep", source="a")
    store.put("m", "gone", b"gone", source="b")
    copy = store.inner.get("m", "gone")
    report = store.shred("b")
    assert (report.keys_destroyed, report.blocks_deleted) == (1, 1)
    store.inner.put("m", "gone", copy)  # a restored backup of the ciphertext
    fresh = EncryptedStore(store.inner, store.master)
    with pytest.raises(MissingKeyError, match="'b'"):
        fresh.get("m", "gone")
    assert fresh.get("m", "keep") == b"keep"
