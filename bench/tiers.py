#!/usr/bin/env python
"""Tier benchmark: transfer bandwidth per tier pair, encryption overhead, prefetch on QMSum replays.

Usage (from the repository root)::

    python bench/tiers.py --out out/tiers                       # defaults: 64 MiB per transfer test
    python bench/tiers.py --mib 16 --meetings 3 --out /tmp/tiers # small run

1. Raw baselines measured in the same run, with the same blocks and the same buffer and durability
   policy as the tier they face (``BASELINES``): per-block copies into reused memory for the memory
   tiers (their slab reuses slots), one file written block by block with and without fsync for the
   disk tier (durable = put + flush, which fdatasyncs), pread per block plus the checksum the tier
   checks for disk reads (page cache; CRC32 for the per-block files, CRC32C for the segment log), the
   same from the disk itself (page cache dropped: one file streamed, and a file per block read
   plainly), redis-py SET / GET per block and MGET of ~1 MiB at a time for Redis (also on 16 KiB,
   KV-block-sized blocks). Reads, raw and tier alike, let each block go before the next (as the app
   does: a block read is unpacked, then dropped).
2. Tier pairs, whole blocks (``--block-kib``): device<->host (MemoryStore), host->disk / disk->host
   (DiskStore, a file per block, write-behind; timed until written and until flushed), host->segment /
   segment->host (SegmentStore, the log-structured disk tier, same timing), host->redis / redis->host (a
   redis-server the bench starts on a loopback port), disk and Redis with and without AES-256-GCM
   (kvstore.crypto); cold reads (page cache dropped, store opened afresh, blocks hinted with
   ``will_read`` as a resume does); Redis reads hinted with ``will_read`` (MGET batches). Raw and tier
   runs are interleaved ``--repeat`` times; each figure is its best run.
3. QMSum replays (``--data``): each meeting's transcript is cut into blocks of ``--block-words``
   words; 25% of the blocks' bytes fit the device (watermark target 85% of that cap). For each
   specific query, decode step t reads the top ``--reads`` blocks by TF-IDF score against the query
   plus the first t/steps of the gold answer (the "current query" grows as the answer is written);
   before step t the prefetcher moves up the blocks predicted from step t-1's scores. Reported: hit
   rate, decode-step time (block reads + waiting for the prefetch), peak device bytes vs cap.

4. ``--only host-recall`` (that part alone): the cold tier's host memory in clear vs sealed (AES-256-GCM,
   ``EncryptedStore`` over the slab, as ``kv.cold.encrypt_host`` makes it), per block, on cold blocks shaped
   as the cache evicts them (``HOST_BLOCKS``): evict (pack + put), recall (``ColdTier.fetch``: read +
   unpack, what a decode-step miss does), stage (the prefetcher's move up to the device slab).

Writes tiers.json, tiers.md and tiers.png into --out (host_recall.json / .md with ``--only host-recall``).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import re
import shutil
import statistics
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import google_crc32c
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvstore.cold import ColdTier  # noqa: E402
from kvstore.crypto import EncryptedStore, MasterKey  # noqa: E402
from kvstore.placement import PlacementPolicy, Tier, TierPlacement  # noqa: E402
from kvstore.prefetch import Prefetcher  # noqa: E402
from kvstore.tier_guards import HitRateWindow, WatermarkController  # noqa: E402
from kvstore.stores.base import pack_block  # noqa: E402
from kvstore.stores.disk import DiskStore  # noqa: E402
from kvstore.stores.memory import MemoryStore  # noqa: E402
from kvstore.stores.readahead import drop_cached  # noqa: E402
from kvstore.stores.redis_store import READ_AHEAD_BLOCKS, READ_AHEAD_BYTES, RedisStore  # noqa: E402
from kvstore.stores.segment import SegmentStore  # noqa: E402

from bench.shared_data import qmsum_val  # noqa: E402

DEFAULT_DATA = qmsum_val()


def _gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else float("inf")


_SCRATCH: list[np.ndarray] = []
MEMORY_CLOCK = {"clock": time.perf_counter}  # --clock thread: CPU time of this thread, for memory copies
KEEP_READS = {"keep": False}  # --keep-reads: tier reads keep every block until the pass ends


def _timed(fn, cold: bool = False) -> float:
    """Seconds ``fn`` takes. ``cold`` marks a memory copy: 64 MiB of scratch are written first so the
    CPU caches hold none of the blocks (raw and tier copies start alike, as a real transfer of KV
    blocks does), and it is timed with ``MEMORY_CLOCK`` (disk and Redis always use wall time)."""
    clock = time.perf_counter
    if cold:
        if not _SCRATCH:
            _SCRATCH.append(np.empty(64 << 20, dtype=np.uint8))
        _SCRATCH[0].fill(1)
        clock = MEMORY_CLOCK["clock"]
    start = clock()
    fn()
    return clock() - start


SMALL_BLOCK = 16 << 10  # about one INT4 KV block: 64 tokens of one 256-dim KV head (Gemma 3 270M), K and V
SMALL_TOTAL = 8 << 20


def _mget_batch(block: int) -> int:
    """Blocks per MGET in the raw baselines: the batch RedisStore's read-ahead settles on."""
    return max(1, min(READ_AHEAD_BLOCKS, READ_AHEAD_BYTES // block))


def _small_blocks(payloads: list[bytes]) -> list[bytes]:
    """KV-block-sized pieces (8 MiB of them) of the benchmark's payloads, for the Redis round-trip rows."""
    data = b"".join(payloads)[:SMALL_TOTAL]
    return [data[i:i + SMALL_BLOCK] for i in range(0, len(data), SMALL_BLOCK)]


def raw_bandwidth(blocks: list[torch.Tensor], payloads: list[bytes], folder: Path, redis_url: str | None,
                  device: str) -> dict[str, float]:
    """GB/s of the plain machine doing what each tier does, with the same blocks, the same buffer
    policy and the same durability; what the tiers are compared against (see BASELINES)."""
    block, n = blocks[0].numel(), len(blocks)
    nbytes = n * block
    out: dict[str, float] = {}
    src = torch.cat(blocks)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm: the destination is resident, as a running tier's slab is
    out["memcpy"] = _gbps(nbytes, _timed(lambda: dst.copy_(src), cold=True))
    slots = dst.split(block)

    def per_block(targets, sources):
        for t, b in zip(targets, sources):
            t.copy_(b)
    out["memcpy_blocks_torch"] = _gbps(nbytes, _timed(lambda: per_block(slots, blocks), cold=True))
    np_slots, np_blocks = [t.numpy() for t in slots], [b.numpy() for b in blocks]
    # the routine the host tier uses for CPU copies (torch's copy_ splits a block over its threads)
    out["memcpy_blocks"] = _gbps(nbytes, _timed(lambda: [np.copyto(t, b) for t, b in zip(np_slots, np_blocks)],
                                                cold=True))
    out["memcpy_alloc"] = _gbps(nbytes, _timed(lambda: [b.clone() for b in blocks], cold=True))
    if device == "cuda":
        pinned = [b.pin_memory() for b in blocks]
        dev = torch.empty(nbytes, dtype=torch.uint8, device=device).split(block)
        per_block(dev, pinned)
        torch.cuda.synchronize()
        out["h2d_blocks"] = _gbps(nbytes, _timed(lambda: (per_block(dev, pinned), torch.cuda.synchronize()), cold=True))
        out["d2h_blocks"] = _gbps(nbytes, _timed(lambda: (per_block(pinned, dev), torch.cuda.synchronize()), cold=True))
    else:
        out["h2d_blocks"] = out["d2h_blocks"] = out["memcpy_blocks"]

    path = folder / "raw.bin"
    path.unlink(missing_ok=True)
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for p in payloads:
        os.write(fd, p)
    out["file_write"] = _gbps(nbytes, time.perf_counter() - start)
    os.fsync(fd)
    os.close(fd)
    out["file_write_fsync"] = _gbps(nbytes, time.perf_counter() - start)
    fd = os.open(path, os.O_RDONLY)
    out["file_read"] = _gbps(nbytes, _timed(lambda: [len(os.pread(fd, block, i * block)) for i in range(n)]))
    out["file_read_crc"] = _gbps(nbytes, _timed(lambda: [zlib.crc32(os.pread(fd, block, i * block))
                                                         for i in range(n)]))
    # the segment store's check: CRC32C (SSE4.2), several times cheaper than zlib's CRC32
    out["file_read_crc32c"] = _gbps(nbytes, _timed(lambda: [google_crc32c.value(os.pread(fd, block, i * block))
                                                            for i in range(n)]))
    # lent reads (BlockStore.read_with, what the app's recall and resume use): into one reused buffer
    scratch = memoryview(bytearray(block))
    scratch_array = np.frombuffer(scratch, dtype=np.uint8)  # google-crc32c takes no writable memoryview
    out["file_read_into_crc"] = _gbps(nbytes, _timed(lambda: [(os.preadv(fd, [scratch], i * block), zlib.crc32(scratch))
                                                              for i in range(n)]))
    out["file_read_into_crc32c"] = _gbps(nbytes, _timed(lambda: [(os.preadv(fd, [scratch], i * block),
                                                                  google_crc32c.value(scratch_array)) for i in range(n)]))
    # from the disk itself (page cache dropped): the raw bandwidth the disk tiers face on a cold read (after a
    # restart, or blocks spilled long ago); one file read in order, streamed by the kernel's read-ahead
    # (a WILLNEED of the whole file first measured slower)
    def read_cold() -> None:
        for i in range(n):
            os.preadv(fd, [scratch], i * block)
            google_crc32c.value(scratch_array)
    drop_cached([path])
    out["file_read_cold_crc32c"] = _gbps(nbytes, _timed(read_cold))
    os.close(fd)
    path.unlink()
    # for reference: the same write plus the CRC32C per block that every segment record stores
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for p in payloads:
        google_crc32c.value(p)
        os.write(fd, p)
    out["file_write_crc32c"] = _gbps(nbytes, time.perf_counter() - start)
    os.close(fd)
    path.unlink()
    # for reference, the disk tier's layout done plainly: a file per block (create, write, rename)
    files = folder / "raw-files"
    files.mkdir(exist_ok=True)

    def block_files(sync: bool) -> None:
        for i, p in enumerate(payloads):
            fd = os.open(files / f"{i}.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, p)
            if sync:
                os.fdatasync(fd)
            os.close(fd)
            os.replace(files / f"{i}.tmp", files / f"{i}.blk")
        if sync:
            fd = os.open(files, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    def read_block_files() -> None:  # the per-block layout read plainly from the disk: open, pread, CRC32
        for i in range(n):
            fd = os.open(files / f"{i}.blk", os.O_RDONLY)
            os.preadv(fd, [scratch], 0)
            zlib.crc32(scratch)
            os.close(fd)
    for sync in (False, True):
        out["block_files_fsync" if sync else "block_files"] = _gbps(nbytes, _timed(lambda: block_files(sync)))
        if sync:
            drop_cached([files])
            out["block_files_read_cold_crc"] = _gbps(nbytes, _timed(read_block_files))
        shutil.rmtree(files)
        files.mkdir()
    files.rmdir()

    if redis_url:
        import redis

        client = redis.Redis.from_url(redis_url)

        def set_all():
            pipe = client.pipeline(transaction=False)
            for i, p in enumerate(payloads):
                pipe.set(f"raw:{i}", p)
            pipe.execute()
        out["redis_set"] = _gbps(nbytes, _timed(set_all))
        out["redis_get"] = _gbps(nbytes, _timed(lambda: [len(client.get(f"raw:{i}")) for i in range(n)]))
        batch = _mget_batch(block)
        out["redis_mget"] = _gbps(nbytes, _timed(lambda: [client.mget([f"raw:{j}" for j in range(i, min(n, i + batch))])
                                                         for i in range(0, n, batch)]))
        client.delete(*[f"raw:{i}" for i in range(n)])
        small = _small_blocks(payloads)  # KV-block sized: a round trip is most of a GET
        pipe = client.pipeline(transaction=False)
        for i, p in enumerate(small):
            pipe.set(f"raw:s{i}", p)
        pipe.execute()
        small_bytes = sum(map(len, small))
        out["redis_get_small"] = _gbps(small_bytes, _timed(lambda: [client.get(f"raw:s{i}") for i in range(len(small))]))
        sb = _mget_batch(SMALL_BLOCK)
        out["redis_mget_small"] = _gbps(small_bytes, _timed(lambda: [
            client.mget([f"raw:s{j}" for j in range(i, min(len(small), i + sb))]) for i in range(0, len(small), sb)]))
        client.delete(*[f"raw:s{i}" for i in range(len(small))])
        client.close()
    return out


# which raw figure each tier pair is held against, and why that one is the fair ceiling
BASELINES = {
    "host<-process": ("memcpy_blocks", "per-block memcpy (numpy.copyto) into reused memory"),
    "host->device": ("h2d_blocks", "per-block copy into reused device memory"),
    "device->host": ("d2h_blocks", "per-block copy into reused host memory"),
    "host->disk": ("file_write_fsync", "one file, written block by block, then fsync"),
    "host->disk (no fsync)": ("file_write", "one file, written block by block, page cache"),
    "host->disk (no fsync, vs a file per block)": ("block_files", "a file per block created, written and renamed "
                                                                  "in one loop, page cache: the atomic per-block "
                                                                  "replace the tier's crash safety needs, done plainly"),
    "disk->host": ("file_read_crc", "pread per block into a new bytes object (page cache) + the CRC32 every "
                                    "plain block read must check"),
    "host->segment": ("file_write_fsync", "one file, written block by block, then fsync"),
    "host->segment (no fsync)": ("file_write", "one file, written block by block, page cache"),
    "segment->host": ("file_read_crc32c", "pread per block into a new bytes object (page cache) + the CRC32C "
                                          "the segment store checks on every plain read"),
    "disk->host (lent)": ("file_read_into_crc", "pread per block into one reused buffer (page cache) + CRC32"),
    "segment->host (lent)": ("file_read_into_crc32c", "pread per block into one reused buffer (page cache) + "
                                                      "CRC32C"),
    "disk->host (cold)": ("file_read_cold_crc32c", "one file read block by block from the disk (page cache "
                                                   "dropped) into one reused buffer + CRC32C: the disk streaming "
                                                   "one file, read ahead by the kernel"),
    "disk->host (cold, vs a file per block)": ("block_files_read_cold_crc", "a file per block opened and read from "
                                                                           "the disk (page cache dropped) + CRC32, "
                                                                           "in order, no hints"),
    "segment->host (cold)": ("file_read_cold_crc32c", "one file read block by block from the disk (page cache "
                                                      "dropped) into one reused buffer + CRC32C"),
    "host->redis": ("redis_set", "redis-py SET per block in one pipeline"),
    "redis->host": ("redis_get", "redis-py GET per block"),
    "redis->host (hinted)": ("redis_mget", "redis-py MGET of ~1 MiB of blocks at a time"),
    "redis->host (16 KiB blocks)": ("redis_get_small", "redis-py GET per 16 KiB block"),
    "redis->host (16 KiB blocks, hinted)": ("redis_mget_small", "redis-py MGET of 64 16 KiB blocks at a time"),
}


def _start_redis(folder: Path) -> tuple[subprocess.Popen, str] | None:
    if not shutil.which("redis-server") and not Path("/usr/bin/redis-server").exists():
        return None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(folder)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    store = RedisStore(url)
    for _ in range(100):
        try:
            store.ping()
            return proc, url
        except Exception:
            time.sleep(0.05)
    proc.kill()
    return None


def tier_pairs(blocks: list[torch.Tensor], payloads: list[bytes], folder: Path, redis_url: str | None,
               master: MasterKey, device: str) -> dict[str, dict]:
    """GB/s of moving the blocks between each tier pair. Memory tiers are timed on their second pass
    (slots reused, as in a running tier); disk puts are timed until written (page cache) and until
    flushed (fdatasync + folder fsync), reads from the page cache."""
    n = len(blocks)
    nbytes = n * blocks[0].numel()
    results: dict[str, dict] = {}

    dev, host = MemoryStore(device, tier="device"), MemoryStore("cpu", tier="host")
    for timed in (False, True):
        t_put = _timed(lambda: [host.put_tensor("s", f"b{i}", b) for i, b in enumerate(blocks)], cold=True)

        def up():
            for i in range(n):
                dev.put_tensor("s", f"b{i}", host.get_tensor("s", f"b{i}"))
            if device == "cuda":
                torch.cuda.synchronize()
        t_up = _timed(up, cold=True)
        t_down = _timed(lambda: [host.put_tensor("s", f"c{i}", dev.get_tensor("s", f"b{i}")) for i in range(n)],
                        cold=True)
        if timed:
            results["host<-process"] = {"gbps": _gbps(nbytes, t_put)}
            results["host->device"] = {"gbps": _gbps(nbytes, t_up)}
            results["device->host"] = {"gbps": _gbps(nbytes, t_down)}
        host.delete_session("s")
        dev.delete_session("s")
    results["host->device"]["slab_reserved_over_blocks"] = dev.stats()["reserved_bytes"] / nbytes

    def consume(blocks) -> list:
        """Read each block and let it go, as the raw baselines do (and as the app does: a block read is
        unpacked into tensors, then dropped). Keeping all of them (``--keep-reads``, how this bench timed
        reads before) times page-faulting 64 MiB of fresh memory too (glibc gives freed big buffers back),
        which the baselines never pay."""
        if KEEP_READS["keep"]:
            return list(blocks)
        for _ in blocks:
            pass
        return []

    def store_pair(name: str, make, reopen=None) -> None:
        for encrypted in (False, True):
            store = make()
            if encrypted:
                store = EncryptedStore(store, master)
            key = "encrypted" if encrypted else "plain"
            start = time.perf_counter()
            for i in range(n):
                store.put("s", f"b{i}", payloads[i])
            if name in ("disk", "segment"):
                store.inner.drain() if encrypted else store.drain()
                written = _gbps(nbytes, time.perf_counter() - start)
                results.setdefault(f"host->{name} (no fsync)", {})[key] = written
                if name == "disk":
                    results.setdefault("host->disk (no fsync, vs a file per block)", {})[key] = written
            store.flush()
            results.setdefault(f"host->{name}", {})[key] = _gbps(nbytes, time.perf_counter() - start)
            read = _timed(lambda: consume(store.get("s", f"b{i}") for i in range(n)))
            results.setdefault(f"{name}->host", {})[key] = _gbps(nbytes, read)
            ids = [f"b{i}" for i in range(n)]

            def hinted(ids: list[str]) -> None:  # read in order after will_read, as a resume reads
                store.will_read("s", ids)
                for block_id in ids:
                    store.read_with("s", block_id, len)
            if name == "redis":  # MGET batches
                results.setdefault("redis->host (hinted)", {})[key] = _gbps(nbytes, _timed(lambda: hinted(ids)))
                small = _small_blocks(payloads)
                for i, p in enumerate(small):
                    store.put("s", f"s{i}", p)
                store.flush()
                small_ids, small_bytes = [f"s{i}" for i in range(len(small))], sum(map(len, small))
                results.setdefault("redis->host (16 KiB blocks)", {})[key] = _gbps(
                    small_bytes, _timed(lambda: [store.read_with("s", b, len) for b in small_ids]))
                results.setdefault("redis->host (16 KiB blocks, hinted)", {})[key] = _gbps(
                    small_bytes, _timed(lambda: hinted(small_ids)))
            if name in ("disk", "segment"):  # lent: a view valid during the call (the app copies what it keeps)
                lent = _timed(lambda: [store.read_with("s", f"b{i}", len) for i in range(n)])
                results.setdefault(f"{name}->host (lent)", {})[key] = _gbps(nbytes, lent)
            if reopen is not None:  # from the disk: a store opened afresh (nothing mapped), page cache dropped,
                store.close()       # the blocks hinted (will_read) and read in order, as a resume reads them
                store = reopen()
                if encrypted:
                    store = EncryptedStore(store, master)
                    store.read_with("s", "b0", len)  # the data key: read once per source, not per block
                drop_cached([folder / name])
                figure = _gbps(nbytes, _timed(lambda: hinted(ids)))
                results.setdefault(f"{name}->host (cold)", {})[key] = figure
                if name == "disk":
                    results.setdefault("disk->host (cold, vs a file per block)", {})[key] = figure
            store.delete_session("s")
            store.close()

    store_pair("disk", lambda: DiskStore(folder / "disk"), lambda: DiskStore(folder / "disk"))

    def fresh_segments() -> SegmentStore:  # an empty log each time (not timed): no dead segments carried over
        shutil.rmtree(folder / "segment", ignore_errors=True)
        return SegmentStore(folder / "segment")
    store_pair("segment", fresh_segments, lambda: SegmentStore(folder / "segment"))
    if redis_url:
        store_pair("redis", lambda: RedisStore(redis_url))
    # pure AES-GCM throughput (one block key per block, as the store does)
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aes = AESGCM(os.urandom(32))
    results["aes-gcm"] = {"gbps": _gbps(nbytes, _timed(lambda: consume(aes.encrypt(os.urandom(12), p, b"aad")
                                                                       for p in payloads)))}
    # decryption into a reused buffer (what a lent read does), on one thread and split over two: the
    # second shows whether `cryptography` lets decryption run beside other Python threads (the GIL)
    nonce = os.urandom(12)
    sealed = [aes.encrypt(nonce, p, b"aad") for p in payloads]

    def decrypt(part: list[bytes]) -> None:
        out = bytearray(len(payloads[0]))
        for c in part:
            aes.decrypt_into(nonce, c, b"aad", out)

    one = _timed(lambda: decrypt(sealed))

    def two() -> None:
        threads = [threading.Thread(target=decrypt, args=(sealed[i::2],)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    split = _timed(two)
    busy = (time.process_time() - cpu_start) / (time.perf_counter() - wall_start)
    results["aes-gcm decrypt_into"] = {"gbps": _gbps(nbytes, one), "two_threads_gbps": _gbps(nbytes, split),
                                       "two_threads_cpu_per_wall": busy}
    return results


def measure(total: int, block: int, folder: Path, redis_url: str | None, master: MasterKey,
            repeat: int) -> tuple[dict[str, float], dict[str, dict], dict[str, dict]]:
    """Raw baselines and tier pairs, interleaved ``repeat`` times. GB/s figures are each one's best
    run (the machine is shared: the best run is the least disturbed); ratios (tier / raw, encryption
    cost) are the median over runs of the ratio within a run, where raw and tier ran back to back."""
    n = max(total // block, 1)
    blocks = [torch.randint(0, 255, (block,), dtype=torch.uint8) for _ in range(n)]
    payloads = [b.numpy().tobytes() for b in blocks]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    raw: dict[str, float] = {}
    pairs: dict[str, dict] = {}
    per_run: dict[str, dict[str, list[float]]] = {}
    for _ in range(repeat):
        run_raw = raw_bandwidth(blocks, payloads, folder, redis_url, device)
        for k, v in run_raw.items():
            raw[k] = max(raw.get(k, 0.0), v)
        for pair, figures in tier_pairs(blocks, payloads, folder, redis_url, master, device).items():
            best = pairs.setdefault(pair, {})
            for k, v in figures.items():
                best[k] = max(best.get(k, 0.0), v) if k != "slab_reserved_over_blocks" else v
            plain = figures.get("plain", figures.get("gbps"))
            ratios = per_run.setdefault(pair, {"over_raw": [], "encryption_cost": []})
            if pair in BASELINES and BASELINES[pair][0] in run_raw:
                ratios["over_raw"].append(plain / run_raw[BASELINES[pair][0]])
            if "encrypted" in figures:
                ratios["encryption_cost"].append(1 - figures["encrypted"] / plain)
    medians = {pair: {k: statistics.median(v) for k, v in r.items() if v} for pair, r in per_run.items()}
    return raw, pairs, medians


# ------------------------------------------------------------------------------------------------
# The host tier of the cold tier: plaintext vs sealed (issue 18)
# ------------------------------------------------------------------------------------------------

# cold blocks as the cache evicts them (64 tokens of one layer, its stored format's tensors)
HOST_BLOCKS = {
    "int4, Gemma 3 270M (1 KV head x 256)": {
        **{f"{kv}_codes": ((1, 64, 1, 128), torch.uint8) for kv in "kv"},
        **{f"{kv}_{p}": ((1, 1, 64, 2), torch.float16) for kv in "kv" for p in ("scales", "zeros")}},
    "fp16, Gemma 3 270M (1 KV head x 256)": {kv: ((1, 64, 1, 256), torch.float16) for kv in "kv"},
    "fp16, 7B (8 KV heads x 128)": {kv: ((1, 64, 8, 128), torch.float16) for kv in "kv"},
}


def host_recall(total: int, repeat: int, master: MasterKey) -> dict[str, dict]:
    """Seconds per block of the host tier's three jobs, plaintext slab vs sealed slab, interleaved ``repeat``
    times: evict (ColdTier.evict: pack + put on the host), recall (ColdTier.fetch: read + unpack into
    tensors, what a decode-step recall does), stage (the prefetcher's move host -> device slab). Per-block
    figures are each one's best run; the cost is the median over runs of sealed / plain - 1."""
    out: dict[str, dict] = {}
    for name, spec in HOST_BLOCKS.items():
        payloads = [{t: (torch.randint(0, 255, shape, dtype=torch.uint8) if dtype == torch.uint8
                         else torch.randn(shape).to(dtype)) for t, (shape, dtype) in spec.items()} for _ in range(4)]
        block_bytes = len(pack_block(payloads[0]))
        n = max(16, total // block_bytes)
        per_run: dict[str, dict[str, list[float]]] = {job: {"plain": [], "sealed": []}
                                                      for job in ("evict", "recall", "stage")}
        for _ in range(repeat):
            for sealed in (False, True):
                host = MemoryStore("cpu", tier="host")
                tiers = {Tier.DEVICE: MemoryStore("cpu", tier="device"),
                         Tier.HOST: EncryptedStore(host, master) if sealed else host}
                # every read here is a miss by design: a window no run fills keeps the placement out of fallback
                placement = TierPlacement(tiers, "bench.cold", WatermarkController(1 << 40), PlacementPolicy(),
                                          HitRateWindow(window=1 << 30))
                cold = ColdTier(placement, prefetch=False, source="mic")
                ids = [ColdTier.block_id(0, i, 0) for i in range(n)]
                for i in range(n):  # warm: the slab's chunks exist, as in a running meeting (not timed)
                    cold.evict(0, i, 0, payloads[i % 4], 1.0, 0)
                placement.forget(ids)
                key = "sealed" if sealed else "plain"
                runs = per_run
                runs["evict"][key].append(_timed(lambda: [cold.evict(0, i, 0, payloads[i % 4], 1.0, 0)
                                                          for i in range(n)], cold=True) / n)
                runs["recall"][key].append(_timed(lambda: [cold.fetch(b) for b in ids], cold=True) / n)
                runs["stage"][key].append(_timed(lambda: [placement.move(b, Tier.DEVICE) for b in ids], cold=True) / n)
                cold.close()
        for job, runs in per_run.items():
            costs = [s / p - 1 for p, s in zip(runs["plain"], runs["sealed"])]
            out[f"{job}: {name}"] = {"block_bytes": block_bytes, "blocks": n,
                                     "plain_us": 1e6 * min(runs["plain"]), "sealed_us": 1e6 * min(runs["sealed"]),
                                     "cost": statistics.median(costs), "costs": costs}
    return out


def host_recall_table(rows: dict[str, dict], command: str, machine: str, clock: str, repeat: int) -> str:
    lines = [f"Machine: {machine}. Command: `{command}`. {repeat} interleaved runs (plain, sealed, plain, ...); "
             f"us per block: best run; cost: median over runs of sealed / plain - 1. Clock: {clock}.", "",
             "| job: block | packed bytes | blocks | plain us/block | sealed us/block | sealed GB/s | best / best - 1 "
             "| cost (median) | cost per run, min..max |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['block_bytes']} | {r['blocks']} | {r['plain_us']:.1f} | {r['sealed_us']:.1f} | "
                     f"{r['block_bytes'] / r['sealed_us'] / 1e3:.2f} | {r['sealed_us'] / r['plain_us'] - 1:+.0%} | "
                     f"{r['cost']:+.0%} | {min(r['costs']):+.0%}..{max(r['costs']):+.0%} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# QMSum replay
# ------------------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9']+")
_STOP = set("the a an and or of to in on for is are was were be it that this with as at by from we i you they "
            "he she what how why when which who did does do about discuss discussed discussion summarize "
            "meeting".split())


def _terms(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


class TfIdf:
    def __init__(self, docs: list[str]) -> None:
        self.docs = [collections.Counter(_terms(d)) for d in docs]
        df = collections.Counter(t for d in self.docs for t in d)
        self.idf = {t: math.log((1 + len(docs)) / (1 + c)) + 1 for t, c in df.items()}
        self.norms = [math.sqrt(sum((c * self.idf[t]) ** 2 for t, c in d.items())) or 1.0 for d in self.docs]

    def scores(self, query: str) -> list[float]:
        q = collections.Counter(_terms(query))
        return [sum(c * q[t] * self.idf[t] ** 2 for t, c in d.items() if t in q) / n for d, n in zip(self.docs, self.norms)]


def replay(data: Path, meetings: int, block_words: int, block_bytes: int, reads: int, steps: int,
           folder: Path, master: MasterKey) -> dict:
    files = sorted(data.glob("*.json"))[:meetings]
    hits = requests = 0
    step_times: list[float] = []
    per_meeting = []
    peak_ratio = 0.0
    for path in files:
        meeting = json.loads(path.read_text())
        words = " ".join(f"{t['speaker']}: {t['content']}" for t in meeting["meeting_transcripts"]).split()
        texts = [" ".join(words[i:i + block_words]) for i in range(0, len(words), block_words)]
        index = TfIdf(texts)
        cap = max(int(0.25 * len(texts)), reads) * block_bytes
        tiers = {Tier.DEVICE: MemoryStore("cuda" if torch.cuda.is_available() else "cpu", tier="device"),
                 Tier.HOST: MemoryStore("cpu", tier="host"),
                 Tier.DISK: EncryptedStore(DiskStore(folder / path.stem), master)}
        placement = TierPlacement(tiers, path.stem, WatermarkController(cap, target=0.85, band=0.05),
                                  PlacementPolicy(host_bytes=int(0.25 * len(texts)) * block_bytes),
                                  HitRateWindow(window=10_000))
        payload = os.urandom(block_bytes)
        for i in range(len(texts)):
            placement.put(f"b{i}", payload, score=0.0)
        placement.rebalance()
        prefetcher = Prefetcher(placement, top_k=max(1, int(0.85 * cap / block_bytes)))
        m_hits = m_req = 0
        for query in meeting["specific_query_list"]:
            answer = query["answer"].split()
            current = index.scores(query["query"])
            for step in range(1, steps + 1):
                # predict from the current query's block scores, copy while the "step computes"
                ranked = sorted(range(len(texts)), key=lambda i: -current[i])
                prefetcher.request([f"b{i}" for i in ranked[:prefetcher.top_k]])
                nxt = index.scores(query["query"] + " " + " ".join(answer[: len(answer) * step // steps]))
                wanted = sorted(range(len(texts)), key=lambda i: -nxt[i])[:reads]
                start = time.perf_counter()
                prefetcher.wait()
                for i in wanted:
                    on_device = placement.blocks[f"b{i}"].tier == Tier.DEVICE
                    placement.read(f"b{i}")
                    m_hits += on_device
                    m_req += 1
                step_times.append(time.perf_counter() - start)
                placement.update_scores({f"b{i}": nxt[i] for i in range(len(texts))})
                peak_ratio = max(peak_ratio, placement.tier_bytes()["device"] / cap)
                current = nxt
        prefetcher.close()
        hits += m_hits
        requests += m_req
        per_meeting.append({"meeting": path.stem, "blocks": len(texts), "hit_rate": m_hits / max(m_req, 1),
                            "mode": placement.mode, "peak_device_over_cap": placement.controller.peak_bytes / cap})
        for store in tiers.values():
            store.close()
    step_times.sort()
    return {
        "meetings": per_meeting,
        "hit_rate": hits / max(requests, 1),
        "reads": requests,
        "decode_step_ms_median": 1000 * step_times[len(step_times) // 2] if step_times else 0.0,
        "decode_step_ms_p95": 1000 * step_times[int(0.95 * (len(step_times) - 1))] if step_times else 0.0,
        "peak_device_over_cap": max(m["peak_device_over_cap"] for m in per_meeting) if per_meeting else 0.0,
    }


def write_report(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "tiers.json").write_text(json.dumps(results, indent=2))
    raw = results["raw"]
    lines = [f"Machine: {results['machine']}. Command: `{results['command']}`. Load average before / after: "
             f"{results['load_before']} / {results['load_after']}. {results['repeat']} interleaved runs: GB/s are "
             f"each figure's best run; plain / raw and encryption cost are medians of the per-run ratios. Memory "
             f"copies timed with {results['memory_clock']}, disk and Redis with wall time. Tier reads "
             f"{'keep every block until the pass ends' if results.get('keep_reads') else 'let each block go, as the raw baselines do'}.", "",
             "| transfer | plain GB/s | encrypted GB/s | raw baseline | raw GB/s | plain / raw | encryption cost |",
             "|---|---|---|---|---|---|---|"]
    for pair, r in results["pairs"].items():
        name = BASELINES.get(pair, ("-", ""))[0]
        ratio = results["ratios"].get(pair, {})
        over = f"{ratio['over_raw']:.0%}" if "over_raw" in ratio else "-"
        cost = f"{ratio['encryption_cost']:.0%}" if "encryption_cost" in ratio else "-"
        ceiling = f"{raw[name]:.3f}" if name in raw else "-"
        enc = f"{r['encrypted']:.3f}" if "encrypted" in r else "-"
        lines.append(f"| {pair} | {r.get('plain', r.get('gbps')):.3f} | {enc} | {name} | {ceiling} | {over} | {cost} |")
    lines += ["", "Raw baselines (same blocks, same buffer policy, same durability as the tier they face):", ""]
    lines += [f"- {name} = {raw[name]:.3f} GB/s: {why}" for name, why in
              {v[0]: v[1] for v in BASELINES.values()}.items() if name in raw]
    lines += [f"- for reference: memcpy of all blocks in one call {raw['memcpy']:.3f} GB/s; a copy into a fresh "
              f"{results['block_kib']} KiB buffer per block (what the memory tiers did before the slab) "
              f"{raw['memcpy_alloc']:.3f} GB/s; torch copy_ per block into reused memory (intra-op threads) "
              f"{raw['memcpy_blocks_torch']:.3f} GB/s"]
    if "block_files_fsync" in raw:
        lines += [f"- for reference, a file per block with an fdatasync each, one at a time: "
                  f"{raw['block_files_fsync']:.3f} GB/s (the tier issues its fdatasyncs concurrently)"]
    for pair in ("disk->host", "segment->host"):
        if pair in results["pairs"]:
            r = results["pairs"][pair]
            lines += [f"- {pair} against pread alone (file_read {raw['file_read']:.3f} GB/s, no checksum): plain "
                      f"{r['plain'] / raw['file_read']:.0%}, encrypted {r['encrypted'] / raw['file_read']:.0%} (encrypted "
                      f"reads skip the CRC: the GCM tag covers every byte)"]
    if "host->segment (no fsync)" in results["pairs"] and "file_write_crc32c" in raw:
        r = results["pairs"]["host->segment (no fsync)"]
        ceiling = raw["file_write_crc32c"]
        lines += [f"- host->segment (no fsync) against the same write plus the CRC32C each record stores "
                  f"(file_write_crc32c {ceiling:.3f} GB/s): plain {r['plain'] / ceiling:.0%}, encrypted "
                  f"{r['encrypted'] / ceiling:.0%} (best runs)"]
    if "segment->host" in results["pairs"]:
        lines += ["- the segment store checks CRC32C (SSE4.2), faced by file_read_crc32c; file_read_crc uses zlib's "
                  "CRC32, the check the per-block files carry"]
    dec = results["pairs"].get("aes-gcm decrypt_into")
    if dec:
        busy = dec.get("two_threads_cpu_per_wall")
        parallel = busy is not None and busy > 1.5
        lines += [f"- AES-256-GCM decryption into a reused buffer: {dec['gbps']:.3f} GB/s on one thread, "
                  f"{dec['two_threads_gbps']:.3f} GB/s split over two threads"
                  + (f", which kept {busy:.2f} cores busy" if busy is not None else "")
                  + (" (cryptography lets go of the GIL while it decrypts: one reader is bound by one core's AES, "
                     "readers on two threads by two)" if parallel else
                     " (the second thread did not run beside the first: the GIL, or a busy core)")]
    rp = results["replay"]
    lines += ["", "| QMSum replay | value |", "|---|---|",
              f"| meetings / block reads | {len(rp['meetings'])} / {rp['reads']} |",
              f"| prefetch hit rate (25% of blocks on device) | {rp['hit_rate']:.1%} |",
              f"| decode-step time, median / p95 (ms) | {rp['decode_step_ms_median']:.2f} / {rp['decode_step_ms_p95']:.2f} |",
              f"| peak device bytes / cap (target 85%) | {rp['peak_device_over_cap']:.0%} |",
              f"| modes at the end | {', '.join(sorted({m['mode'] for m in rp['meetings']}))} |"]
    (out / "tiers.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    pairs = [p for p in results["pairs"] if p in BASELINES]
    x = range(len(pairs))
    plain = [results["pairs"][p].get("plain", results["pairs"][p].get("gbps")) for p in pairs]
    ax1.bar([i - 0.2 for i in x], plain, 0.4, label="plain")
    ax1.bar([i + 0.2 for i in x], [results["pairs"][p].get("encrypted", 0.0) for p in pairs], 0.4, label="AES-256-GCM")
    ax1.scatter(list(x), [raw.get(BASELINES[p][0], float("nan")) for p in pairs], marker="_", s=400, c="k",
                zorder=3, label="raw baseline")
    ax1.set_yscale("log")
    ax1.set_xticks(list(x), pairs, rotation=30, ha="right", fontsize=8)
    ax1.set_ylabel("GB/s")
    ax1.set_title("tier transfer bandwidth")
    ax1.legend()
    ax2.bar([m["meeting"] for m in rp["meetings"]], [m["hit_rate"] for m in rp["meetings"]])
    ax2.axhline(0.8, ls="--", c="gray", label="target 80%")
    ax2.set_ylim(0, 1)
    ax2.set_title("prefetch hit rate per QMSum meeting")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(out / "tiers.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("out/tiers"))
    parser.add_argument("--mib", type=int, default=64, help="bytes per transfer test")
    parser.add_argument("--block-kib", type=int, default=256, help="block size (a 64-token block of a 7B layer: 256)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--meetings", type=int, default=5)
    parser.add_argument("--block-words", type=int, default=48)
    parser.add_argument("--replay-block-kib", type=int, default=64)
    parser.add_argument("--reads", type=int, default=8, help="blocks read per decode step")
    parser.add_argument("--steps", type=int, default=16, help="decode steps per question")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of the transfer tests (best kept)")
    parser.add_argument("--keep-reads", action="store_true",
                        help="keep every block a tier read returns until the pass ends (the raw baselines still "
                             "drop theirs): how reads were timed before; adds fresh-memory page faults")
    parser.add_argument("--only", choices=("host-recall",),
                        help="run one part alone: host-recall = the cold tier's host memory, plaintext vs sealed "
                             "(evict, recall, stage per block; writes host_recall.json / .md into --out)")
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall",
                        help="clock for the memory copies (raw and tier alike): wall time, or the thread's CPU time, "
                             "which leaves out time the scheduler gave other jobs on a shared machine (CPU-only "
                             "runs; with CUDA wall time is used)")
    args = parser.parse_args()
    KEEP_READS["keep"] = args.keep_reads
    if args.clock == "thread" and not torch.cuda.is_available():
        MEMORY_CLOCK["clock"] = time.thread_time
    machine = f"{os.cpu_count()}-core CPU, " + (torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")
    if args.only == "host-recall":
        command = "python bench/tiers.py " + " ".join(sys.argv[1:])
        rows = host_recall(args.mib << 20, args.repeat, MasterKey(os.urandom(32)))
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "host_recall.json").write_text(json.dumps({"machine": machine, "command": command,
                                                               "clock": MEMORY_CLOCK["clock"].__name__, "rows": rows},
                                                              indent=2))
        table = host_recall_table(rows, command, machine, MEMORY_CLOCK["clock"].__name__, args.repeat)
        (args.out / "host_recall.md").write_text(table)
        print(table)
        return
    with tempfile.TemporaryDirectory(dir=args.out.parent if args.out.parent.exists() else None) as tmp:
        folder = Path(tmp)
        master = MasterKey(os.urandom(32))
        redis = _start_redis(folder)
        try:
            load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
            raw, pairs, ratios = measure(args.mib << 20, args.block_kib << 10, folder, redis[1] if redis else None,
                                         master, args.repeat)
            results = {
                "machine": machine, "platform": platform.platform(),
                "command": "python bench/tiers.py " + " ".join(sys.argv[1:]),
                "block_kib": args.block_kib, "repeat": args.repeat, "load_before": load_before,
                "memory_clock": MEMORY_CLOCK["clock"].__name__, "keep_reads": args.keep_reads,
                "raw": raw, "baselines": {pair: name for pair, (name, _) in BASELINES.items()}, "pairs": pairs,
                "ratios": ratios,
                "replay": replay(args.data, args.meetings, args.block_words, args.replay_block_kib << 10, args.reads,
                                 args.steps, folder / "replay", master),
                "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            }
        finally:
            if redis:
                redis[0].terminate()
                redis[0].wait(timeout=10)
    write_report(results, args.out)
    print((args.out / "tiers.md").read_text())


if __name__ == "__main__":
    main()
