"""The KV of one tiered layer as stored: blocks in pools behind a page table, plus the Global Summary.

One job: hold and move KV bytes. Which format a block should have, which blocks to evict or read is
decided elsewhere (kvstore.compression, kvstore.cold_index, kvstore.layer_attention); this part
appends tokens, reads blocks back (dequantized), converts blocks between formats, removes them into
the summary, takes them back, and measures its own bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernels import dispatch as ops  # Triton on CUDA, the torch reference elsewhere
from kernels.reference import GlobalSummary, QuantizedTensor
from kvstore.blocks import HEAD_MAJOR, BlockFormat, BlockPool, PageTable, SlotSpec
from kvstore.config import TieredCacheConfig
from kernels.formats import BY_NAME
from kvstore.quant import GroupQuantizer, get_quantizer


def select_rows(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``index_select`` on dim 0 that also works for float8 on CPU (via a byte view)."""
    if t.element_size() == 1 and t.is_floating_point():
        return t.view(torch.uint8).index_select(0, index).view(t.dtype)
    return t.index_select(0, index)


def tensor_bytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


@dataclass(frozen=True)
class LayerGeometry:
    """Shape of one layer's KV, read off its first update."""

    batch: int
    n_heads: int
    head_dim: int
    value_dim: int
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, key_states: torch.Tensor, value_states: torch.Tensor) -> "LayerGeometry":
        batch, n_heads, _, head_dim = key_states.shape
        return cls(batch, n_heads, head_dim, value_states.shape[-1], key_states.dtype, key_states.device)

    def full_bytes_per_token(self) -> int:
        """K and V of one token at the source precision (what DynamicCache pays)."""
        element = torch.empty(0, dtype=self.dtype).element_size()
        return self.batch * self.n_heads * (self.head_dim + self.value_dim) * element


