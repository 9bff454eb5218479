"""The log-structured disk tier (SegmentStore): contract, reopen, compaction, damage, crashes, encryption."""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kvstore.crypto import EncryptedStore, MasterKey, TamperedBlock
from kvstore.stores import BlockNotFound, CorruptBlock, StoreFull
from kvstore.stores.segment import SegmentStore

ROOT = Path(__file__).resolve().parent.parent


def _data(i: int, n: int = 3000) -> bytes:
    return (i.to_bytes(4, "little") * (n // 4 + 1))[:n]


def _segments(root: Path) -> list[Path]:
    return sorted(root.glob("seg-*.log"))


def test_owned_puts_queued_reads_and_dead_bytes(tmp_path: Path) -> None:
    """What the segment log adds to the store contract (test_kv_stores.py runs that on it too)."""
    store = SegmentStore(tmp_path)
    assert store.tier == "disk"
    blocks = {f"L0/b{i}": _data(i) for i in range(5)}
    for block_id, data in blocks.items():
        store.put("meeting-1", block_id, data)
    store.put_owned("meeting-2", "only", bytearray(b"\x00" * 10))
    assert store.get("meeting-1", "L0/b3") == blocks["L0/b3"]  # served from the queue or the log
    store.flush()
    assert store.get("meeting-2", "only") == b"\x00" * 10 and isinstance(store.get("meeting-2", "only"), bytes)
    store.put("meeting-1", "L0/b3", b"new")  # overwrite
    store.flush()
    assert store.get("meeting-1", "L0/b3") == b"new"
    assert store.delete("meeting-1", "L0/b3")
    assert store.delete_session("meeting-2") == 1
    store.flush()
    assert store.nbytes() == sum(len(d) for k, d in blocks.items() if k != "L0/b3")
    assert store.dead_bytes() > 3000  # the old b3, the overwrite, the deleted block, tombstones
    with pytest.raises(ValueError):
        store.put("bad\nname", "b", b"")
    store.close()


def test_quota_is_a_hard_cap(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path, quota_bytes=2500)
    store.put("s", "a", b"a" * 1000)
    store.put("s", "b", b"b" * 1000)
    with pytest.raises(StoreFull, match="quota"):
        store.put("s", "c", b"c" * 1000)
    store.put("s", "a", b"A" * 1500)  # replacing counts only the difference
    assert store.nbytes() == 2500 and not store.contains("s", "c")
    store.close()
    reopened = SegmentStore(tmp_path, quota_bytes=2500)
    assert reopened.get("s", "a") == b"A" * 1500 and reopened.nbytes() == 2500
    reopened.close()


def test_reopen_restores_the_index_across_segments(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path, segment_bytes=16 << 10)
    model: dict[tuple[str, str], bytes] = {}
    rng = random.Random(1)
    for step in range(300):
        key = (f"s{rng.randrange(3)}", f"b{rng.randrange(25)}")
        if rng.random() < 0.25:
            assert store.delete(*key) == (model.pop(key, None) is not None)
        else:
            model[key] = _data(step, rng.randrange(1, 5000))
            store.put(*key, model[key])
    store.flush()
    dead = store.dead_bytes()
    store.close()
    assert len(_segments(tmp_path)) > 5
    reopened = SegmentStore(tmp_path, segment_bytes=16 << 10)
    assert not reopened.skipped
    assert reopened.sessions() == sorted({s for s, _ in model})
    assert {(s, b) for s in reopened.sessions() for b in reopened.list(s)} == set(model)
    assert all(reopened.get(*key) == data for key, data in model.items())
    assert reopened.nbytes() == sum(map(len, model.values()))
    assert reopened.dead_bytes() == dead > 0  # the same accounting as the running store kept
    reopened.close()


def test_get_unverified_skips_only_the_checksum(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path, segment_bytes=1)  # a segment per flushed write: all but the last sealed
    for i in range(4):
        store.put("s", f"b{i}", _data(i))
        store.flush()
    store.close()
    second = _segments(tmp_path)[1]
    raw = bytearray(second.read_bytes())
    raw[-10] ^= 0x01  # a payload byte of b1, in a sealed segment: found by get, not at open
    second.write_bytes(bytes(raw))
    store = SegmentStore(tmp_path, segment_bytes=1)
    assert not store.skipped and store.list("s") == ["b0", "b1", "b2", "b3"]
    with pytest.raises(CorruptBlock, match="b1.*checksum mismatch"):
        store.get("s", "b1")
    damaged = store.get_unverified("s", "b1")
    assert len(damaged) == 3000 and damaged != _data(1)
    assert store.get("s", "b2") == _data(2) and store.get_unverified("s", "b2") == _data(2)
    store.close()
    last = _segments(tmp_path)[-1]
    raw = bytearray(last.read_bytes())
    raw[-10] ^= 0x01  # the two newest segments are checked in full at open: a bad last record is a torn tail
    last.write_bytes(bytes(raw))
    store = SegmentStore(tmp_path, segment_bytes=1)
    assert [why for *_, why in store.skipped] == ["torn tail: checksum mismatch"]
    assert store.list("s") == ["b0", "b1", "b2"] and last.stat().st_size == 0
    store.close()


def test_flipped_byte_in_a_sealed_segment_costs_only_that_block(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path, segment_bytes=64 << 10)
    for i in range(40):
        store.put("s", f"b{i}", _data(i, 5000))
    store.flush()
    store.put("s", "b3", _data(99, 5000))  # b3's newest record: its old one must not come back
    store.close()
    first = _segments(tmp_path)[0]
    raw = bytearray(first.read_bytes())
    record = 26 + 1 + 2 + 5000
    raw[5 * record + 2000] ^= 0x10  # payload of b5
    raw[7 * record + 12] ^= 0x10  # header of b7 (its length field): resync past it
    first.write_bytes(bytes(raw))
    store = SegmentStore(tmp_path, segment_bytes=64 << 10)
    assert len(store.skipped) == 1 and store.skipped[0][1:3] == (7 * record, 8 * record)  # resynced at b8
    with pytest.raises(CorruptBlock, match="checksum"):
        store.get("s", "b5")
    with pytest.raises(CorruptBlock, match="damaged"):
        store.get("s", "b7")
    assert store.list("s") == sorted(f"b{i}" for i in range(40))
    for i in set(range(40)) - {5, 7}:
        assert store.get("s", f"b{i}") == (_data(99, 5000) if i == 3 else _data(i, 5000))
    store.put("s", "b7", b"rewritten")  # a damaged block can be replaced
    assert store.get("s", "b7") == b"rewritten"
    store.close()


def test_truncated_tail_is_dropped_with_one_warning(tmp_path: Path, caplog) -> None:
    store = SegmentStore(tmp_path)
    for i in range(6):
        store.put("s", f"b{i}", _data(i))
    store.close()
    (seg,) = _segments(tmp_path)
    full = seg.stat().st_size
    with open(seg, "r+b") as f:
        f.truncate(full - 1000)  # the last record cut mid-payload, as a SIGKILL mid-write would
    with caplog.at_level(logging.WARNING, logger="kvstore.stores.segment"):
        store = SegmentStore(tmp_path)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "torn tail" in warnings[0].getMessage()
    assert store.list("s") == [f"b{i}" for i in range(5)]
    assert seg.stat().st_size == full - (26 + 3 + 3000)  # cut back to the last good record
    store.put("s", "b5", _data(55))
    store.close()
    store = SegmentStore(tmp_path)
    assert not store.skipped and store.get("s", "b5") == _data(55) and store.get("s", "b4") == _data(4)
    store.close()


def test_compaction_keeps_exactly_the_live_blocks_and_frees_space(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = SegmentStore(root, segment_bytes=32 << 10)
    model = {}
    for i in range(60):
        model[f"b{i}"] = _data(i, 2000)
        store.put("s", f"b{i}", model[f"b{i}"])
    store.flush()  # (else the writer skips the versions superseded while queued)
    for i in range(0, 60, 3):
        model[f"b{i}"] = _data(1000 + i, 1500)  # overwrites
        store.put("s", f"b{i}", model[f"b{i}"])
    store.flush()
    for i in range(1, 45, 2):
        store.delete("s", f"b{i}")
        model.pop(f"b{i}", None)
    store.flush()
    before_disk, before_dead = store.disk_bytes(), store.dead_bytes()
    shutil.copytree(root, tmp_path / "saved")  # the store before compaction (for the crash check below)
    report = store.compact(threshold=0.3)
    assert report["segments_removed"] >= 2 and report["bytes_freed"] > 0
    assert store.disk_bytes() < before_disk and store.dead_bytes() < before_dead
    assert sum(p.stat().st_size for p in _segments(root)) == store.disk_bytes()
    assert store.list("s") == sorted(model) and all(store.get("s", k) == v for k, v in model.items())
    assert store.nbytes() == sum(map(len, model.values()))
    store.put("s", "after", b"x")  # the log goes on after compaction
    model["after"] = b"x"
    store.close()
    reopened = SegmentStore(root, segment_bytes=32 << 10)
    assert not reopened.skipped and reopened.list("s") == sorted(model)
    assert all(reopened.get("s", k) == v for k, v in model.items())
    reopened.close()
    # a crash after the copies were made durable but before the old segments went: duplicates resolve
    # to the newest record and no deleted block comes back
    removed = [p for p in _segments(tmp_path / "saved") if not (root / p.name).exists()]
    assert len(removed) == report["segments_removed"]
    for path in removed:
        shutil.copy(path, root / path.name)
    crashed = SegmentStore(root, segment_bytes=32 << 10)
    assert crashed.list("s") == sorted(model) and all(crashed.get("s", k) == v for k, v in model.items())
    assert crashed.compact(threshold=0.3)["segments_removed"] >= len(removed)  # and compacts them again
    crashed.close()
    final = SegmentStore(root, segment_bytes=32 << 10)
    assert final.list("s") == sorted(model) and all(final.get("s", k) == v for k, v in model.items())
    final.close()


def test_random_workload_with_compactions_matches_a_dict(tmp_path: Path) -> None:
    rng = random.Random(7)
    model: dict[tuple[str, str], bytes] = {}
    store = SegmentStore(tmp_path, segment_bytes=8 << 10)
    for step in range(600):
        r = rng.random()
        key = (f"s{rng.randrange(2)}", f"b{rng.randrange(30)}")
        if r < 0.6:
            model[key] = _data(step, rng.randrange(0, 2000))
            store.put(*key, model[key])
        elif r < 0.9:
            assert store.delete(*key) == (model.pop(key, None) is not None)
        elif r < 0.95:
            store.compact(threshold=rng.choice([0.0, 0.3, 0.6]))
        else:
            store.close()
            store = SegmentStore(tmp_path, segment_bytes=8 << 10)
            assert not store.skipped
        if step % 50 == 0:
            assert {(s, b) for s in store.sessions() for b in store.list(s)} == set(model)
    store.close()
    store = SegmentStore(tmp_path, segment_bytes=8 << 10)
    assert {(s, b) for s in store.sessions() for b in store.list(s)} == set(model)
    assert all(store.get(*k) == v for k, v in model.items())
    store.compact(threshold=0.0)
    assert store.dead_bytes() <= sum(s.size for s in store._segments.values() if s is store._current)
    store.close()


def test_encrypted_segment_store_detects_tampering(tmp_path: Path) -> None:
    store = EncryptedStore(SegmentStore(tmp_path / "s", segment_bytes=1), MasterKey.generate(tmp_path / "k"))
    for i in range(4):
        store.put("m", f"b{i}", _data(i, 1500))
        store.flush()  # a segment per record: the key, b0, b1, ...
    assert store.get("m", "b2") == _data(2, 1500)
    store.close()
    second = _segments(tmp_path / "s")[1]  # sealed: holds block b0
    raw = bytearray(second.read_bytes())
    raw[-5] ^= 0x01  # b0's GCM tag
    second.write_bytes(bytes(raw))
    store = EncryptedStore(SegmentStore(tmp_path / "s", segment_bytes=1), MasterKey.load(tmp_path / "k"))
    with pytest.raises(TamperedBlock, match="'b0'"):
        store.get("m", "b0")  # the segment's CRC is skipped (get_unverified); GCM catches it
    assert [store.get("m", f"b{i}") for i in (1, 2, 3)] == [_data(i, 1500) for i in (1, 2, 3)]
    store.close()


_WRITER = """
import sys, resource, signal
sys.path.insert(0, {root!r})
from kvstore.stores.segment import SegmentStore
from kvstore.stores import StoreFull
mode = sys.argv[2]
store = SegmentStore(sys.argv[1], segment_bytes=int(sys.argv[3]))
if mode == "fsize":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
def data(i, n):
    return (i.to_bytes(4, "little") * (n // 4 + 1))[:n]
i = 0
while True:
    if mode == "fsize":
        size = 1000 if i < 3 else 60_000  # the first flush fits, later blocks run past the file size limit
    else:
        size = 20_000 + (i % 7) * 1000
    store.put("meeting", f"b{{i}}", data(i, size))
    i += 1
    if i % 3 == 0:
        try:
            store.flush()
        except StoreFull as exc:
            print("FULL", exc, flush=True)
            print("READ", store.get("meeting", f"b{{i - 1}}")[:4].hex(), flush=True)
            break
        print("FLUSHED", i, flush=True)
"""


def _writer(tmp_path: Path, mode: str, segment_bytes: int) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(_WRITER.format(root=str(ROOT))))
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / "store"), mode,
                             str(segment_bytes)], stdout=subprocess.PIPE,
                            text=True)


