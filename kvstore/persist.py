"""Durable sessions: a TieredCache (+ the app's metadata) saved to a BlockStore and loaded back.

What is saved: every layer -- tiered layers' page tables, block payloads in their stored format,
scores, key bounds, summaries, recent queries; sliding-window layers' windows -- the cache's token
annotations and block priorities, and an opaque JSON blob from the app (timeline, transcript, tokens).
Loading into a new TieredCache for the same model gives the same next-token logits.

Crash consistency without a journal: every block id carries a digest of its content
(``L2.b17.<digest>``), so a block is never overwritten in place; the manifest, written last, lists
the ids of one consistent save. A save cut short leaves the previous manifest and all the blocks it
names intact; blocks no manifest names are deleted after the next complete save. Saves are
incremental: a block whose content did not change since the last save is not written again.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch
from transformers.configuration_utils import PreTrainedConfig

from kvstore import block_ids
from kvstore.cache import TieredCache
from kvstore.factory import build_cache
from kvstore.config import TieredCacheConfig
from kvstore.crypto import EncryptedStore
from kvstore.layers import SlidingWindowLayer, TieredLayer
from kvstore.stores.base import BlockNotFound, BlockStore, CorruptBlock, StoreError, pack_block, unpack_block

if TYPE_CHECKING:
    from kvstore.cold import ColdTier

MANIFEST = "manifest"
FORMAT = "minutia-session"
VERSION = 1


class SessionNotFound(StoreError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class IncompatibleSession(StoreError):
    """The saved session does not fit this model / cache configuration."""


@dataclass
class SaveReport:
    session: str
    seq_length: int
    blocks: int  # blocks the manifest names
    blocks_written: int  # new or changed blocks written by this save
    bytes_written: int
    blocks_deleted: int  # blocks of earlier saves no longer needed
    seconds: float


@dataclass
class SessionInfo:
    """What a saved session holds (read from its manifest only)."""

    session: str
    seq_length: int
    saved_at: float
    layers: list[str]
    blocks: int  # blocks the manifest names
    settings: dict[str, Any]
    metadata: Any


def _storage_settings(settings: TieredCacheConfig) -> dict[str, Any]:
    """The settings that decide the stored layout (must match on load)."""
    return {
        "block_size": settings.block_size,
        "warm_kinds": list(settings.warm_kinds),
        "group_size": settings.group_size,
        "param_dtype": str(settings.param_dtype).removeprefix("torch."),
        "outlier_channels": settings.outlier_channels,
        "compress": settings.compress,
    }


def _flatten(state: dict[str, Any], prefix: str = "") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split a nested state dict into named tensors and JSON values."""
    tensors: dict[str, torch.Tensor] = {}
    plain: dict[str, Any] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            tensors[name] = value
        elif isinstance(value, dict):
            sub_t, sub_p = _flatten(value, name + ".")
            tensors.update(sub_t)
            plain.update(sub_p)
            plain.setdefault("__dicts__", []).append(name)
        else:
            plain[name] = value
    return tensors, plain