class BlockStorage:
    """Pools (one per format), the page table of kept blocks, and the summary of dropped tokens."""

    def __init__(self, geometry: LayerGeometry, settings: TieredCacheConfig) -> None:
        self.geometry = geometry
        self.settings = settings
        self.block_size = bs = settings.block_size
        g = geometry
        self.batch, self.n_heads, self.head_dim, self.value_dim = g.batch, g.n_heads, g.head_dim, g.value_dim
        self.dtype, self.device = g.dtype, g.device
        self.table = self.new_table()
        self.pools: dict[int, BlockPool] = {
            BlockFormat.FULL: BlockPool(
                {"k": SlotSpec((bs, g.n_heads, g.head_dim), g.dtype), "v": SlotSpec((bs, g.n_heads, g.value_dim), g.dtype)},
                g.device,
            )
        }
        self.key_quantizers = {}
        self.value_quantizers = {}

        def codec(name: str) -> GroupQuantizer:
            return get_quantizer(name, group_size=settings.group_size, param_dtype=settings.param_dtype)

        for kind in settings.warm_kinds:
            fmt, row = BlockFormat.from_kind(kind), BY_NAME[kind]  # a split row: keys and values in different codecs
            self.key_quantizers[fmt] = codec(row.key_codec).for_keys(token_axis=1)  # block layout [n, bs, H, D]
            self.value_quantizers[fmt] = codec(row.value_codec).for_values()
            self.pools[fmt] = BlockPool(self._quantized_specs(fmt), g.device)
        self.outlier_idx: dict[str, torch.Tensor | None] = {"k": None, "v": None}
        self.summary = GlobalSummary.empty(g.batch, g.n_heads, g.head_dim, g.device)

    def new_table(self) -> PageTable:
        """An empty page table with this layer's per-block columns (the cold index uses the same)."""
        table = PageTable(self.batch)
        bound_shape = (self.batch, self.n_heads, self.head_dim)
        table.add_column("key_min", bound_shape, self.dtype, device=self.device)
        table.add_column("key_max", bound_shape, self.dtype, device=self.device)
        table.add_column("attention_mass", (self.batch, self.n_heads), torch.float32)
        table.add_column("observations", (self.batch, self.n_heads), torch.float32)
        return table

    # ------------------------------------------------------------------------------------------
    # Quantized pools
    # ------------------------------------------------------------------------------------------

    def _outlier_probe(self, width: int) -> torch.Tensor | None:
        n = min(self.settings.outlier_channels, width)
        if n <= 0:
            return None
        return torch.arange(n).view(1, n).expand(self.n_heads, n)

    def _quantized_specs(self, fmt: BlockFormat) -> dict[str, SlotSpec]:
        """Slot layout of a quantized pool, read off a probe quantization of one empty block."""
        specs: dict[str, SlotSpec] = {}
        for prefix, quantizer, width in (
            ("k", self.key_quantizers[fmt], self.head_dim),
            ("v", self.value_quantizers[fmt], self.value_dim),
        ):
            probe = torch.zeros(1, self.block_size, self.n_heads, width, dtype=self.dtype)
            idx = self._outlier_probe(width)
            qt = quantizer.quantize(probe, None if idx is None else ops.outlier_index_for(idx, 4, 2))
            # Per-token value params head-major: the decode kernels read a (block, head)'s params as one run.
            layout = HEAD_MAJOR if prefix == "v" and quantizer.axis % 4 == 3 else None
            specs[f"{prefix}_data"] = SlotSpec(tuple(qt.data.shape[1:]), qt.data.dtype)
            specs[f"{prefix}_scale"] = SlotSpec(tuple(qt.scale.shape[1:]), qt.scale.dtype, layout)
            if qt.zero is not None:
                specs[f"{prefix}_zero"] = SlotSpec(tuple(qt.zero.shape[1:]), qt.zero.dtype, layout)
            if qt.outlier_values is not None:
                specs[f"{prefix}_outliers"] = SlotSpec(tuple(qt.outlier_values.shape[1:]), qt.outlier_values.dtype)
        return specs

    def paged_quantized(self, fmt: int, prefix: str) -> QuantizedTensor:
        """The whole pool of ``fmt`` seen as one paged QuantizedTensor (nothing is copied)."""
        pool = self.pools[fmt]
        quantizer = (self.key_quantizers if prefix == "k" else self.value_quantizers)[fmt]
        width = self.head_dim if prefix == "k" else self.value_dim
        group = math.gcd(quantizer.group_size, self.block_size if prefix == "k" else width)
        idx = self.outlier_idx[prefix]
        return QuantizedTensor(
            data=pool.tensors[f"{prefix}_data"],
            scale=pool.tensors[f"{prefix}_scale"],
            zero=pool.tensors.get(f"{prefix}_zero"),
            kind=quantizer.kind,
            axis=quantizer.axis % 4,
            group_size=group,
            shape=(pool.capacity, self.block_size, self.n_heads, width),
            dtype=self.dtype,
            outlier_idx=None if idx is None else ops.outlier_index_for(idx, 4, 2),
            outlier_values=pool.tensors.get(f"{prefix}_outliers"),
        )

    def _dequantize_slots(self, paged: QuantizedTensor, slots: torch.Tensor) -> torch.Tensor:
        """Dequantize whole blocks ``[m, block_size, H, D]`` of a paged quantized pool."""
        index = slots.to(self.device)
        picked = QuantizedTensor(
            data=select_rows(paged.data, index),
            scale=paged.scale.index_select(0, index),
            zero=None if paged.zero is None else paged.zero.index_select(0, index),
            kind=paged.kind,
            axis=paged.axis,
            group_size=paged.group_size,
            shape=(int(index.numel()), *paged.shape[1:]),
            dtype=paged.dtype,
            outlier_idx=paged.outlier_idx,
            outlier_values=None if paged.outlier_values is None else paged.outlier_values.index_select(0, index),
        )
        return ops.dequantize(picked)

    # ------------------------------------------------------------------------------------------
    # Writing and reading
    # ------------------------------------------------------------------------------------------

    def kept_tokens(self) -> int:
        return self.table.token_count()

    def append(self, key_states: torch.Tensor, value_states: torch.Tensor, start: int) -> torch.Tensor:
        """Write tokens ``start, start + 1, ...`` into full-precision blocks (the tail block first);
        returns each token's logical block."""
        n_new = key_states.shape[2]
        bs = self.block_size
        positions = torch.arange(start, start + n_new)
        blocks = positions // bs
        if n_new == 0:
            return blocks
        offsets = positions % bs
        first_block, last_block = int(blocks[0]), int(blocks[-1])
        reuse_tail = len(self.table) > 0 and int(self.table.block_index[-1]) == first_block
        if reuse_tail and int(self.table.format[-1]) != BlockFormat.FULL:
            raise RuntimeError("the partially filled tail block must be full precision")
        new_ids = torch.arange(first_block + (1 if reuse_tail else 0), last_block + 1)
        if new_ids.numel():
            slots = self.pools[BlockFormat.FULL].alloc(new_ids.numel() * self.batch).view(-1, self.batch)
            inf = torch.full((new_ids.numel(), self.batch, self.n_heads, self.head_dim), math.inf, dtype=self.dtype,
                             device=self.device)
            self.table.append(new_ids, BlockFormat.FULL, slots, torch.zeros(new_ids.numel(), dtype=torch.long),
                              key_min=inf, key_max=-inf)
        first_row = len(self.table) - (last_block - first_block + 1)
        rows = first_row + (blocks - first_block)  # [T]
        slot_bt = self.table.slot[rows].t().to(self.device)  # [B, T]
        offsets_bt = offsets.to(self.device).view(1, -1).expand_as(slot_bt)
        pool = self.pools[BlockFormat.FULL]
        pool.tensors["k"][slot_bt, offsets_bt] = key_states.transpose(1, 2).to(self.dtype)
        pool.tensors["v"][slot_bt, offsets_bt] = value_states.transpose(1, 2).to(self.dtype)
        self.table.fill.scatter_reduce_(0, rows, offsets + 1, reduce="amax")
        token_keys = key_states.permute(2, 0, 1, 3).to(self.dtype)  # [T, B, H, D]
        index = rows.to(self.device).view(-1, 1, 1, 1).expand_as(token_keys)
        self.table.columns["key_min"].scatter_reduce_(0, index, token_keys, reduce="amin")
        self.table.columns["key_max"].scatter_reduce_(0, index, token_keys, reduce="amax")
        return blocks

    def refresh_bounds(self, rows: torch.Tensor) -> None:
        """Recompute the key bounds of ``rows`` from their stored (filled) tokens."""
        keys, _ = self.rows_dense(rows)  # [n, B, bs, H, D]
        valid = torch.arange(self.block_size).view(1, -1) < self.table.fill[rows].view(-1, 1)
        valid = valid.to(self.device).view(-1, 1, self.block_size, 1, 1)
        self.table.columns["key_min"][rows] = keys.masked_fill(~valid, math.inf).amin(dim=2)
        self.table.columns["key_max"][rows] = keys.masked_fill(~valid, -math.inf).amax(dim=2)

    def rows_dense(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the given rows, dequantized: ``[n, B, block_size, H, D]`` each."""
        n = int(rows.numel())
        keys = torch.empty(n, self.batch, self.block_size, self.n_heads, self.head_dim, dtype=self.dtype,
                           device=self.device)
        values = torch.empty(n, self.batch, self.block_size, self.n_heads, self.value_dim, dtype=self.dtype,
                             device=self.device)
        formats = self.table.format[rows]
        for fmt in formats.unique().tolist():
            where = torch.nonzero(formats == fmt).flatten()
            slots = self.table.slot[rows[where]]  # [m, B]
            target = where.to(self.device)
            if fmt == BlockFormat.FULL:
                keys[target] = self.pools[fmt].read("k", slots)
                values[target] = self.pools[fmt].read("v", slots)
            else:
                for prefix, out in (("k", keys), ("v", values)):
                    dense = self._dequantize_slots(self.paged_quantized(fmt, prefix), slots.flatten())
                    out[target] = dense.view(len(where), self.batch, *dense.shape[1:])
        return keys, values

    def dense_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every kept token in logical order, dequantized: ``[B, H, kept, D]`` (what DynamicCache returns)."""
        n_rows = len(self.table)
        if n_rows == 0:
            empty = torch.zeros(self.batch, self.n_heads, 0, self.head_dim, dtype=self.dtype, device=self.device)
            return empty, empty.clone()
        if bool((self.table.format == BlockFormat.FULL).all()):
            pool = self.pools[BlockFormat.FULL]
            keys = pool.read("k", self.table.slot)
            values = pool.read("v", self.table.slot)
        else:
            keys, values = self.rows_dense(torch.arange(n_rows))
        kept = self.kept_tokens()  # only the last row may be partially filled
        keys = keys.permute(1, 3, 0, 2, 4).reshape(self.batch, self.n_heads, n_rows * self.block_size, -1)
        values = values.permute(1, 3, 0, 2, 4).reshape(self.batch, self.n_heads, n_rows * self.block_size, -1)
        return keys[:, :, :kept], values[:, :, :kept]

    def rows_as_tokens(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows' K and V as token sequences ``[B, H, n * bs, D]`` plus the mask of filled slots
        ``[B, H, n * bs]``: what the Global Summary absorbs (dropped) or releases (recalled)."""
        keys, values = self.rows_dense(rows)  # [n, B, bs, H, D]
        valid = torch.arange(self.block_size).view(1, -1) < self.table.fill[rows].view(-1, 1)  # [n, bs]
        k = keys.permute(1, 3, 0, 2, 4).reshape(self.batch, self.n_heads, -1, self.head_dim)
        v = values.permute(1, 3, 0, 2, 4).reshape(self.batch, self.n_heads, -1, self.value_dim)
        mask = valid.flatten().to(self.device).view(1, 1, -1).expand(self.batch, self.n_heads, -1)
        return k, v, mask

    def block_payload(self, row: int) -> dict[str, torch.Tensor]:
        """The stored tensors of page-table row ``row`` in its pool's format: ``[B, *slot shape]`` each."""
        pool = self.pools[int(self.table.format[row])]
        slots = self.table.slot[row]
        return {name: pool.read(name, slots).cpu() for name in pool.tensors}

    def store_payloads(self, formats: torch.Tensor, payloads: list[dict[str, torch.Tensor]]) -> torch.Tensor:
        """Write one stored payload per row of ``formats`` into fresh slots of its pool; returns the slots ``[n, B]``."""
        slots = torch.full((formats.numel(), self.batch), -1, dtype=torch.long)
        for fmt in formats.unique().tolist():
            where = torch.nonzero(formats == fmt).flatten()
            pool = self.pools[fmt]
            new = pool.alloc(where.numel() * self.batch)
            pool.write(new, **{name: torch.stack([payloads[i][name] for i in where.tolist()]).to(self.device)
                               .flatten(0, 1) for name in pool.specs})
            slots[where] = new.view(-1, self.batch).cpu()
        return slots

    # ------------------------------------------------------------------------------------------
    # Changing formats, removing and taking back rows
    # ------------------------------------------------------------------------------------------

    def free_rows(self, rows: torch.Tensor) -> None:
        for row in rows.tolist():
            self.pools[int(self.table.format[row])].free(self.table.slot[row])

    def convert_rows(self, rows: torch.Tensor, fmt: BlockFormat) -> None:
        """Re-store ``rows`` in pool ``fmt`` (quantizing from their current, dequantized content)."""
        keys, values = self.rows_dense(rows)  # [n, B, bs, H, D]
        n = int(rows.numel())
        pool = self.pools[fmt]
        slots = pool.alloc(n * self.batch).view(n, self.batch)
        flat_k = keys.reshape(n * self.batch, self.block_size, self.n_heads, self.head_dim)
        flat_v = values.reshape(n * self.batch, self.block_size, self.n_heads, self.value_dim)
        if fmt == BlockFormat.FULL:
            pool.write(slots, k=flat_k, v=flat_v)
        else:
            fields: dict[str, torch.Tensor] = {}
            for prefix, data, quantizers in (("k", flat_k, self.key_quantizers), ("v", flat_v, self.value_quantizers)):
                if self.settings.outlier_channels > 0 and self.outlier_idx[prefix] is None:
                    self.outlier_idx[prefix] = ops.select_outlier_channels(
                        data, self.settings.outlier_channels, head_axis=2
                    )
                idx = self.outlier_idx[prefix]
                qt = quantizers[fmt].quantize(data, None if idx is None else ops.outlier_index_for(idx, 4, 2))
                fields[f"{prefix}_data"] = qt.data
                fields[f"{prefix}_scale"] = qt.scale
                if qt.zero is not None:
                    fields[f"{prefix}_zero"] = qt.zero
                if qt.outlier_values is not None:
                    fields[f"{prefix}_outliers"] = qt.outlier_values
            pool.write(slots.flatten(), **fields)
        self.free_rows(rows)
        self.table.set_format(rows, fmt, slots)

    def absorb_rows(self, rows: torch.Tensor) -> None:
        """Fold the rows into the Global Summary and remove them from the page table and the pools."""
        self.summary = self.summary.absorb(*self.rows_as_tokens(rows))
        self.free_rows(rows)
        keep = torch.ones(len(self.table), dtype=torch.bool)
        keep[rows] = False
        self.table.keep(keep)

    def take_back(self, rows: PageTable, payloads: list[dict[str, torch.Tensor]]) -> None:
        """Insert removed rows again with their stored payloads; their tokens leave the summary.

        ``rows.slot`` is set to the new slots (the caller's record of what came back).
        """
        rows.slot[:] = self.store_payloads(rows.format, payloads)
        self.table.insert(rows)
        where = torch.searchsorted(self.table.block_index, rows.block_index)
        self.summary = self.summary.release(*self.rows_as_tokens(where))

    def crop(self, max_length: int) -> None:
        """Forget kept tokens from ``max_length`` on (only full-precision blocks may be cut)."""
        starts = self.table.block_index * self.block_size
        ends = starts + self.table.fill
        cut = ends > max_length
        if (self.table.format[cut] != BlockFormat.FULL).any():
            raise ValueError("cannot crop into compressed blocks")
        keep = starts < max_length
        self.free_rows(torch.nonzero(~keep).flatten())
        self.table.keep(keep)
        if len(self.table) and int(ends[keep][-1]) > max_length:
            last = len(self.table) - 1
            self.table.fill[last] = max_length - int(self.table.block_index[last]) * self.block_size
            self.refresh_bounds(torch.tensor([last]))

    def compact(self, only_if_mostly_free: bool = False) -> None:
        """Give pool memory back (moves only blocks above the high-water mark); with
        ``only_if_mostly_free`` just the pools whose free slots outnumber the used ones (and 8)."""
        for fmt, pool in self.pools.items():
            if not only_if_mostly_free or pool.allocator.free_count > max(8, pool.used_count):
                self.table.remap_slots(fmt, pool.compact())

    # ------------------------------------------------------------------------------------------
    # Bytes, measured from tensor storage
    # ------------------------------------------------------------------------------------------

    def row_metadata_bytes(self) -> int:
        """Page-table bytes one kept block costs (its columns, index, format, fill and slots)."""
        per_row = sum(tensor_bytes(c[:1]) for c in self.table.columns.values())
        return per_row + 8 * (3 + self.batch)

    def block_bytes(self, fmt: int) -> int:
        """Bytes one block costs in format ``fmt``: its slots in every batch row plus its table row."""
        return self.batch * self.pools[int(fmt)].slot_bytes + self.row_metadata_bytes()

    def metadata_bytes(self, extra: torch.Tensor | None = None) -> int:
        """Table, outlier index and summary bytes (plus ``extra``: the layer's remembered queries)."""
        table = self.table
        columns = sum(tensor_bytes(c) for c in table.columns.values())
        index = tensor_bytes(table.block_index, table.format, table.slot, table.fill)
        outliers = tensor_bytes(*(i for i in self.outlier_idx.values() if i is not None))
        return columns + index + outliers + self.summary.nbytes() + tensor_bytes(extra)

    def payload_bytes(self) -> int:
        return sum(pool.used_bytes() for pool in self.pools.values())

    def reserved_pool_bytes(self) -> int:
        return sum(pool.reserved_bytes() for pool in self.pools.values())