def test_sigkill_at_a_random_moment_keeps_every_flushed_block(tmp_path: Path) -> None:
    rng = random.Random()
    target = rng.randrange(20, 60)
    proc = _writer(tmp_path, "kill", 256 << 10)  # rolls every ~10 blocks
    flushed = 0
    try:
        for line in proc.stdout:
            flushed = int(line.split()[1])
            if flushed >= target:
                break
        time.sleep(rng.random() * 0.02)  # somewhere in the next puts, writes or fdatasync
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and flushed >= target
    store = SegmentStore(tmp_path / "store", segment_bytes=256 << 10)
    present = set(store.list("meeting"))
    assert {f"b{i}" for i in range(flushed)} <= present
    assert all(why.startswith("torn tail") for *_, why in store.skipped)  # at most a torn tail
    for block_id in present:  # every block that is there is intact
        i = int(block_id[1:])
        assert store.get("meeting", block_id) == _data(i, 20_000 + (i % 7) * 1000)
    store.put("meeting", "after", b"ok")  # and the log goes on
    store.close()
    store = SegmentStore(tmp_path / "store")
    assert store.get("meeting", "after") == b"ok" and not store.skipped
    store.close()


def test_full_file_system_is_a_clear_error_and_loses_nothing_flushed(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the writer's write fail with EFBIG, as a full disk would."""
    proc = _writer(tmp_path, "fsize", 64 << 20)  # one segment, which hits the limit
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    full = [line for line in out.splitlines() if line.startswith("FULL")]
    assert full and "3 block(s) not written, e.g. 'b6' of session 'meeting'" in full[0], out
    assert "File too large" in full[0]
    flushed = max(int(line.split()[1]) for line in out.splitlines() if line.startswith("FLUSHED"))
    assert flushed == 6
    assert "READ 08000000" in out  # the unwritten block is still readable in the writing process
    store = SegmentStore(tmp_path / "store")
    assert not store.skipped  # the failed write was cut back: no torn record
    present = store.list("meeting")
    assert {f"b{i}" for i in range(flushed)} <= set(present)
    for block_id in present:
        i = int(block_id[1:])
        assert store.get("meeting", block_id) == _data(i, 1000 if i < 3 else 60_000)
    store.close()


def test_read_unverified_lends_views_from_queue_current_and_sealed_segments(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path, segment_bytes=4000)  # about one record per segment
    store.put("s", "b0", _data(0))
    store.put("s", "b1", _data(1))
    store.flush()
    store.put("s", "b2", _data(2))  # may still be queued
    for i in range(3):
        assert store.read_unverified("s", f"b{i}", bytes) == _data(i)
        assert store.read_unverified("s", f"b{i}", lambda view: type(view)) is memoryview
    store.flush()
    sealed = store._segments[store._locs[("s", "b0")][0]]
    assert sealed is not store._current and sealed.map is not None  # sealed: read through its mapping
    current = store._locs[("s", "b2")][0]
    assert store._segments[current] is store._current and store._current.map is None  # current: preadv

    def nested(view: memoryview) -> bytes:  # a read inside a read gets its own buffer, never this one
        assert store.read_unverified("s", "b1", bytes) == _data(1)
        return bytes(view)
    assert store.read_unverified("s", "b2", nested) == _data(2)
    with pytest.raises(BlockNotFound):
        store.read_unverified("s", "nope", bytes)
    store.close()


@pytest.mark.parametrize("encrypted", [False, True])
def test_read_with_checks_what_it_lends_from_every_place_a_block_can_be(tmp_path: Path, encrypted: bool) -> None:
    """Verified lending: queued, current segment (preadv into a reused buffer), sealed segment (mapping);
    a flipped payload byte is a CorruptBlock (CRC) or TamperedBlock (GCM), never wrong bytes."""
    inner = SegmentStore(tmp_path, segment_bytes=4000)  # about one record per segment
    store = EncryptedStore(inner, MasterKey(os.urandom(32))) if encrypted else inner
    for i in range(3):
        store.put("s", f"b{i}", _data(i))
        if i < 2:
            store.flush()
    for _ in range(2):  # the second pass reuses the lent buffers
        for i in range(3):
            assert store.read_with("s", f"b{i}", bytes) == _data(i)
            assert store.read_with("s", f"b{i}", lambda view: type(view)) is memoryview

    def nested(view: memoryview) -> bytes:  # a read inside a read gets another buffer
        assert store.read_with("s", "b1", bytes) == _data(1)
        return bytes(view)
    assert store.read_with("s", "b0", nested) == _data(0)
    store.flush()
    for i in (0, 2):  # b0 in a sealed segment, b2 in the current one
        seg_no, offset, hlen, length = inner._locs[("s", f"b{i}")]
        fd = os.open(inner._segments[seg_no].path, os.O_RDWR)
        byte = os.pread(fd, 1, offset + hlen + length // 2)
        os.pwrite(fd, bytes([byte[0] ^ 0x40]), offset + hlen + length // 2)
        os.close(fd)
        with pytest.raises(TamperedBlock if encrypted else CorruptBlock, match=f"b{i}"):
            store.read_with("s", f"b{i}", bytes)
    assert store.read_with("s", "b1", bytes) == _data(1)  # the rest is unaffected
    store.close()


def test_a_view_in_use_survives_compaction_and_later_writes(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path, segment_bytes=7000)  # two records per segment
    for i in range(4):
        store.put("s", f"b{i}", _data(i))
    store.flush()
    for i in range(1, 4):
        store.delete("s", f"b{i}")
    store.put("s", "b9", _data(9))
    store.flush()
    sealed = store._segments[store._locs[("s", "b0")][0]]
    assert sealed is not store._current and sealed.dead
    held: list[memoryview] = []

    def compact_while_reading(view: memoryview) -> bytes:
        held.append(view)
        report = store.compact(threshold=0.0)  # moves b0 forward and removes the segment under this view
        assert report["segments_removed"] >= 1 and sealed.retired and sealed.map is None
        for i in range(10, 14):
            store.put("s", f"b{i}", _data(i))
        store.flush()
        return bytes(view)
    assert store.read_unverified("s", "b0", compact_while_reading) == _data(0)
    assert bytes(held[0]) == _data(0)  # the dropped mapping lives as long as a view of it
    assert not sealed.path.exists() and store.get("s", "b0") == _data(0)
    assert store.read_unverified("s", "b0", bytes) == _data(0)
    store.close()
    reopened = SegmentStore(tmp_path)
    assert reopened.list("s") == ["b0", "b10", "b11", "b12", "b13", "b9"] and reopened.get("s", "b0") == _data(0)
    reopened.close()


def test_a_sealed_segment_cut_short_is_a_clear_error_not_a_crash(tmp_path: Path) -> None:
    store = EncryptedStore(SegmentStore(tmp_path, segment_bytes=4000), MasterKey(os.urandom(32)))
    for i in range(3):
        store.put("m", f"b{i}", _data(i))
        store.flush()
    segment = store.inner._segments[store.inner._locs[("m", "b0")][0]]
    assert store.get("m", "b0") == _data(0) and segment.map is not None  # mapped by this read
    os.truncate(segment.path, segment.size - 100)  # behind the store's back, while mapped
    with pytest.raises(CorruptBlock, match="truncated"):
        store.get("m", "b0")
    assert store.get("m", "b2") == _data(2)
    store.close()
