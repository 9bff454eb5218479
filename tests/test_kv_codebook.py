"""Coupled (vector) quantization of K/V channels (kvstore/quant/codebook.py): rotary pairs coded together, codebooks
learned by k-means, and on rotary-like data a 2-bit codebook beats uniform INT2, which spends 3 bits."""

from __future__ import annotations

import math

import pytest
import torch

from kvstore.quant import get_quantizer
from kvstore.quant.codebook import Codebook, calibrate, kmeans, load_codebooks, rotary_groups, save_codebooks


def test_rotary_groups_keep_each_pair_together_and_cover_every_channel_once():
    groups = rotary_groups(16, 4)
    assert groups.tolist() == [[0, 8, 1, 9], [2, 10, 3, 11], [4, 12, 5, 13], [6, 14, 7, 15]]
    assert sorted(rotary_groups(256, 4).flatten().tolist()) == list(range(256))
    for dims, head_dim in ((3, 16), (4, 18), (0, 16)):
        with pytest.raises(ValueError):
            rotary_groups(head_dim, dims)


def test_kmeans_finds_well_separated_clusters():
    gen = torch.Generator().manual_seed(1)
    centres = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    points = (centres.repeat_interleave(50, 0) + 0.1 * torch.randn(200, 2, generator=gen))[None]
    found = kmeans(points, 4, seed=3)[0]
    assert torch.cdist(found, centres).min(0).values.max() < 0.2  # every true centre has a centroid near it
    assert torch.equal(kmeans(points, 4, seed=3), kmeans(points, 4, seed=3))  # deterministic for a seed
    with pytest.raises(ValueError, match="cannot place"):
        kmeans(points[:, :3], 4)


def _rotary_like(tokens: int, heads: int, head_dim: int, seed: int) -> torch.Tensor:
    """Keys whose channels move together: each head's keys are a few latent features of the token spread over its
    channels (with channel offsets of different sizes, as real keys have), turned by a slow rotary embedding."""
    gen = torch.Generator().manual_seed(seed)
    half = head_dim // 2
    latent = torch.randn(tokens, heads, 2, generator=gen)
    mixing = torch.randn(heads, 2, head_dim, generator=torch.Generator().manual_seed(99))  # the model's: fixed
    offset = torch.linspace(-2.0, 2.0, head_dim)
    x = torch.einsum("thl,hld->thd", latent, mixing) + offset + 0.05 * torch.randn(tokens, heads, head_dim, generator=gen)
    angle = torch.arange(tokens)[:, None, None] * (1.0 / (1e6 ** (torch.arange(half) / half)))  # theta 1M: slow
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * torch.cos(angle) - second * torch.sin(angle),
                      second * torch.cos(angle) + first * torch.sin(angle)], -1)  # [T, H, D]


def test_a_two_bit_codebook_beats_uniform_int2_on_rotary_like_keys():
    """The reason for the codec: INT2 per channel (KIVI keys, groups of 32 tokens, 3 bits with its scale and zero
    point) against 4 channels per 8-bit code (2 bits), calibrated on other tokens of the same kind."""
    book = calibrate(_rotary_like(6000, 2, 32, seed=0), dims=4, bits=8)
    test = _rotary_like(1024, 2, 32, seed=7)
    assert book.bits_per_element == 2.0 and book.centroids.dtype == torch.float16
    codes = book.quantize(test)
    assert codes.shape == (1024, 2, 8) and codes.dtype == torch.uint8
    vq_error = (book.dequantize(codes) - test).pow(2).mean()
    int2 = get_quantizer("int2", group_size=32).for_keys(token_axis=0)
    int2_error = (int2.dequantize(int2.quantize(test)) - test).pow(2).mean()
    assert vq_error < 0.8 * int2_error, (float(vq_error), float(int2_error))
    # and a codebook learned on something else is no good: calibration is what the bits buy
    wrong = calibrate(torch.randn(6000, 2, 32, generator=torch.Generator().manual_seed(3)), dims=4, bits=8)
    assert (wrong.dequantize(wrong.quantize(test)) - test).pow(2).mean() > vq_error


def test_codes_are_the_nearest_centroid_and_come_back_through_a_file(tmp_path):
    samples = _rotary_like(800, 1, 16, seed=2)
    book = calibrate(samples, dims=2, bits=4, iters=10)
    x = samples[:5].reshape(5, 1, 1, 16)  # any leading shape
    codes = book.quantize(x)
    assert codes.shape == (5, 1, 1, 8)
    decoded = book.dequantize(codes)
    pairs = x.reshape(5, 16)[:, book.groups]  # [5, G, 2]
    every = book.centroids[0].float()  # [G, 16, 2]
    best = torch.cdist(pairs.transpose(0, 1), every).min(-1).values.transpose(0, 1)  # [5, G]
    got = (decoded.reshape(5, 16)[:, book.groups] - pairs).norm(dim=-1)
    assert torch.allclose(got, best, atol=1e-5)
    save_codebooks(tmp_path / "books.safetensors", {"5.keys": book}, {"calibrated_on": "test"})
    loaded, about = load_codebooks(tmp_path / "books.safetensors")
    assert about == {"calibrated_on": "test"} and set(loaded) == {"5.keys"}
    assert torch.equal(loaded["5.keys"].quantize(x), codes)
    with pytest.raises(ValueError, match="expected"):
        book.quantize(torch.zeros(3, 2, 16))
    assert isinstance(loaded["5.keys"], Codebook) and math.isclose(loaded["5.keys"].bits_per_element, 2.0)


def test_the_quest_bound_holds_for_coded_keys_with_bounds_from_what_is_read():
    """The block bound (max over a block of q.k <= sum_d max(q_d kmin_d, q_d kmax_d)) holds for every coded block when
    kmin/kmax come from the decoded keys; from the keys as they were it fails, since centroids stick out."""
    from kernels.reference import quest_scores

    book = calibrate(_rotary_like(6000, 1, 32, seed=0), dims=4, bits=8)
    keys = _rotary_like(64 * 16, 1, 32, seed=5).reshape(16, 64, 1, 32)  # 16 blocks of 64 tokens
    codes = book.quantize(keys)
    read = book.dequantize(codes)
    bounds = [book.block_bounds(codes[b]) for b in range(16)]
    kmin, kmax = torch.stack([lo for lo, _ in bounds]), torch.stack([hi for _, hi in bounds])  # [P, H, D]
    table = torch.arange(16).reshape(1, 1, 16)
    queries = torch.randn(200, 1, 1, 32, generator=torch.Generator().manual_seed(11))
    for q in queries:
        best = (read[:, :, 0] @ q[0, 0]).amax(1)  # [P]: the largest q.k a block's coded keys give
        assert (quest_scores(q, kmin, kmax, table)[0, 0] >= best - 1e-4).all()
    # A block of one key said over and over: its own bounds are that key, and a query along (centroid - key) reads
    # more from the coded block than those bounds allow.
    same = keys[3, :1].expand(64, 1, 32)
    coded = book.dequantize(book.quantize(same))
    q = (coded[0, 0] - same[0, 0]).reshape(1, 1, 32)
    table = torch.zeros(1, 1, 1, dtype=torch.long)
    original = quest_scores(q, same.amin(0)[None], same.amax(0)[None], table)[0, 0, 0]
    assert float(coded[0, 0] @ q[0, 0]) > float(original) + 1e-3
    lo, hi = book.block_bounds(book.quantize(same))
    assert float(quest_scores(q, lo[None], hi[None], table)[0, 0, 0]) >= float(coded[0, 0] @ q[0, 0]) - 1e-4
