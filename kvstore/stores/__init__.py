"""Block stores: one interface (:class:`BlockStore`), one block format, four tiers.

``memory`` (device and host), ``disk`` (per-block files, write-behind), ``segment`` (the disk tier
log-structured: blocks appended to large segment files) and ``redis_store``
(redis-server / Cluster). Encryption at rest wraps any of them (``kvstore.crypto.EncryptedStore``).
"""

from kvstore.stores.base import (
    BlockNotFound,
    BlockStore,
    CorruptBlock,
    StoreError,
    StoreFull,
    StoreUnavailable,
    pack_block,
    unpack_block,
)
from kvstore.stores.segment import SegmentStore

__all__ = ["BlockNotFound", "BlockStore", "CorruptBlock", "SegmentStore", "StoreError", "StoreFull",
           "StoreUnavailable", "pack_block", "unpack_block"]