def _unflatten(tensors: dict[str, torch.Tensor], plain: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    dicts = sorted(plain.pop("__dicts__", []), key=lambda n: n.count("."))
    for name in dicts:
        _set(state, name, {})
    for name, value in [*plain.items(), *tensors.items()]:
        _set(state, name, value)
    return state


def _set(state: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        state = state.setdefault(part, {})
    state.setdefault(leaf, value) if isinstance(value, dict) else state.__setitem__(leaf, value)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class SessionWriter:
    """Saves one session's cache into a store, incrementally (it remembers the blocks present)."""

    def __init__(self, store: BlockStore, session: str, source: str | None = None, rewrite: bool = False) -> None:
        """``rewrite``: the first save writes every block, present or not (under this writer's ``source``)."""
        self.store = store
        self.session = session
        self.source = source
        self._present: set[str] = set(store.list(session))
        self._rewrite = set(self._present) if rewrite else set()

    def _put(self, block_id: str, data: bytes) -> None:
        if isinstance(self.store, EncryptedStore) or getattr(self.store, "takes_source", False):
            self.store.put(self.session, block_id, data, source=self.source)
        else:
            self.store.put(self.session, block_id, data)

    def save(self, cache: TieredCache, metadata: Any = None) -> SaveReport:
        """Write what changed since the last save, then the manifest, then flush; returns counts."""
        start = time.perf_counter()
        if cache.compression_suspended:
            raise RuntimeError("roll back or release the open checkpoint before saving (its tokens are provisional)")
        names: list[str] = []
        written = bytes_written = 0

        def add(stem: str, data: bytes) -> None:
            nonlocal written, bytes_written
            block_id = f"{stem}.{_digest(data)}"
            names.append(block_id)
            if block_id not in self._present or block_id in self._rewrite:
                self._rewrite.discard(block_id)
                self._put(block_id, data)
                self._present.add(block_id)
                written += 1
                bytes_written += len(data)

        layers: list[dict[str, Any]] = []
        for idx, layer in enumerate(cache.layers):
            if isinstance(layer, TieredLayer):
                tensors, plain = _flatten(layer.state_dict())
                add(block_ids.layer_record_id(idx, "state"), pack_block(tensors, **plain))
                first = len(names)
                if layer.is_initialized:
                    for row, block in enumerate(layer.table.block_index.tolist()):
                        add(block_ids.block_id(idx, block), pack_block(layer.block_payload(row)))
                cold = len(names)
                if layer.is_initialized and cache.cold_tier is not None:
                    for row, block in enumerate(layer.cold.block_index.tolist()):
                        add(block_ids.cold_block_id(idx, block), pack_block(layer.cold_payload(row)))
                layers.append({"kind": "tiered", "state": names[first - 1], "blocks": names[first:cold],
                               "cold": names[cold:]})
            elif isinstance(layer, SlidingWindowLayer):
                keys, values, length, initialized = layer.snapshot()
                tensors = {"keys": keys, "values": values} if initialized else {}
                add(block_ids.layer_record_id(idx, "window"), pack_block(tensors, cumulative_length=length, initialized=bool(initialized)))
                layers.append({"kind": "sliding", "state": names[-1]})
            else:
                raise TypeError(f"layer {idx} ({type(layer).__name__}) cannot be persisted")
        extras = {"flags": cache.annotations.flags, "modality": cache.annotations.modality}
        priorities = getattr(cache, "priorities", None)
        if priorities is not None:
            extras |= {"boost": priorities.boost, "pinned": priorities.pinned}
        add("cache", pack_block(extras))
        manifest = {
            "format": FORMAT, "version": VERSION, "saved_at": time.time(),
            "seq_length": cache.get_seq_length(), "settings": _storage_settings(cache.settings),
            "layers": layers, "cache": names[-1], "metadata": metadata,
        }
        data = pack_block({}, **manifest)
        self._put(MANIFEST, data)
        written += 1
        bytes_written += len(data)
        self.store.flush()  # the manifest and everything it names are durable from here on
        self._rewrite.clear()
        stale = self._present - set(names) - {MANIFEST}
        for block_id in stale:
            self.store.delete(self.session, block_id)
        self._present -= stale
        if stale:
            self.store.flush()
        return SaveReport(self.session, cache.get_seq_length(), len(names), written, bytes_written, len(stale),
                          time.perf_counter() - start)


def save_session(store: BlockStore, session: str, cache: TieredCache, metadata: Any = None,
                 source: str | None = None) -> SaveReport:
    """One-shot save (use a :class:`SessionWriter` to save the same session repeatedly)."""
    return SessionWriter(store, session, source).save(cache, metadata)


def _manifest(store: BlockStore, session: str) -> dict[str, Any]:
    try:
        data = store.get(session, MANIFEST)
    except BlockNotFound:
        raise SessionNotFound(f"no saved session {session!r} in the {store.tier} store") from None
    _, manifest = unpack_block(data)
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CorruptBlock(f"session {session!r}: manifest of an unknown format")
    return manifest


def session_info(store: BlockStore, session: str) -> SessionInfo:
    m = _manifest(store, session)
    blocks = sum(len(layer.get("blocks", [])) + 1 for layer in m["layers"]) + 1
    return SessionInfo(session, m["seq_length"], m["saved_at"], [layer["kind"] for layer in m["layers"]], blocks,
                       m["settings"], m["metadata"])


def load_session(store: BlockStore, session: str, config: PreTrainedConfig,
                 settings: TieredCacheConfig | None = None,
                 device: torch.device | str = "cpu", cold_tier: "ColdTier | None" = None,
                 cold_tier_for: "Callable[[Any], ColdTier | None] | None" = None) -> tuple[TieredCache, Any]:
    """A new TieredCache holding the saved session, and the app metadata saved with it.

    ``cold_tier``: attached to the cache, and given the saved cold blocks (placement comes back too);
    without one those blocks stay dropped. ``cold_tier_for``: instead, makes the cold tier from the saved app
    metadata (its source tags the blocks), so that the manifest is read once.

    ``settings`` default to ``TieredCacheConfig(**saved storage settings)``; budgets may differ from
    the saved ones, the storage layout (block size, warm formats, groups) may not.
    """
    manifest = _manifest(store, session)
    saved = manifest["settings"]
    if settings is None:
        settings = TieredCacheConfig(block_size=saved["block_size"], warm_kinds=tuple(saved["warm_kinds"]),
                                     group_size=saved["group_size"], param_dtype=getattr(torch, saved["param_dtype"]),
                                     outlier_channels=saved["outlier_channels"], compress=saved["compress"])
    mismatch = {k: (v, _storage_settings(settings)[k]) for k, v in saved.items()
                if k != "compress" and _storage_settings(settings)[k] != v}
    if mismatch:
        raise IncompatibleSession(f"session {session!r} was saved with other storage settings (saved, now): {mismatch}")
    if cold_tier_for is not None:
        cold_tier = cold_tier_for(manifest["metadata"])
    cache = build_cache(config, settings, cold_tier)
    kinds = ["tiered" if isinstance(layer, TieredLayer) else "sliding" for layer in cache.layers]
    if kinds != [layer["kind"] for layer in manifest["layers"]]:
        raise IncompatibleSession(f"session {session!r} has layers {[l['kind'] for l in manifest['layers']]}, "
                                  f"this model {kinds}")

    def read(block_id: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        try:
            return store.read_with(session, block_id, unpack_block)  # a lent view: unpack copies out what it keeps
        except BlockNotFound:
            raise CorruptBlock(f"session {session!r}: block {block_id!r} named by the manifest is missing") from None

    order = [manifest["cache"]]  # the read order below: the disk can fetch ahead of it (cold after a restart)
    for entry in manifest["layers"]:
        order += [entry["state"], *entry.get("blocks", []), *(entry.get("cold", []) if cold_tier is not None else [])]
    store.will_read(session, order)
    extras, _ = read(manifest["cache"])  # annotations first: the cold blocks are placed by modality
    cache.annotations.flags, cache.annotations.modality = extras["flags"], extras["modality"]
    for layer, entry in zip(cache.layers, manifest["layers"]):
        tensors, plain = read(entry["state"])
        if entry["kind"] == "tiered":
            payloads = [read(block_id)[0] for block_id in entry["blocks"]]
            cold = [read(block_id)[0] for block_id in entry.get("cold", [])] if cold_tier is not None else []
            layer.load_state_dict(_unflatten(tensors, plain), payloads, device=device, cold_payloads=cold)
        elif plain["initialized"]:
            keys, values = tensors["keys"].to(device), tensors["values"].to(device)
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
            layer.cumulative_length = plain["cumulative_length"]
        else:
            layer.cumulative_length = plain["cumulative_length"]
    priorities = getattr(cache, "priorities", None)
    if priorities is not None and "boost" in extras:
        priorities.boost, priorities.pinned = extras["boost"], extras["pinned"]
    if cache.get_seq_length() != manifest["seq_length"]:
        raise CorruptBlock(f"session {session!r}: restored {cache.get_seq_length()} tokens, manifest says "
                           f"{manifest['seq_length']}")
    return cache, manifest["metadata"]


def list_sessions(store: BlockStore) -> list[str]:
    return [s for s in store.sessions() if store.contains(s, MANIFEST)]
