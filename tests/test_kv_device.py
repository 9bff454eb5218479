"""The tiered KV cache end to end on each available device: CPU here, CUDA on a GPU machine.

Why: the CUDA paths of the tiers (a device slab, a pinned host slab, the prefetch worker's side stream,
unpacking a staged block from its device slot, Triton decode over the pools) differ from the CPU ones
and CI has no GPU. Each test runs the same steps on every device, so the CPU run checks the test itself
and ``bench/gpu_check.sh`` runs the CUDA one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from kvstore.attention import MINUTIA_ATTENTION
from kvstore.cache import TieredCache
from kvstore.cold import ColdTier
from kvstore.crypto import EncryptedStore, MasterKey
from kvstore.persist import load_session, save_session
from kvstore.placement import PlacementPolicy, Tier, TierPlacement
from kvstore.tier_guards import WatermarkController
from kvstore.stores.base import pack_block, unpack_block
from kvstore.stores.memory import MemoryStore
from kvstore.stores.segment import SegmentStore

try:
    from kv_helpers import feed, tiny_model, token_ids
    from test_kv_cold import SETTINGS, _probe
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids
    from tests.test_kv_cold import SETTINGS, _probe

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")),
]


def _cold_tier(tmp_path: Path, device: str) -> ColdTier:
    """Device slab on ``device``, host slab (pinned when CUDA is present), encrypted segment log below."""
    tiers = {Tier.DEVICE: MemoryStore(device, tier="device"), Tier.HOST: MemoryStore("cpu", tier="host"),
             Tier.DISK: EncryptedStore(SegmentStore(tmp_path / "cold"), MasterKey.generate(tmp_path / "master.key"))}
    placement = TierPlacement(tiers, "meeting", WatermarkController(1 << 20), PlacementPolicy(host_bytes=16 << 10))
    return ColdTier(placement, recall_top_k=4)


def _meeting(tmp_path: Path, device: str, cold: bool = True):
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0).to(device)
    cache = TieredCache(config=model.config, **SETTINGS)
    tier = _cold_tier(tmp_path, device) if cold else None
    cache.attach_cold_tier(tier)
    feed(model, cache, token_ids(320).to(device), chunk=32)
    return model, cache, tier


@pytest.mark.parametrize("device", DEVICES)
def test_a_staged_block_is_unpacked_from_its_device_slot(device: str) -> None:
    tensors = {"k": torch.randn(8, 2, 16), "codes": torch.randint(0, 255, (8, 2, 8), dtype=torch.uint8)}
    blob = pack_block(tensors, fmt=2)
    slab = MemoryStore(device, tier="device")
    slab.put("s", "b", blob)
    got, attrs = unpack_block(slab.get_tensor("s", "b"), device=device)
    assert attrs == {"fmt": 2}
    for name, value in tensors.items():
        assert got[name].device.type == torch.device(device).type
        assert torch.equal(got[name].cpu(), value)
    assert slab.get("s", "b") == blob


@pytest.mark.parametrize("device", DEVICES)
def test_blocks_come_up_from_the_encrypted_log_byte_exact(tmp_path: Path, device: str) -> None:
    """Disk -> device moves: lent, decrypted reads into the slab (on CUDA through the pinned double
    buffers, asynchronously); many in a row, so a staging buffer is refilled while a copy may run."""
    tiers = {Tier.DEVICE: MemoryStore(device, tier="device"),
             Tier.DISK: EncryptedStore(SegmentStore(tmp_path / "log"), MasterKey(os.urandom(32)))}
    placement = TierPlacement(tiers, "m", WatermarkController(64 << 20))
    blobs = {f"b{i}": os.urandom(50_000 + 997 * i) for i in range(12)}
    for block_id, blob in blobs.items():
        assert placement.put_cold(block_id, blob, score=0.0) == Tier.DISK
    tiers[Tier.DISK].flush()
    assert all(placement.move(b, Tier.DEVICE) for b in blobs)
    if device == "cuda":
        torch.cuda.synchronize()
    for block_id, blob in blobs.items():
        assert placement.tier_of(block_id) == Tier.DEVICE
        assert tiers[Tier.DEVICE].get("m", block_id) == blob


@pytest.mark.parametrize("device", DEVICES)
def test_evicted_blocks_are_staged_recalled_and_rolled_back_on_the_device(tmp_path: Path, device: str) -> None:
    model, cache, tier = _meeting(tmp_path, device)
    placement = tier.placement
    assert sum(len(layer.cold) for layer in cache.tiered_layers) > 0, "the budget must have evicted blocks"
    assert placement.stats()["bytes_per_tier"]["disk"] > 0, "past the host budget, blocks go to the encrypted log"
    probe = token_ids(5, seed=7).to(device)
    before = _probe(model, cache, probe)

    checkpoint = cache.checkpoint()
    feed(model, cache, token_ids(6, seed=3).to(device))  # the question stages the cold blocks it ranks high
    tier.wait()
    staged = [b for b, info in placement.blocks.items() if info.tier == Tier.DEVICE]
    assert staged, "the prefetch worker staged blocks on the device"
    for step in range(4):
        feed(model, cache, token_ids(1, seed=20 + step).to(device))
    assert tier.counts.recalled > 0 and placement.hits.total_hits > 0
    for layer in cache.tiered_layers:
        for pool in layer.pools.values():
            for t in pool.tensors.values():
                assert t.device.type == torch.device(device).type, "recalled blocks land in the device pools"
    cache.rollback(checkpoint)
    assert (_probe(model, cache, probe) - before).abs().max().item() <= 1e-5


@pytest.mark.parametrize("device", DEVICES)
def test_a_meeting_saved_on_the_device_resumes_with_the_same_logits(tmp_path: Path, device: str) -> None:
    model, cache, _ = _meeting(tmp_path, device)
    store = EncryptedStore(SegmentStore(tmp_path / "sessions"), MasterKey.generate(tmp_path / "sessions.key"))
    save_session(store, "standup", cache)
    probe = token_ids(5, seed=7).to(device)
    before = _probe(model, cache, probe)
    store.close()
    reopened = EncryptedStore(SegmentStore(tmp_path / "sessions"), MasterKey.load(tmp_path / "sessions.key"))
    resumed, _ = load_session(reopened, "standup", model.config, settings=cache.settings, device=device,
                              cold_tier=_cold_tier(tmp_path / "second", device))
    assert (_probe(model, resumed, probe) - before).abs().max().item() <= 1e-5
    reopened.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_cuda_cache_decodes_like_the_cpu_one(tmp_path: Path, monkeypatch) -> None:
    """Same meeting: Triton over device pools (TF32 dots) against the torch reference on the CPU (fp32).
    The budget decisions come from attention scores, so they are compared first: a near-tie decided
    differently on the two devices shows up as such, not as a vague logit difference."""
    logits, tables = {}, {}
    for device in ("cpu", "cuda"):
        monkeypatch.setenv("MINUTIA_KERNELS", "reference" if device == "cpu" else "auto")
        model, cache, _ = _meeting(tmp_path / device, device)
        tables[device] = [layer.table.block_index.cpu() for layer in cache.tiered_layers]
        logits[device] = _probe(model, cache, token_ids(5, seed=7).to(device))
    for layer, (a, b) in enumerate(zip(tables["cpu"], tables["cuda"])):
        assert torch.equal(a, b), f"layer {layer}: the devices kept different blocks"
    scale = max(1.0, logits["cpu"].abs().max().item())
    assert (logits["cpu"] - logits["cuda"]).abs().max().item() <= 1e-2 * scale
