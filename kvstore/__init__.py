"""KV store: blocks + page table, quantizers, importance scoring, tiers, manager, transformers Cache adapter.

Modules: ``blocks`` (allocator, pools, page table),
``quant`` (INT8/INT4/INT2/FP8 quantizers, one per quantized format), ``scoring`` (importance
scorers by name, their weighted sum and the budget planner), ``annotations`` (structural flags and
modality per token), ``layers`` / ``cache`` (TieredCache for stock transformers models), ``attention`` (the
``minutia_sparse`` AttentionInterface function), ``manager`` (KVCacheManager), ``timeline``
(TimelineIndex: stream time <-> token positions <-> KV blocks per modality). Imports are explicit
(``from kvstore.cache import TieredCache``) so that light modules do not pull in transformers. The table of
block formats is ``kernels.formats``: the kernels branch on it, and kvstore builds on the kernels.
"""
