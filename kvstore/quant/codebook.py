"""Coupled (vector) quantization of K/V channels: a few channels share one 8-bit code, read from a learned codebook.

Uniform INT2 spends 2 bits on each element and another bit on its group's fp16 scale and zero point, and still loses
the most on keys (bench/kv_formats.py). Channels of a head are not independent: the rotary embedding turns each pair
of channels (c, c + D/2) together, and a head's channels move together with what the token says. A codebook learned
on meeting speech (k-means per KV head and channel group, CQ: "KV Cache is 1 Bit Per Channel", Zhang et al. 2024)
spends its 256 entries where the pairs actually are, with no per-group scale at all: 4 channels per 8-bit code is 2
bits per element, a third fewer than INT2's 3.

The codebooks belong to the model, not to a meeting: calibrated once on the tuning meetings (bench/kv_calibrate.py)
and shipped beside the project, like weights. This module is the torch reference (calibration, quantize,
dequantize). It is not yet a row of kernels.formats: the cache's blocks and the decode kernels do not read it yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch


def rotary_groups(head_dim: int, dims: int) -> torch.Tensor:
    """Channel groups of ``dims`` channels ``[head_dim // dims, dims]`` that keep each rotary pair (c, c + D/2)
    together (transformers' rotate_half layout), so a pair the embedding turns is coded as one point."""
    if dims <= 0 or dims % 2 or head_dim % dims or head_dim % 2:
        raise ValueError(f"groups of {dims} channels need an even count that divides head_dim {head_dim}")
    half, per = head_dim // 2, dims // 2
    return torch.tensor([[c + offset for c in range(start, start + per) for offset in (0, half)]
                         for start in range(0, half, per)])


def _nearest(points: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """Index of the nearest centroid: ``points [B, N, d]``, ``centroids [B, K, d]`` -> ``[B, N]``."""
    scores = points @ centroids.transpose(1, 2) - 0.5 * (centroids * centroids).sum(-1)[:, None, :]
    return scores.argmax(-1)  # |x - c|^2 = |x|^2 - 2 (x.c - |c|^2 / 2)


def kmeans(points: torch.Tensor, k: int, iters: int = 30, seed: int = 0) -> torch.Tensor:
    """Lloyd's k-means on ``points [B, N, d]`` (B problems at once), k-means++ seeding; centroids ``[B, K, d]``.
    An empty cluster keeps its centroid. Deterministic for a seed."""
    b, n, d = points.shape
    if n < k:
        raise ValueError(f"{n} calibration points cannot place {k} centroids")
    gen = torch.Generator().manual_seed(seed)
    rows = torch.arange(b)
    first = torch.randint(n, (b,), generator=gen)
    centroids = points[rows, first][:, None, :]
    closest = ((points - centroids) ** 2).sum(-1)
    for _ in range(1, k):  # k-means++: far points are likelier seeds
        pick = torch.multinomial(closest.clamp(min=1e-12), 1, generator=gen)[:, 0]
        new = points[rows, pick][:, None, :]
        centroids = torch.cat([centroids, new], 1)
        closest = torch.minimum(closest, ((points - new) ** 2).sum(-1))
    for _ in range(iters):
        assign = _nearest(points, centroids)
        sums = torch.zeros(b, k, d).scatter_add_(1, assign[..., None].expand(b, n, d), points)
        counts = torch.zeros(b, k).scatter_add_(1, assign, torch.ones(b, n))
        centroids = torch.where(counts[..., None] > 0, sums / counts.clamp(min=1)[..., None], centroids)
    return centroids


@dataclass(frozen=True)
class Codebook:
    """One layer's keys or values: ``centroids [H, G, K, dims]`` per KV head and channel group ``groups [G, dims]``."""

    centroids: torch.Tensor
    groups: torch.Tensor

    @property
    def dims(self) -> int:
        return self.groups.shape[1]

    @property
    def bits(self) -> int:
        return int(math.log2(self.centroids.shape[2]))

    @property
    def bits_per_element(self) -> float:
        """Stored bits per K or V element: one code per group, nothing else (the codebook is the model's)."""
        return self.bits / self.dims

    @property
    def head_dim(self) -> int:
        return self.groups.numel()

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., H, D]`` -> ``[H, G, N, dims]`` (N: every leading position)."""
        heads, groups = self.centroids.shape[0], self.groups.shape[0]
        if x.shape[-2:] != (heads, self.head_dim):
            raise ValueError(f"expected [..., {heads}, {self.head_dim}], got {tuple(x.shape)}")
        flat = x.reshape(-1, heads, self.head_dim).float()[:, :, self.groups]  # [N, H, G, dims]
        return flat.permute(1, 2, 0, 3).reshape(heads * groups, -1, self.dims)

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., H, D]`` -> uint8 codes ``[..., H, G]``."""
        heads, groups = self.centroids.shape[:2]
        books = self.centroids.float().reshape(heads * groups, -1, self.dims)
        codes = _nearest(self._split(x), books)  # [H*G, N]
        return codes.reshape(heads, groups, -1).permute(2, 0, 1).reshape(*x.shape[:-1], groups).to(torch.uint8)

    def dequantize(self, codes: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """uint8 ``codes [..., H, G]`` -> ``[..., H, D]`` in ``dtype``."""
        heads, groups = self.centroids.shape[:2]
        lead = codes.shape[:-2]
        index = codes.reshape(-1, heads, groups).long()  # [N, H, G]
        picked = self.centroids[torch.arange(heads)[None, :, None], torch.arange(groups)[None, None, :], index]
        out = torch.empty(index.shape[0], heads, self.head_dim, dtype=picked.dtype)
        out[:, :, self.groups] = picked  # [N, H, G, dims] back to the channels they came from
        return out.reshape(*lead, heads, self.head_dim).to(dtype)

    def block_bounds(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel key bounds ``(kmin, kmax)`` ``[H, D]`` of one block's ``codes [T, H, G]``, taken from the decoded
        keys: attention reads the centroids, which can lie outside the block's own keys, so bounds of the keys as
        they were would not bound what is read (the Quest block bound, kernels.reference.quest_scores)."""
        decoded = self.dequantize(codes)
        return decoded.amin(0), decoded.amax(0)


def calibrate(samples: torch.Tensor, dims: int = 4, bits: int = 8, iters: int = 30, seed: int = 0,
              max_points: int = 20000) -> Codebook:
    """Learn a codebook from ``samples [N, H, D]`` (one layer's keys or values on calibration meetings): k-means
    with ``2**bits`` centroids per KV head and rotary channel group of ``dims``; at most ``max_points`` samples."""
    if samples.ndim != 3:
        raise ValueError(f"calibration samples are [tokens, heads, head_dim], got {tuple(samples.shape)}")
    if not 1 <= bits <= 8:
        raise ValueError(f"codes are one byte: bits must be 1..8, got {bits}")
    n, heads, head_dim = samples.shape
    groups = rotary_groups(head_dim, dims)
    if n > max_points:
        samples = samples[torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:max_points]]
    points = samples.float()[:, :, groups].permute(1, 2, 0, 3).reshape(heads * groups.shape[0], -1, dims)
    centroids = kmeans(points, 1 << bits, iters, seed)
    return Codebook(centroids.reshape(heads, groups.shape[0], 1 << bits, dims).to(torch.float16), groups)


def save_codebooks(path: Path, books: dict[str, Codebook], about: dict[str, str] | None = None) -> None:
    """Write ``books`` (e.g. ``{"5.keys": ..., "5.values": ...}``, by layer) as safetensors, with ``about`` as
    its metadata (what they were calibrated on)."""
    from safetensors.torch import save_file

    tensors = {}
    for name, book in books.items():
        tensors[f"{name}.centroids"] = book.centroids.contiguous()
        tensors[f"{name}.groups"] = book.groups.contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=dict(about or {}))


def load_codebooks(path: Path) -> tuple[dict[str, Codebook], dict[str, str]]:
    """The codebooks in ``path`` by name, and the metadata saved with them."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        names = {key.rsplit(".", 1)[0] for key in f.keys()}
        books = {name: Codebook(f.get_tensor(f"{name}.centroids"), f.get_tensor(f"{name}.groups")) for name in names}
        return books, dict(f.metadata() or {})
