"""Bring the blocks the next decode step will read up to the device before it reads them (kvstore/placement.py).

A worker thread copies them while the step computes; on CUDA on a second stream, so the copies overlap compute.
"""

from __future__ import annotations

import contextlib
import queue
import threading

import torch

from kvstore.placement import Tier, TierPlacement
from kvstore.stores.base import StoreError, StoreFull


class Prefetcher:
    """Moves the blocks predicted for the next step up to the device on a worker thread.

    ``request`` returns at once; ``wait`` blocks until the queued moves are done (the decode step
    calls it before reading). On CUDA the copies run on a side stream so they overlap compute.
    """

    def __init__(self, placement: TierPlacement, top_k: int = 8, max_backlog: int = 64) -> None:
        self.placement = placement
        self.top_k = top_k
        self.max_backlog = max_backlog  # queued requests beyond this: transfers are saturated
        self.stream = torch.cuda.Stream() if torch.cuda.is_available() else None
        self._queue: queue.Queue[list[str] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="kv-prefetch", daemon=True)
        self._thread.start()
        self.errors: list[str] = []

    def predict(self, block_scores: dict[str, float]) -> list[str]:
        """The ``top_k`` blocks by the current query's scores: what the next step will most likely read."""
        return [b for b, _ in sorted(block_scores.items(), key=lambda kv: -kv[1])[: self.top_k]]

    def request(self, block_ids: list[str]) -> None:
        backlog = self._queue.unfinished_tasks
        if backlog >= self.max_backlog:
            self.placement.transfers_saturated(backlog)
            return  # dropped: the blocks are read on demand (counted as misses) until the queue drains
        self._queue.put(list(block_ids))

    def wait(self) -> None:
        self._queue.join()

    def _run(self) -> None:
        while True:
            ids = self._queue.get()
            try:
                if ids is None:
                    return
                ctx = torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()
                with ctx:
                    self._promote(ids)
                if self.stream is not None:
                    self.stream.synchronize()
            finally:
                self._queue.task_done()

    def _promote(self, ids: list[str]) -> None:
        placement = self.placement
        need = [b for b in ids if b in placement.blocks and placement.blocks[b].tier != Tier.DEVICE]
        placement.will_read(need)
        for block_id in need:
            with placement._lock:
                nbytes = placement.blocks[block_id].nbytes
                room = placement.controller.cap_bytes - placement.tier_bytes()[Tier.DEVICE.value]
                if room < nbytes:  # make room: demote the lowest-priority device block not requested
                    victims = sorted((b for b, i in placement.blocks.items()
                                      if i.tier == Tier.DEVICE and b not in ids),
                                     key=lambda b: placement._priority(placement.blocks[b]))
                    for victim in victims:
                        if room >= nbytes:
                            break
                        placement.move(victim, Tier.HOST if Tier.HOST in placement.tiers else placement.lowest_tier())
                        room += placement.blocks[victim].nbytes
                try:
                    placement.move(block_id, Tier.DEVICE)
                except (StoreError, StoreFull) as exc:
                    self.errors.append(str(exc))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)
