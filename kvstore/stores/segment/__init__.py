"""The disk tier, log-structured (see :mod:`kvstore.stores.segment.store`)."""

from kvstore.stores.segment.store import SegmentStore

__all__ = ["SegmentStore"]
