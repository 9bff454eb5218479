"""Device and host tiers: blocks kept as uint8 tensors in (GPU / pinned host / process) memory."""

from __future__ import annotations

import threading

import torch

from kvstore.stores.base import BlockNotFound, BlockStore, StoreFull, check_name


class MemoryStore(BlockStore):
    """Blocks as byte tensors on ``device``; on a host tier with CUDA present they are pinned.

    Pinned host blocks make host -> device copies asynchronous (the prefetch stream relies on it).
    ``quota_bytes`` is the tier's hard cap: a put that would cross it raises :class:`StoreFull`.
    """

    def __init__(self, device: torch.device | str = "cpu", tier: str | None = None,
                 quota_bytes: int | None = None) -> None:
        self.device = torch.device(device)
        self.tier = tier or ("device" if self.device.type != "cpu" else "host")
        self.pin = self.device.type == "cpu" and self.tier == "host" and torch.cuda.is_available()
        self.quota_bytes = quota_bytes
        self._blocks: dict[str, dict[str, torch.Tensor]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def put_tensor(self, session: str, block_id: str, data: torch.Tensor) -> None:
        """Store a uint8 tensor without a round trip through Python bytes (tier-to-tier moves)."""
        check_name("session", session)
        check_name("block id", block_id)
        flat = data.reshape(-1)
        if flat.dtype != torch.uint8:
            raise TypeError("blocks are byte tensors")
        with self._lock:
            old = self._blocks.get(session, {}).get(block_id)
            growth = flat.numel() - (old.numel() if old is not None else 0)
            if self.quota_bytes is not None and self._bytes + growth > self.quota_bytes:
                raise StoreFull(f"{self.tier} tier full: {self._bytes + growth} > {self.quota_bytes} bytes "
                                f"(session {session!r}, block {block_id!r})")
            if flat.device != self.device:
                target = torch.empty(flat.numel(), dtype=torch.uint8, device=self.device, pin_memory=self.pin)
                target.copy_(flat, non_blocking=self.pin or flat.is_pinned())
                flat = target
            elif self.pin and not flat.is_pinned():
                flat = flat.pin_memory()
            else:
                flat = flat.clone()
            self._blocks.setdefault(session, {})[block_id] = flat
            self._bytes += growth

    def get_tensor(self, session: str, block_id: str) -> torch.Tensor:
        with self._lock:
            try:
                return self._blocks[session][block_id]
            except KeyError:
                raise BlockNotFound(f"no block {block_id!r} in session {session!r} ({self.tier} tier)") from None

    def put(self, session: str, block_id: str, data: bytes) -> None:
        self.put_tensor(session, block_id, torch.frombuffer(bytearray(data), dtype=torch.uint8)
                        if data else torch.zeros(0, dtype=torch.uint8))

    def get(self, session: str, block_id: str) -> bytes:
        return self.get_tensor(session, block_id).cpu().numpy().tobytes()

    def delete(self, session: str, block_id: str) -> bool:
        with self._lock:
            blocks = self._blocks.get(session, {})
            old = blocks.pop(block_id, None)
            if old is None:
                return False
            self._bytes -= old.numel()
            if not blocks:
                self._blocks.pop(session, None)
            return True

    def contains(self, session: str, block_id: str) -> bool:
        with self._lock:
            return block_id in self._blocks.get(session, {})

    def list(self, session: str) -> list[str]:
        with self._lock:
            return sorted(self._blocks.get(session, {}))

    def sessions(self) -> list[str]:
        with self._lock:
            return sorted(self._blocks)

    def nbytes(self) -> int:
        return self._bytes
