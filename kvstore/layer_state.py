"""Checkpoints and saved state of one tiered layer, over its parts (storage, attention, cold index).

One job: state. A checkpoint (:func:`snapshot` / :func:`restore`) undoes everything a question added;
:func:`state_dict` / :func:`load_state_dict` carry a layer through the session store (block payloads
travel apart, one record per block). The saved keys are a stored format: keep them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kernels.reference import GlobalSummary
from kvstore.block_storage import BlockStorage, LayerGeometry
from kvstore.blocks import BlockFormat
from kvstore.cold_index import ColdIndex
from kvstore.layer_attention import BlockAttention


@dataclass
class TieredLayerSnapshot:
    """What a tiered layer needs to undo everything appended after a checkpoint.

    Compression is suspended while a checkpoint is open, so rows before ``rows`` are untouched
    except the tail block, whose fill and key bounds are saved; scores are small and copied whole.
    """

    rows: int
    seen: int
    tail_fill: int | None
    tail_key_min: torch.Tensor | None
    tail_key_max: torch.Tensor | None
    attention_mass: torch.Tensor
    observations: torch.Tensor
    summary: GlobalSummary
    recent_queries: torch.Tensor | None
    block_index: torch.Tensor
    recalled: int
    upgraded: int = 0  # rows read from their exact copies before the checkpoint (kvstore.exact_copies)


def snapshot(storage: BlockStorage, attention: BlockAttention, cold: ColdIndex, seen: int) -> TieredLayerSnapshot:
    table = storage.table
    rows = len(table)
    cols = table.columns
    return TieredLayerSnapshot(
        rows=rows,
        seen=seen,
        tail_fill=int(table.fill[-1]) if rows else None,
        tail_key_min=cols["key_min"][-1].clone() if rows else None,
        tail_key_max=cols["key_max"][-1].clone() if rows else None,
        attention_mass=cols["attention_mass"].clone(),
        observations=cols["observations"].clone(),
        summary=storage.summary.clone(),
        recent_queries=attention.recent_queries,
        block_index=table.block_index.clone(),
        recalled=len(cold.recalled),
    )


def restore(storage: BlockStorage, attention: BlockAttention, cold: ColdIndex, snap: TieredLayerSnapshot) -> None:
    """Back to ``snap``: rows added since (the question's tokens, cold blocks recalled for it) leave."""
    table = storage.table
    present = torch.isin(table.block_index, snap.block_index)
    storage.free_rows(torch.nonzero(~present).flatten())
    table.keep(present)
    cold.undo_recalls(snap.recalled)
    cols = table.columns
    if snap.rows:
        table.fill[-1] = snap.tail_fill
        cols["key_min"][-1] = snap.tail_key_min
        cols["key_max"][-1] = snap.tail_key_max
    cols["attention_mass"] = snap.attention_mass.clone()
    cols["observations"] = snap.observations.clone()
    storage.summary = snap.summary.clone()
    attention.recent_queries = snap.recent_queries


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().cpu().clone()


def state_dict(storage: BlockStorage, attention: BlockAttention, cold: ColdIndex, seen: int,
               compression_pending: bool) -> dict[str, Any]:
    """Everything an initialised layer holds except block payloads (one per row, saved apart), on the CPU."""
    g, table, summary = storage.geometry, storage.table, storage.summary
    return {
        "initialized": True,
        "cumulative_length": seen,
        "dtype": str(g.dtype).removeprefix("torch."),
        "shape": [g.batch, g.n_heads, g.head_dim, g.value_dim],
        "block_index": _cpu(table.block_index),
        "format": _cpu(table.format),
        "fill": _cpu(table.fill),
        "columns": {name: _cpu(col) for name, col in table.columns.items()},
        "outlier_idx": {prefix: _cpu(idx) for prefix, idx in storage.outlier_idx.items()},
        "summary": {"key_sum": _cpu(summary.key_sum), "value_sum": _cpu(summary.value_sum), "count": _cpu(summary.count)},
        "recent_queries": _cpu(attention.recent_queries),
        "last_scale": attention.last_scale,
        "chunk_start": attention.chunk_start,
        "compression_pending": compression_pending,
        "cold": {"block_index": _cpu(cold.table.block_index), "format": _cpu(cold.table.format),
                 "fill": _cpu(cold.table.fill), "columns": {n: _cpu(c) for n, c in cold.table.columns.items()}},
    }


def saved_geometry(state: dict[str, Any], device: torch.device | str) -> LayerGeometry:
    batch, n_heads, head_dim, value_dim = state["shape"]
    return LayerGeometry(batch, n_heads, head_dim, value_dim, getattr(torch, state["dtype"]), torch.device(device))


def load_state_dict(storage: BlockStorage, attention: BlockAttention, cold: ColdIndex, state: dict[str, Any],
                    payloads: list[dict[str, torch.Tensor]], cold_payloads: list[dict[str, torch.Tensor]],
                    layer_idx: int) -> None:
    """Fill fresh parts (built for :func:`saved_geometry`) from :func:`state_dict` and one payload per row.

    ``cold_payloads``: one per cold-index row; they go to the cache's cold tier, or without one the rows
    stay dropped (their tokens are in the summary either way).
    """
    device = storage.device
    formats = state["format"].long()
    if len(payloads) != formats.numel():
        raise ValueError(f"layer {layer_idx}: {len(payloads)} block payloads for {formats.numel()} blocks")
    for fmt in formats.unique().tolist():
        if fmt not in storage.pools:
            raise ValueError(f"layer {layer_idx} was saved with {BlockFormat(fmt).kind} blocks, which this "
                             f"cache's warm_kinds {storage.settings.warm_kinds} do not include")
    table = storage.table
    table.slot = storage.store_payloads(formats, payloads)
    table.block_index = state["block_index"].long().clone()
    table.format = formats.clone()
    table.fill = state["fill"].long().clone()
    for name, column in state["columns"].items():
        table.columns[name] = column.to(table.columns[name].device if name in table.columns else device)
    storage.outlier_idx = {prefix: None if idx is None else idx.to(device) for prefix, idx in state["outlier_idx"].items()}
    summary = state["summary"]
    storage.summary = GlobalSummary(summary["key_sum"].to(device), summary["value_sum"].to(device),
                                    summary["count"].to(device))
    queries = state["recent_queries"]
    attention.recent_queries = None if queries is None else queries.to(device)
    attention.last_scale = state["last_scale"]
    attention.begin_chunk(int(state["chunk_start"]), None)
    saved_cold = state.get("cold")
    tier = cold.ctx.cold_tier
    if saved_cold is not None and tier is not None and len(cold_payloads) == int(saved_cold["block_index"].numel()):
        index = cold.table
        index.block_index = saved_cold["block_index"].long().clone()
        index.format = saved_cold["format"].long().clone()
        index.fill = saved_cold["fill"].long().clone()
        index.slot = torch.full((len(index.block_index), storage.batch), -1, dtype=torch.long)
        index.columns = {n: c.to(index.columns[n].device) for n, c in saved_cold["columns"].items()}
        modality = cold.ctx.annotations.block_modality(index.block_index, storage.block_size)
        for i, (block, fmt) in enumerate(zip(index.block_index.tolist(), index.format.tolist())):
            tier.evict(layer_idx, block, fmt, cold_payloads[i], 0.0, int(modality[i]))
