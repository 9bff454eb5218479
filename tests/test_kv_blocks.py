"""kvstore.blocks: allocator, pools and page table, with hypothesis state-machine style properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.blocks import HEAD_MAJOR, BlockFormat, BlockPool, PageTable, SlabAllocator, SlotSpec


def test_allocator_reuses_lowest_slots_and_rejects_double_free() -> None:
    alloc = SlabAllocator(4)
    assert alloc.alloc(3) == [0, 1, 2]
    alloc.free([1])
    assert alloc.alloc(1) == [1]
    with pytest.raises(ValueError):
        alloc.free([3])
    with pytest.raises(MemoryError):
        alloc.alloc(2)
    alloc.grow(6)
    assert alloc.alloc(2) == [3, 4]
    assert alloc.used_count + alloc.free_count == alloc.capacity


def test_pool_grows_compacts_and_measures_bytes() -> None:
    pool = BlockPool({"k": SlotSpec((4, 2), torch.float32), "s": SlotSpec((2,), torch.float16)}, min_growth=2)
    slots = pool.alloc(5)
    assert pool.capacity >= 5
    pool.write(slots, k=torch.arange(5.0).view(5, 1, 1).expand(5, 4, 2), s=torch.ones(5, 2))
    assert pool.slot_bytes == 4 * 2 * 4 + 2 * 2
    pool.free(slots[:3])
    mapping = pool.compact()
    assert pool.capacity == 2 and pool.used_count == 2
    assert pool.reserved_bytes() == 2 * pool.slot_bytes
    moved = [mapping.get(int(s), int(s)) for s in slots[3:]]
    assert sorted(moved) == [0, 1]
    assert pool.read("k", torch.tensor(moved))[:, 0, 0].tolist() == [3.0, 4.0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float8_e4m3fn])
def test_pool_layout_survives_growth_writes_reads_and_compaction(dtype) -> None:
    """A head-major spec is stored [slot, H, tokens, groups] at every step, seen as [slot, tokens, H, groups]."""
    pool = BlockPool({"s": SlotSpec((4, 3, 2), dtype, HEAD_MAJOR), "k": SlotSpec((2,), torch.float32)}, min_growth=2)

    def head_major() -> bool:
        t = pool.tensors["s"]
        return tuple(t.shape) == (pool.capacity, 4, 3, 2) and t.permute(0, 2, 1, 3).is_contiguous()

    assert head_major()
    data = torch.randn(7, 4, 3, 2).to(dtype)
    first = pool.alloc(2)
    pool.write(first, s=data[:2], k=torch.zeros(2, 2))
    rest = pool.alloc(5)  # grows: the old blocks are copied into the new storage
    assert pool.capacity >= 7 and head_major()
    pool.write(rest, s=data[2:], k=torch.zeros(5, 2))
    slots = torch.cat([first, rest])
    picked = pool.read("s", slots)
    assert picked.is_contiguous() and torch.equal(picked.view(torch.uint8), data.view(torch.uint8))
    assert pool.slot_bytes == 4 * 3 * 2 * dtype.itemsize + 2 * 4
    pool.free(slots[:3])
    mapping = pool.compact()
    assert pool.capacity == 4 and head_major()
    assert pool.reserved_bytes() == 4 * pool.slot_bytes
    moved = torch.tensor([mapping.get(int(s), int(s)) for s in slots[3:]])
    assert torch.equal(pool.read("s", moved).view(torch.uint8), data[3:].view(torch.uint8))
    # the raw storage is head-major: block, head, token, group
    raw = torch.empty(0, dtype=dtype).set_(pool.tensors["s"].untyped_storage()).view(4, 3, 4, 2)
    assert torch.equal(raw[moved].transpose(1, 2).view(torch.uint8), data[3:].view(torch.uint8))


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3), st.sampled_from([0, 1, 2])),
        st.tuples(st.just("drop"), st.integers(0, 10**6), st.just(0)),
        st.tuples(st.just("convert"), st.integers(0, 10**6), st.sampled_from([0, 1, 2])),
        st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
        st.tuples(st.just("compact"), st.sampled_from([0, 1, 2]), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, batch=st.integers(1, 2))
def test_page_table_invariants_hold_under_random_operations(ops, batch: int) -> None:
    """No physical block owned twice, free + used = capacity, logical order and data survive compaction."""
    pools = {int(f): BlockPool({"x": SlotSpec((1,), torch.float64)}, min_growth=1) for f in (0, 1, 2)}
    table = PageTable(batch)
    next_block = 0
    # The payload of every block is its (logical block index, batch row) so moves are checkable.
    for op, a, b in ops:
        if op == "append":
            slots = pools[b].alloc(a * batch).view(a, batch)
            ids = torch.arange(next_block, next_block + a)
            payload = (ids.view(a, 1) * 10 + torch.arange(batch)).double()
            pools[b].write(slots, x=payload.view(-1, 1))
            table.append(ids, b, slots, torch.full((a,), 16))
            next_block += a
        elif op == "drop" and len(table):
            row = a % len(table)
            pools[int(table.format[row])].free(table.slot[row])
            mask = torch.ones(len(table), dtype=torch.bool)
            mask[row] = False
            table.keep(mask)
        elif op == "convert" and len(table):
            row = a % len(table)
            old_fmt = int(table.format[row])
            data = pools[old_fmt].read("x", table.slot[row])
            new_slots = pools[b].alloc(batch)
            pools[b].write(new_slots, x=data)
            pools[old_fmt].free(table.slot[row])
            table.set_format(torch.tensor([row]), b, new_slots)
        elif op == "truncate" and len(table):
            rows = a % (len(table) + 1)
            for r in range(rows, len(table)):
                pools[int(table.format[r])].free(table.slot[r])
            table.truncate(rows)
        elif op == "compact":
            mapping = pools[a].compact()
            table.remap_slots(a, mapping)
        table.check_invariants(pools)
        for r in range(len(table)):
            stored = pools[int(table.format[r])].read("x", table.slot[r]).flatten()
            expected = (table.block_index[r] * 10 + torch.arange(batch)).double()
            assert torch.equal(stored, expected)
    for fmt, pool in pools.items():
        table.remap_slots(fmt, pool.compact())
        assert pool.reserved_bytes() == pool.used_count * pool.slot_bytes
    table.check_invariants(pools)


def test_block_format_names() -> None:
    assert BlockFormat.from_kind("int4") is BlockFormat.INT4
    assert BlockFormat.FULL.kind == "full"
