"""Block stores: one interface (:class:`BlockStore`), one block format, four tiers.

``memory`` (device and host), ``disk`` (per-block files, write-behind) and ``redis_store``
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

__all__ = ["BlockNotFound", "BlockStore", "CorruptBlock", "StoreError", "StoreFull", "StoreUnavailable",
           "pack_block", "unpack_block"]
