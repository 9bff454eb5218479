"""The host tier of the cold tier, sealed: no plaintext K/V in host memory, exact recall, tampering refused,
a source crypto-shredded there too, and the placement counting the bytes the tier really holds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvstore.attention import MINUTIA_ATTENTION
from kvstore.cache import TieredCache
from kvstore.manager import KVCacheManager
from kvstore.cold import ColdTier
from kvstore.crypto import EncryptedStore, MasterKey, MissingKeyError, TamperedBlock
from kvstore.placement import PlacementPolicy, Tier, TierPlacement
from kvstore.tier_guards import WatermarkController
from kvstore.stores.base import BlockNotFound, pack_block
from kvstore.stores.disk import DiskStore
from kvstore.stores.memory import MemoryStore

try:
    from kv_helpers import feed, tiny_model, token_ids
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids

SETTINGS = dict(block_size=8, compress=True, budget_ratio=0.3, warm_kinds=("int4",), sink_tokens=4,
                recent_tokens=16, allow_drop=True)
MASTER = MasterKey(bytes(range(32)))


def _cold(sealed: bool, source: str = "mic", host_bytes: int | None = None, disk: Path | None = None) -> ColdTier:
    host = MemoryStore("cpu", tier="host")
    tiers = {Tier.DEVICE: MemoryStore("cpu", tier="device"),
             Tier.HOST: EncryptedStore(host, MASTER) if sealed else host}
    if disk is not None:
        tiers[Tier.DISK] = EncryptedStore(DiskStore(disk), MASTER)
    placement = TierPlacement(tiers, "meeting.cold", WatermarkController(1 << 20), PlacementPolicy(host_bytes=host_bytes))
    return ColdTier(placement, recall_top_k=4, prefetch=False, source=source)


def _slab(cold: ColdTier) -> bytes:
    """Every byte of host memory the host tier's slab holds (slots in use or not)."""
    store = cold.placement.tiers[Tier.HOST]
    store = getattr(store, "inner", store)
    return b"".join(c.tensor.numpy().tobytes() for cls in store._classes.values() for c in cls.chunks)


def _kv(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"k": torch.randn(1, 8, 16, generator=g).half(), "v": torch.randn(1, 8, 16, generator=g).half()}


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "plain"])
def test_host_tier_bytes_hold_no_plaintext_kv_only_when_sealed(sealed: bool) -> None:
    cold = _cold(sealed)
    payloads = [_kv(i) for i in range(6)]
    for i, payload in enumerate(payloads):
        assert cold.evict(0, i, 0, payload, score=1.0, modality=0)
    assert cold.placement.tier_bytes()["host"] > 0
    slab = _slab(cold)
    found = [p["k"].numpy().tobytes()[:32] in slab or p["v"].numpy().tobytes()[-32:] in slab for p in payloads]
    assert not any(found) if sealed else all(found)  # the search does find K/V where they are in clear
    assert (pack_block(payloads[0])[:4] in slab) is not sealed  # nor a block header
    for i, payload in enumerate(payloads):  # recall round-trips exactly
        back = cold.fetch(ColdTier.block_id(0, i, 0))
        assert back.keys() == payload.keys() and all(torch.equal(back[n], payload[n]) for n in payload)


