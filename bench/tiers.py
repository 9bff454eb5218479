#!/usr/bin/env python
"""Tier benchmark: transfer bandwidth per tier pair, encryption overhead, prefetch on QMSum replays.

Usage (from the repository root)::

    python bench/tiers.py --out out/tiers                       # defaults: 64 MiB per transfer test
    python bench/tiers.py --mib 16 --meetings 3 --out /tmp/tiers # small run

1. Raw bandwidth of this machine measured in the same run: a torch memory copy, and a file write +
   read of the same bytes (page cache, no fsync) -- the ceilings the tiers are compared against.
2. Tier pairs, whole blocks (``--block-kib``): device<->host (MemoryStore), host->disk / disk->host
   (DiskStore, write-behind then flush; mmap reads), host->redis / redis->host (a redis-server the
   bench starts on a loopback port), each with and without AES-256-GCM (kvstore.crypto) for disk/Redis.
3. QMSum replays (``--data``): each meeting's transcript is cut into blocks of ``--block-words``
   words; 25% of the blocks' bytes fit the device (watermark target 85% of that cap). For each
   specific query, decode step t reads the top ``--reads`` blocks by TF-IDF score against the query
   plus the first t/steps of the gold answer (the "current query" grows as the answer is written);
   before step t the prefetcher moves up the blocks predicted from step t-1's scores. Reported: hit
   rate, decode-step time (block reads + waiting for the prefetch), peak device bytes vs cap.

Writes tiers.json, tiers.md and tiers.png into --out.
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
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvstore.crypto import EncryptedStore, MasterKey  # noqa: E402
from kvstore.placement import HitRateWindow, PlacementPolicy, Prefetcher, Tier, TierPlacement, WatermarkController  # noqa: E402
from kvstore.stores.disk import DiskStore  # noqa: E402
from kvstore.stores.memory import MemoryStore  # noqa: E402
from kvstore.stores.redis_store import RedisStore  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "qmsum" / "val"


def _gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else float("inf")


def raw_bandwidth(total: int, folder: Path) -> dict[str, float]:
    src = torch.randint(0, 255, (total,), dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start = time.perf_counter()
    for _ in range(3):
        dst.copy_(src)
    memcpy = _gbps(3 * total, time.perf_counter() - start)
    chunks = src.split(256 << 10)
    start = time.perf_counter()
    for chunk in chunks:  # what a tier put does: a fresh buffer per block (allocation + page faults)
        chunk.clone()
    memcpy_alloc = _gbps(total, time.perf_counter() - start)
    path = folder / "raw.bin"
    data = src.numpy().tobytes()
    start = time.perf_counter()
    with open(path, "wb") as f:
        f.write(data)
    write = _gbps(total, time.perf_counter() - start)
    start = time.perf_counter()
    with open(path, "rb") as f:
        f.read()
    read = _gbps(total, time.perf_counter() - start)
    path.unlink()
    return {"memcpy": memcpy, "memcpy_alloc": memcpy_alloc, "file_write": write, "file_read": read}


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


def tier_pairs(total: int, block: int, folder: Path, redis_url: str | None, master: MasterKey) -> dict[str, dict]:
    """GB/s of moving ``total`` bytes as ``block``-byte blocks between each tier pair."""
    n = max(total // block, 1)
    blocks = [torch.randint(0, 255, (block,), dtype=torch.uint8) for _ in range(n)]
    payloads = [b.numpy().tobytes() for b in blocks]
    nbytes = n * block
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results: dict[str, dict] = {}

    dev, host = MemoryStore(device, tier="device"), MemoryStore("cpu", tier="host")
    start = time.perf_counter()
    for i, b in enumerate(blocks):
        host.put_tensor("s", f"b{i}", b)
    results["host<-process"] = {"gbps": _gbps(nbytes, time.perf_counter() - start)}
    start = time.perf_counter()
    for i in range(n):
        dev.put_tensor("s", f"b{i}", host.get_tensor("s", f"b{i}"))
    if device == "cuda":
        torch.cuda.synchronize()
    results["host->device"] = {"gbps": _gbps(nbytes, time.perf_counter() - start)}
    start = time.perf_counter()
    for i in range(n):
        host.put_tensor("s", f"c{i}", dev.get_tensor("s", f"b{i}"))
    results["device->host"] = {"gbps": _gbps(nbytes, time.perf_counter() - start)}

    def store_pair(name: str, make) -> None:
        for encrypted in (False, True):
            store = make()
            if encrypted:
                store = EncryptedStore(store, master)
            start = time.perf_counter()
            for i in range(n):
                store.put("s", f"b{i}", payloads[i])
            store.flush()
            write = time.perf_counter() - start
            start = time.perf_counter()
            for i in range(n):
                store.get("s", f"b{i}")
            read = time.perf_counter() - start
            key = "encrypted" if encrypted else "plain"
            results.setdefault(f"host->{name}", {})[key] = _gbps(nbytes, write)
            results.setdefault(f"{name}->host", {})[key] = _gbps(nbytes, read)
            store.delete_session("s")
            store.close()

    disk_root = folder / "disk"
    store_pair("disk", lambda: DiskStore(disk_root))
    if redis_url:
        store_pair("redis", lambda: RedisStore(redis_url))
    # pure AES-GCM throughput (one block key per block, as the store does)
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aes = AESGCM(os.urandom(32))
    start = time.perf_counter()
    for p in payloads:
        aes.encrypt(os.urandom(12), p, b"aad")
    results["aes-gcm"] = {"gbps": _gbps(nbytes, time.perf_counter() - start)}
    return results


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
    lines = [f"Machine: {results['machine']}. Command: `{results['command']}`", "",
             "| transfer | plain GB/s | encrypted GB/s | raw ceiling GB/s | plain / raw | encryption cost |",
             "|---|---|---|---|---|---|"]
    for pair, r in results["pairs"].items():
        if "plain" in r:
            ceiling = raw["file_write"] if pair.startswith("host->disk") else raw["file_read"] if pair.startswith("disk") \
                else raw["memcpy"]
            cost = 1 - r["encrypted"] / r["plain"]
            lines.append(f"| {pair} | {r['plain']:.3f} | {r['encrypted']:.3f} | {ceiling:.3f} | "
                         f"{r['plain'] / ceiling:.0%} | {cost:.0%} |")
        else:
            lines.append(f"| {pair} | {r['gbps']:.3f} | - | {raw['memcpy']:.3f} | {r['gbps'] / raw['memcpy']:.0%} | - |")
    rp = results["replay"]
    lines += ["", f"Raw: memcpy {raw['memcpy']:.2f} GB/s (into a reused buffer; {raw['memcpy_alloc']:.3f} GB/s into a "
                  f"fresh 256 KiB buffer per block), file write {raw['file_write']:.2f} GB/s, "
                  f"file read {raw['file_read']:.2f} GB/s.", "",
              "| QMSum replay | value |", "|---|---|",
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
    pairs = [p for p, r in results["pairs"].items() if "plain" in r]
    x = range(len(pairs))
    ax1.bar([i - 0.2 for i in x], [results["pairs"][p]["plain"] for p in pairs], 0.4, label="plain")
    ax1.bar([i + 0.2 for i in x], [results["pairs"][p]["encrypted"] for p in pairs], 0.4, label="AES-256-GCM")
    ax1.axhline(raw["file_write"], ls="--", c="gray", label="raw file write")
    ax1.set_xticks(list(x), pairs, rotation=20)
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
    args = parser.parse_args()
    machine = f"{os.cpu_count()}-core CPU, " + (torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")
    with tempfile.TemporaryDirectory(dir=args.out.parent if args.out.parent.exists() else None) as tmp:
        folder = Path(tmp)
        master = MasterKey(os.urandom(32))
        redis = _start_redis(folder)
        try:
            results = {
                "machine": machine, "platform": platform.platform(),
                "command": "python bench/tiers.py " + " ".join(sys.argv[1:]),
                "raw": raw_bandwidth(args.mib << 20, folder),
                "pairs": tier_pairs(args.mib << 20, args.block_kib << 10, folder, redis[1] if redis else None, master),
                "replay": replay(args.data, args.meetings, args.block_words, args.replay_block_kib << 10, args.reads,
                                 args.steps, folder / "replay", master),
            }
        finally:
            if redis:
                redis[0].terminate()
                redis[0].wait(timeout=10)
    write_report(results, args.out)
    print((args.out / "tiers.md").read_text())


if __name__ == "__main__":
    main()
