"""Fixed-size KV blocks: slab allocators, block pools and the logical -> physical page table.

A layer's KV lives in fixed-size blocks (64 tokens by default). Each storage format (kernels.formats:
full precision, INT8, INT4, FP8, INT2) has its own :class:`BlockPool`: preallocated tensors indexed by a physical slot,
handed out by a :class:`SlabAllocator` free list. The :class:`PageTable` maps the layer's logical
blocks, in order, to (format, physical slot per batch row) and carries per-block metadata.

Compaction happens at two levels:

* logical: dropping, quantizing or rolling back blocks edits page-table rows only; no KV byte
  moves (``PageTable.keep`` / ``set_format``), and freed slots go back to the free list;
* physical (only to give memory back): :meth:`BlockPool.compact` moves the blocks that sit above
  the new high-water mark into the lowest free slots -- one copy per moved block, not per token,
  and no copy at all for blocks already below the mark -- truncates the pool, and returns the slot
  mapping that :meth:`PageTable.remap_slots` applies.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable

import torch

from kernels.formats import BlockFormat


class SlabAllocator:
    """Free list over ``capacity`` equally sized slots; the lowest free slot is reused first.

    Preferring low slots keeps the used set dense, so physical compaction has little to move.
    """

    def __init__(self, capacity: int = 0) -> None:
        self.capacity = capacity
        self._free: list[int] = list(range(capacity))
        heapq.heapify(self._free)
        self._used: set[int] = set()

    @property
    def used_count(self) -> int:
        return len(self._used)

    @property
    def free_count(self) -> int:
        return len(self._free)

    def used_slots(self) -> set[int]:
        return set(self._used)

    def grow(self, new_capacity: int) -> None:
        if new_capacity < self.capacity:
            raise ValueError("use compaction to shrink")
        for slot in range(self.capacity, new_capacity):
            heapq.heappush(self._free, slot)
        self.capacity = new_capacity

    def alloc(self, count: int) -> list[int]:
        """Take ``count`` slots; the caller grows the allocator (and its storage) first if needed."""
        if count > len(self._free):
            raise MemoryError(f"need {count} slots, {len(self._free)} free of {self.capacity}")
        slots = [heapq.heappop(self._free) for _ in range(count)]
        self._used.update(slots)
        return slots

    def free(self, slots: Iterable[int]) -> None:
        for slot in slots:
            if slot not in self._used:
                raise ValueError(f"slot {slot} is not allocated (double free?)")
            self._used.remove(slot)
            heapq.heappush(self._free, slot)

    def compaction_moves(self) -> list[tuple[int, int]]:
        """(source, destination) pairs that make the used slots exactly ``range(used_count)``."""
        target = len(self._used)
        sources = sorted(s for s in self._used if s >= target)
        holes = sorted(s for s in self._free if s < target)
        return list(zip(sources, holes))

    def shrink_after(self, moves: list[tuple[int, int]]) -> None:
        """Record that ``moves`` were applied and drop every slot above the used count."""
        for source, destination in moves:
            self._used.remove(source)
            self._used.add(destination)
        self.capacity = len(self._used)
        self._free = [s for s in range(self.capacity) if s not in self._used]
        heapq.heapify(self._free)


@dataclass(frozen=True)
class SlotSpec:
    """Shape (without the slot axis) and dtype of one tensor of a pool.

    ``layout``: the storage order of the non-slot dims (None: as ``shape``). The pool's tensor keeps
    the logical shape as a permuted view, so only kernels that read raw memory see the difference.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: tuple[int, ...] | None = None


HEAD_MAJOR = (1, 0, 2)
"""Layout of value scales/zeros ``[block_size, H, groups]``: stored ``[H, block_size, groups]``, so one
(block, head)'s params are one run for the decode kernels instead of a cache line per token each."""


def with_layout(t: torch.Tensor, layout: tuple[int, ...] | None) -> torch.Tensor:
    """``t`` (``[slots, *shape]``) in storage order ``layout``, seen with its own shape (copies if needed)."""
    if layout is None:
        return t.contiguous()
    order = _slot_order(layout)
    return t.permute(order).contiguous().permute(_inverse(order))


def _slot_order(layout: tuple[int, ...]) -> tuple[int, ...]:
    """The storage order of a pool tensor: the slot axis first, then ``layout`` over the other dims."""
    return (0, *(1 + i for i in layout))