def test_a_flipped_byte_in_host_memory_is_refused() -> None:
    cold = _cold(sealed=True)
    cold.evict(0, 3, 0, _kv(3), score=1.0, modality=0)
    cold.evict(0, 4, 0, _kv(4), score=1.0, modality=0)
    host = cold.placement.tiers[Tier.HOST].inner
    slot = host.get_tensor("meeting.cold", ColdTier.block_id(0, 3, 0))  # the slot itself: edited in place
    slot[len(slot) // 2] ^= 1
    with pytest.raises(TamperedBlock, match="failed authentication"):
        cold.fetch(ColdTier.block_id(0, 3, 0))
    assert torch.equal(cold.fetch(ColdTier.block_id(0, 4, 0))["k"], _kv(4)["k"]), "the other block still reads"


def test_forgetting_a_source_makes_its_host_blocks_unreadable_even_from_a_copy() -> None:
    cold = _cold(sealed=True, source="mic")
    placement = cold.placement
    cold.evict(0, 0, 0, _kv(0), score=1.0, modality=0)
    cold.evict(0, 1, 0, _kv(1), score=1.0, modality=0)
    other = pack_block(_kv(2))
    placement.put_cold("L0.b2.f0", other, 1.0, source="slides")
    placement.move(ColdTier.block_id(0, 1, 0), Tier.DEVICE)  # a staged (plaintext) copy goes too
    host = placement.tiers[Tier.HOST]
    copy = host.inner.get("meeting.cold", ColdTier.block_id(0, 0, 0))  # e.g. a core dump taken earlier

    assert cold.shred("mic") == 2
    for block in (0, 1):
        with pytest.raises(BlockNotFound):
            cold.fetch(ColdTier.block_id(0, block, 0))
    assert host.sources("meeting.cold") == ["slides"]
    assert placement.tier_bytes() == {"device": 0, "host": EncryptedStore.sealed_size(len(other), "slides"),
                                      "disk": 0, "redis": 0}
    host.inner.put("meeting.cold", ColdTier.block_id(0, 0, 0), copy)  # the copy put back: its key is gone
    with pytest.raises(MissingKeyError, match="crypto-shredded"):
        host.get("meeting.cold", ColdTier.block_id(0, 0, 0))
    assert placement.read("L0.b2.f0") == other, "another source's blocks are untouched"


def test_the_host_budget_and_bytes_per_tier_count_the_sealed_size(tmp_path: Path) -> None:
    block = pack_block(_kv(0))
    sealed = EncryptedStore.sealed_size(len(block), "mic")
    cold = _cold(sealed=True, host_bytes=4 * sealed - 1, disk=tmp_path)  # 4 blocks fit only in clear
    for i in range(4):
        cold.evict(0, i, 0, _kv(i), score=1.0, modality=0)
    placement = cold.placement
    assert [placement.tier_of(ColdTier.block_id(0, i, 0)) for i in range(4)] == [Tier.HOST] * 3 + [Tier.DISK]
    assert placement.tier_bytes()["host"] == 3 * sealed
    keys = sum(len(placement.tiers[Tier.HOST].inner.get("meeting.cold", k)) for k in ["~key/mic"])
    assert placement.tier_bytes()["host"] == placement.tiers[Tier.HOST].nbytes() - keys, "all but the wrapped key"
    placement.move(ColdTier.block_id(0, 0, 0), Tier.DEVICE)  # up: plaintext again
    placement.move(ColdTier.block_id(0, 3, 0), Tier.HOST)  # up from disk: sealed on the host again
    assert placement.tier_bytes() == {"device": len(block), "host": 3 * sealed, "disk": 0, "redis": 0}
    placement.move(ColdTier.block_id(0, 0, 0), Tier.DISK)  # down from the device
    assert placement.tier_bytes() == {"device": 0, "host": 3 * sealed, "disk": sealed, "redis": 0}
    assert torch.equal(cold.fetch(ColdTier.block_id(0, 0, 0))["v"], _kv(0)["v"])


def _meeting(sealed: bool):
    model = tiny_model("llama", attn=MINUTIA_ATTENTION, sharpen=4.0)
    cache = TieredCache(config=model.config, **SETTINGS)
    cold = _cold(sealed)
    cold.prefetcher = None
    cache.attach_cold_tier(cold)
    feed(model, cache, token_ids(320), chunk=32)
    return model, cache, cold


def test_a_meeting_recalls_from_a_sealed_host_tier_exactly_as_from_a_plain_one() -> None:
    logits = []
    for sealed in (True, False):
        model, cache, cold = _meeting(sealed)
        assert cold.placement.tier_bytes()["host"] > 0 and cold.counts.evicted > 0
        checkpoint = cache.checkpoint()
        KVCacheManager(cache).recall_tokens([(0, cache.get_seq_length())])
        assert cold.counts.recalled == cold.counts.evicted
        logits.append(feed(model, cache, token_ids(5, seed=7))[0, -1])
        cache.rollback(checkpoint)
    assert torch.equal(logits[0], logits[1])
