"""Head-major value params: kvstore's quantized pools store them so, the Triton kernel reads them in place.

The fused CPU kernel's side is in tests/test_kernels_cpu.py (``test_head_major_value_params_are_read_in_place``).
"""

from __future__ import annotations

import pytest
import torch

from kernels import reference as ref
from kvstore.attention import MINUTIA_ATTENTION
from kvstore.blocks import HEAD_MAJOR, BlockFormat, with_layout
from kvstore.cache import TieredCache

try:
    from kv_helpers import feed, tiny_model, token_ids
    from test_kernels_triton import _check_decode, _problem, _quantized, _to, _triton_interpreter, td  # noqa: F401
except ImportError:  # tests/ imported as a package
    from tests.kv_helpers import feed, tiny_model, token_ids
    from tests.test_kernels_triton import _check_decode, _problem, _quantized, _to, _triton_interpreter, td  # noqa: F401


def _with_layout(qt: ref.QuantizedTensor, layout) -> ref.QuantizedTensor:
    fields = dict(vars(qt))
    for name in ("scale", "zero"):
        if fields[name] is not None:
            fields[name] = with_layout(fields[name], layout)
    return ref.QuantizedTensor(**fields)


def _is_head_major(t: torch.Tensor) -> bool:
    return not t.is_contiguous() and t.permute(0, 2, 1, 3).is_contiguous()


def test_quantized_pools_keep_value_params_head_major() -> None:
    """Value scales/zeros head-major, everything else token-major, through compression, compaction and
    payload reads (which stay logical and contiguous: what the stores serialise)."""
    model = tiny_model("llama", attn=MINUTIA_ATTENTION)  # 2 KV heads: the layouts differ
    cache = TieredCache(config=model.config, block_size=16, compress=True, budget_ratio=0.5, recent_tokens=32,
                        warm_kinds=("int8", "int4", "fp8"), observation_window=8)
    feed(model, cache, token_ids(192), chunk=64)
    cache.compact_storage()
    feed(model, cache, token_ids(8, seed=1), chunk=1)
    quantized_rows = 0
    for layer in cache.tiered_layers:
        for fmt, pool in layer.pools.items():
            for name, t in pool.tensors.items():
                if fmt != BlockFormat.FULL and name in ("v_scale", "v_zero"):
                    assert pool.capacity == 0 or _is_head_major(t), (fmt, name)
                else:
                    assert t.is_contiguous(), (fmt, name)
        for row in range(len(layer.table)):
            fmt = int(layer.table.format[row])
            if fmt == BlockFormat.FULL:
                continue
            quantized_rows += 1
            pool = layer.pools[fmt]
            for name, payload in layer.block_payload(row).items():
                assert payload.is_contiguous()
                expected = pool.tensors[name][layer.table.slot[row]]
                assert torch.equal(payload.view(torch.uint8), expected.contiguous().view(torch.uint8))
    assert quantized_rows, "some blocks were quantized"


@pytest.mark.parametrize("k_kind,v_kind", [("int8", "int4"), ("int4", "fp8"), ("int2", "int2")])
def test_triton_reads_strided_params_in_place(k_kind: str, v_kind: str) -> None:
    """Head-major value params (and permuted key params) are passed to Triton as they are and give the
    reference's results (the interpreter without a GPU)."""
    q, k, v, table, seq = _problem(21, 1, 3, 4, 64, 16, [[50, 33, 7]])
    kq = _with_layout(_quantized(k, k_kind, True, 8), HEAD_MAJOR)
    vq = _with_layout(_quantized(v, v_kind, False, 16, n_out=1), HEAD_MAJOR)
    assert not kq.scale.is_contiguous() and not vq.scale.is_contiguous()
    for source in (_to(kq), _to(vq)):
        op, _ = td._operand(source, source.scale.device)
        assert op[1] is source.scale and (source.zero is None or op[2] is source.zero)  # no copies
    _check_decode(q, kq, vq, table, seq, num_splits=2)