def _inverse(order: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(order.index(i) for i in range(len(order)))


def _raw(t: torch.Tensor) -> torch.Tensor:
    """Byte view of 1-byte float tensors: CPU torch lacks index_copy_/index_select for float8."""
    return t.view(torch.uint8) if t.element_size() == 1 and t.is_floating_point() else t


class BlockPool:
    """Storage for one block format: named tensors ``[capacity, *spec.shape]`` plus their allocator.

    A full-precision pool has ``k`` and ``v``; a quantized pool has the codes, scales, zero points
    and outlier values of both. Storage grows geometrically (amortised O(1) per block) and shrinks
    only through :meth:`compact`.
    """

    def __init__(
        self,
        specs: dict[str, SlotSpec],
        device: torch.device | str = "cpu",
        min_growth: int = 8,
        pin_memory: bool = False,
    ) -> None:
        self.specs = dict(specs)
        self.device = torch.device(device)
        self.min_growth = min_growth
        self.pin_memory = pin_memory
        self.allocator = SlabAllocator(0)
        self.tensors: dict[str, torch.Tensor] = {
            name: self._empty(0, spec) for name, spec in self.specs.items()
        }

    def _empty(self, capacity: int, spec: SlotSpec) -> torch.Tensor:
        layout = spec.layout or tuple(range(len(spec.shape)))
        t = torch.zeros([capacity, *(spec.shape[i] for i in layout)], dtype=spec.dtype, device=self.device)
        if self.pin_memory and self.device.type == "cpu" and torch.cuda.is_available():
            t = t.pin_memory()
        return t.permute(_inverse(_slot_order(layout)))

    @property
    def capacity(self) -> int:
        return self.allocator.capacity

    @property
    def used_count(self) -> int:
        return self.allocator.used_count

    @property
    def slot_bytes(self) -> int:
        """Bytes of one block, measured from the storage tensors' element sizes."""
        total = 0
        for t in self.tensors.values():
            per_slot = t[0].numel() if t.shape[0] else int(torch.Size(t.shape[1:]).numel())
            total += per_slot * t.element_size()
        return total

    def used_bytes(self) -> int:
        return self.used_count * self.slot_bytes

    def reserved_bytes(self) -> int:
        """Bytes the pool's storage actually holds (capacity, including free slots)."""
        return sum(t.untyped_storage().nbytes() for t in self.tensors.values())

    def alloc(self, count: int) -> torch.Tensor:
        """Allocate ``count`` slots (growing the storage if the free list is short)."""
        if count > self.allocator.free_count:
            needed = self.allocator.used_count + count
            new_capacity = max(needed, self.capacity + max(self.min_growth, self.capacity // 2))
            for name, spec in self.specs.items():
                grown = self._empty(new_capacity, spec)
                grown[: self.capacity] = self.tensors[name]
                self.tensors[name] = grown
            self.allocator.grow(new_capacity)
        return torch.tensor(self.allocator.alloc(count), dtype=torch.long)

    def free(self, slots: torch.Tensor | Iterable[int]) -> None:
        self.allocator.free(int(s) for s in torch.as_tensor(slots).flatten().tolist())

    def write(self, slots: torch.Tensor, **values: torch.Tensor) -> None:
        """Store whole blocks: ``values[name]`` is ``[len(slots), *spec.shape]``."""
        index = slots.to(self.device).flatten()
        for name, value in values.items():
            target = self.tensors[name]
            source = value.to(target.dtype).reshape(-1, *self.specs[name].shape)
            _raw(target).index_copy_(0, index, _raw(source))

    def read(self, name: str, slots: torch.Tensor) -> torch.Tensor:
        t = self.tensors[name]
        picked = _raw(t).index_select(0, slots.to(self.device).flatten()).view(t.dtype)
        return picked.view(*slots.shape, *self.specs[name].shape)

    def compact(self) -> dict[int, int]:
        """Pack used blocks into ``range(used_count)`` and release the rest of the storage.

        Returns ``{old_slot: new_slot}`` for the moved blocks (the page table must be remapped).
        """
        moves = self.allocator.compaction_moves()
        if moves:
            src = torch.tensor([m[0] for m in moves], dtype=torch.long, device=self.device)
            dst = torch.tensor([m[1] for m in moves], dtype=torch.long, device=self.device)
            for t in self.tensors.values():
                _raw(t).index_copy_(0, dst, _raw(t).index_select(0, src))
        self.allocator.shrink_after(moves)
        for name in self.tensors:
            self.tensors[name] = self.tensors[name][: self.capacity].clone()
        return dict(moves)


class PageTable:
    """Logical -> physical block map of one layer, rows in logical (token) order.

    Row ``r`` covers tokens ``[block_index[r] * block_size, ... + fill[r])`` and lives in pool
    ``format[r]`` at ``slot[r, b]`` for batch row ``b``. ``columns`` hold per-block metadata
    (key bounds, accumulated attention, ...) and move with their rows.
    """

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.block_index = torch.zeros(0, dtype=torch.long)
        self.format = torch.zeros(0, dtype=torch.long)
        self.slot = torch.zeros(0, batch, dtype=torch.long)
        self.fill = torch.zeros(0, dtype=torch.long)
        self.columns: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return int(self.block_index.shape[0])

    def add_column(self, name: str, row_shape: tuple[int, ...], dtype: torch.dtype, fill_value: float = 0.0,
                   device: torch.device | str = "cpu") -> None:
        self.columns[name] = torch.full((len(self), *row_shape), fill_value, dtype=dtype, device=device)

    def append(
        self,
        block_index: torch.Tensor,
        fmt: BlockFormat | int,
        slots: torch.Tensor,
        fill: torch.Tensor,
        **column_values: torch.Tensor,
    ) -> None:
        """Add rows at the logical end (their block indices must follow the last row's)."""
        count = int(block_index.shape[0])
        if count == 0:
            return
        if len(self) and int(block_index[0]) <= int(self.block_index[-1]):
            raise ValueError("appended blocks must come after the existing ones")
        self.block_index = torch.cat([self.block_index, block_index.long().cpu()])
        self.format = torch.cat([self.format, torch.full((count,), int(fmt), dtype=torch.long)])
        self.slot = torch.cat([self.slot, slots.long().cpu().view(count, self.batch)])
        self.fill = torch.cat([self.fill, fill.long().cpu()])
        for name, column in self.columns.items():
            if name in column_values:
                new = column_values[name].to(column.dtype).to(column.device)
            else:
                new = torch.zeros((count, *column.shape[1:]), dtype=column.dtype, device=column.device)
            self.columns[name] = torch.cat([column, new])

    def keep(self, mask: torch.Tensor) -> None:
        """Logical compaction: keep the rows where ``mask`` is true, in order (no KV data moves)."""
        mask = mask.cpu().bool()
        self.block_index = self.block_index[mask]
        self.format = self.format[mask]
        self.slot = self.slot[mask]
        self.fill = self.fill[mask]
        for name, column in self.columns.items():
            self.columns[name] = column[mask.to(column.device)]

    def subset(self, mask: torch.Tensor) -> "PageTable":
        """A new table holding copies of the rows where ``mask`` is true (same columns)."""
        mask = mask.cpu().bool()
        part = PageTable(self.batch)
        part.block_index = self.block_index[mask].clone()
        part.format = self.format[mask].clone()
        part.slot = self.slot[mask].clone()
        part.fill = self.fill[mask].clone()
        part.columns = {name: column[mask.to(column.device)].clone() for name, column in self.columns.items()}
        return part

    def insert(self, other: "PageTable") -> None:
        """Merge ``other``'s rows (block indices not present here) into logical order."""
        if len(other) == 0:
            return
        if bool(torch.isin(other.block_index, self.block_index).any()):
            raise ValueError("inserted blocks are already in the table")
        order = torch.argsort(torch.cat([self.block_index, other.block_index]), stable=True)
        self.block_index = torch.cat([self.block_index, other.block_index])[order]
        self.format = torch.cat([self.format, other.format])[order]
        self.slot = torch.cat([self.slot, other.slot])[order]
        self.fill = torch.cat([self.fill, other.fill])[order]
        for name, column in self.columns.items():
            merged = torch.cat([column, other.columns[name].to(column.device, column.dtype)])
            self.columns[name] = merged[order.to(column.device)]

    def truncate(self, rows: int) -> None:
        mask = torch.arange(len(self)) < rows
        self.keep(mask)

    def set_format(self, rows: torch.Tensor, fmt: BlockFormat | int, slots: torch.Tensor) -> None:
        """Point ``rows`` at new slots of another pool (after their data was converted there)."""
        rows = rows.long().cpu()
        self.format[rows] = int(fmt)
        self.slot[rows] = slots.long().cpu().view(-1, self.batch)

    def rows_in(self, fmt: BlockFormat | int) -> torch.Tensor:
        return torch.nonzero(self.format == int(fmt)).flatten()

    def remap_slots(self, fmt: BlockFormat | int, mapping: dict[int, int]) -> None:
        """Apply a pool's physical compaction mapping to the rows stored in that pool."""
        if not mapping:
            return
        rows = self.rows_in(fmt)
        if rows.numel() == 0:
            return
        old = self.slot[rows]
        size = max(max(mapping), int(old.max())) + 1
        lookup = torch.arange(size)
        lookup[torch.tensor(list(mapping.keys()))] = torch.tensor(list(mapping.values()))
        self.slot[rows] = lookup[old]

    def token_count(self) -> int:
        return int(self.fill.sum())

    def check_invariants(self, pools: dict[int, BlockPool] | None = None) -> None:
        """Raise AssertionError if the table is inconsistent (used by tests and debug runs)."""
        assert (self.block_index.diff() > 0).all(), "logical order broken"
        owners: set[tuple[int, int]] = set()
        for fmt, slots in zip(self.format.tolist(), self.slot.tolist()):
            for s in slots:
                assert (fmt, s) not in owners, f"physical block {(fmt, s)} owned twice"
                owners.add((fmt, s))
        if pools is not None:
            for fmt, pool in pools.items():
                referenced = {s for f, s in owners if f == fmt}
                assert referenced == pool.allocator.used_slots(), f"pool {fmt} leaks or misses slots"
                assert pool.allocator.used_count + pool.allocator.free_count == pool.capacity
            assert {f for f, _ in owners} <= set(pools), "row points at a missing pool"
