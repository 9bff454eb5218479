"""Budget -> thresholds: choose keep-full / quantize / drop per block so the bytes fit the budget.

Each block picks one option (full precision, a quantized format, or drop); an option is worth
``score * fidelity`` and costs its bytes. That is a multiple-choice knapsack; we solve it greedily
by value per byte over the upper convex hull of the options, which is optimal up to one partial
step (the classic LP-relaxation argument). The thresholds between tiers thus move with the budget
instead of being a fixed top-k.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TierOption:
    """One way to store a block: its measured bytes and how much of the block's value it keeps."""

    name: str
    block_bytes: int
    fidelity: float


@dataclass
class TierPlan:
    level: torch.Tensor  # [N] index into the options given to plan_tiers; -1 = drop
    total_bytes: int
    kept_value: float
    over_budget: bool  # even the cheapest allowed plan does not fit


DROP = -1


def budget_from_ratio(ratio: float, full_bytes: int) -> int:
    """A budget as a fraction of the full-precision cache bytes."""
    if not 0.0 <= ratio:
        raise ValueError("budget ratio must be >= 0")
    return int(ratio * full_bytes)


def _hull(points: list[tuple[int, float, int]]) -> list[tuple[int, float, int]]:
    """Upper concave hull of (bytes, fidelity, option index), cheapest first, dominated points removed."""
    points = sorted(points, key=lambda p: (p[0], -p[1]))
    useful: list[tuple[int, float, int]] = []
    for p in points:
        if useful and p[1] <= useful[-1][1]:
            continue  # costs more, keeps no more
        if useful and p[0] == useful[-1][0]:
            useful.pop()
        useful.append(p)
    hull: list[tuple[int, float, int]] = []
    for p in useful:
        while len(hull) >= 2:
            (b0, f0, _), (b1, f1, _) = hull[-2], hull[-1]
            # Drop the middle point if it lies on or below the segment hull[-2] -> p.
            if (f1 - f0) * (p[0] - b0) <= (p[1] - f0) * (b1 - b0):
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def plan_tiers(
    scores: torch.Tensor,
    options: list[TierOption],
    budget_bytes: int,
    protected: torch.Tensor | None = None,
    max_fidelity: torch.Tensor | None = None,
    allow_drop: bool = True,
) -> TierPlan:
    """Pick an option per block maximising ``sum score * fidelity`` with total bytes <= budget.

    ``protected`` blocks take the highest-fidelity option whatever it costs (sinks, recent window).
    ``max_fidelity`` ``[N]`` caps each block at its current fidelity: precision lost to quantization
    cannot be bought back. Options off the convex hull (never the best value per byte) are not used.
    """
    n_blocks = int(scores.shape[0])
    scores = scores.float().clamp(min=0.0).cpu()
    points = [(o.block_bytes, o.fidelity, i) for i, o in enumerate(options)]
    if allow_drop:
        points.append((0, 0.0, DROP))
    hull = _hull(points)
    if not hull:
        raise ValueError("no storage option")
    best = max(range(len(options)), key=lambda i: (options[i].fidelity, -options[i].block_bytes))
    protected = torch.zeros(n_blocks, dtype=torch.bool) if protected is None else protected.cpu().bool()
    cap = torch.full((n_blocks,), float("inf")) if max_fidelity is None else max_fidelity.float().cpu()

    hull_bytes = torch.tensor([p[0] for p in hull], dtype=torch.float64)
    hull_fid = torch.tensor([p[1] for p in hull], dtype=torch.float64)
    hull_option = torch.tensor([p[2] for p in hull], dtype=torch.long)

    fixed = float(protected.sum()) * options[best].block_bytes
    base_cost = float((~protected).sum()) * float(hull_bytes[0])
    remaining = budget_bytes - fixed - base_cost
    level = torch.zeros(n_blocks, dtype=torch.long)  # index into the hull
    if len(hull) > 1 and remaining > 0:
        step_bytes = hull_bytes[1:] - hull_bytes[:-1]  # [L]
        step_fid = hull_fid[1:] - hull_fid[:-1]
        efficiency = scores.double().unsqueeze(0) * (step_fid / step_bytes).unsqueeze(1)  # [L, N]
        valid = (~protected).unsqueeze(0) & (hull_fid[1:].unsqueeze(1) <= cap.double().unsqueeze(0) + 1e-6)
        flat_eff = efficiency.masked_fill(~valid, -1.0).flatten()  # step-major: lower steps first on ties
        order = torch.sort(flat_eff, descending=True, stable=True).indices
        cost = step_bytes.unsqueeze(1).expand_as(efficiency).flatten()[order]
        ok = valid.flatten()[order]
        cumulative = torch.cumsum(torch.where(ok, cost, torch.zeros_like(cost)), 0)
        taken = ok & (cumulative <= remaining)
        block_of_step = order % n_blocks
        level = torch.bincount(block_of_step[taken], minlength=n_blocks)
    chosen = hull_option[level]
    chosen = torch.where(protected, torch.full_like(chosen, best), chosen)
    option_bytes = torch.tensor([o.block_bytes for o in options] + [0], dtype=torch.float64)
    option_fid = torch.tensor([o.fidelity for o in options] + [0.0], dtype=torch.float64)
    total = int(option_bytes[chosen].sum())  # index -1 reads the appended "drop" entry
    value = float((scores.double() * option_fid[chosen]).sum())
    return TierPlan(level=chosen, total_bytes=total, kept_value=value, over_budget=total > budget_bytes)
