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
    allow_drop: bool | torch.Tensor = True,
    allowed: torch.Tensor | None = None,
) -> TierPlan:
    """Pick an option per block maximising ``sum score * fidelity`` with total bytes <= budget.

    ``protected`` blocks take the highest-fidelity option whatever it costs (sinks, recent window).
    ``max_fidelity`` ``[N]`` caps each block at its current fidelity: precision lost to quantization
    cannot be bought back. Options off the convex hull (never the best value per byte) are not used.
    ``allowed`` ``[N, len(options)]`` and a ``[N]`` ``allow_drop`` restrict each block to some
    options (per-modality tier policies, blocks pinned to their current format); blocks sharing a
    set of options share a hull, and all steps compete for the budget in one greedy pass.
    """
    n_blocks = int(scores.shape[0])
    n_options = len(options)
    scores = scores.float().clamp(min=0.0).cpu()
    best = max(range(n_options), key=lambda i: (options[i].fidelity, -options[i].block_bytes))
    protected = torch.zeros(n_blocks, dtype=torch.bool) if protected is None else protected.cpu().bool()
    cap = torch.full((n_blocks,), float("inf")) if max_fidelity is None else max_fidelity.float().cpu()
    allowed = torch.ones(n_blocks, n_options, dtype=torch.bool) if allowed is None else allowed.cpu().bool()
    drop_ok = torch.as_tensor(allow_drop, dtype=torch.bool).expand(n_blocks)
    patterns = torch.cat([allowed, drop_ok.view(-1, 1)], dim=1)
    unique, group = torch.unique(patterns, dim=0, return_inverse=True) if n_blocks else (patterns[:0], patterns[:0, 0].long())

    hulls = []
    for pattern in unique.tolist():
        points = [(o.block_bytes, o.fidelity, i) for i, o in enumerate(options) if pattern[i]]
        if pattern[-1]:
            points.append((0, 0.0, DROP))
        hull = _hull(points)
        if not hull:
            raise ValueError("a block has no storage option")
        hulls.append(hull)
    n_steps = max((len(h) - 1 for h in hulls), default=0)
    # Per group: base bytes/option and padded step tables (invalid steps cost nothing, gain nothing).
    base_bytes = torch.tensor([float(h[0][0]) for h in hulls], dtype=torch.float64)
    level_option = torch.full((len(hulls), n_steps + 1), DROP, dtype=torch.long)
    step_bytes = torch.ones(len(hulls), max(n_steps, 1), dtype=torch.float64)
    step_fid = torch.zeros(len(hulls), max(n_steps, 1), dtype=torch.float64)
    upper_fid = torch.full((len(hulls), max(n_steps, 1)), float("inf"), dtype=torch.float64)
    for g, hull in enumerate(hulls):
        for j, (b, f, option) in enumerate(hull):
            level_option[g, j] = option
            if j:
                step_bytes[g, j - 1] = b - hull[j - 1][0]
                step_fid[g, j - 1] = f - hull[j - 1][1]
                upper_fid[g, j - 1] = f

    fixed = float(protected.sum()) * options[best].block_bytes
    base_cost = float(base_bytes[group][~protected].sum()) if n_blocks else 0.0
    remaining = budget_bytes - fixed - base_cost
    level = torch.zeros(n_blocks, dtype=torch.long)  # index into the block's hull
    if n_steps and remaining > 0 and n_blocks:
        sb = step_bytes[group].t()  # [L, N]
        sf = step_fid[group].t()
        efficiency = scores.double().unsqueeze(0) * (sf / sb)
        valid = (~protected).unsqueeze(0) & (sf > 0) & (upper_fid[group].t() <= cap.double().unsqueeze(0) + 1e-6)
        flat_eff = efficiency.masked_fill(~valid, -1.0).flatten()  # step-major: lower steps first on ties
        order = torch.sort(flat_eff, descending=True, stable=True).indices
        cost = sb.flatten()[order]
        ok = valid.flatten()[order]
        cumulative = torch.cumsum(torch.where(ok, cost, torch.zeros_like(cost)), 0)
        taken = ok & (cumulative <= remaining)
        block_of_step = order % n_blocks
        level = torch.bincount(block_of_step[taken], minlength=n_blocks)
    chosen = level_option[group, level] if n_blocks else torch.zeros(0, dtype=torch.long)
    chosen = torch.where(protected, torch.full_like(chosen, best), chosen)
    option_bytes = torch.tensor([o.block_bytes for o in options] + [0], dtype=torch.float64)
    option_fid = torch.tensor([o.fidelity for o in options] + [0.0], dtype=torch.float64)
    total = int(option_bytes[chosen].sum())  # index -1 reads the appended "drop" entry
    value = float((scores.double() * option_fid[chosen]).sum())
    return TierPlan(level=chosen, total_bytes=total, kept_value=value, over_budget=total > budget_bytes)


def fewest_drops(
    scores: torch.Tensor,
    options: list[TierOption],
    budget_bytes: int,
    protected: torch.Tensor,
    allowed: torch.Tensor,
    droppable: torch.Tensor,
) -> torch.Tensor:
    """``[N]`` bool: the fewest lowest-scored droppable blocks whose dropping lets every other block
    fit at its cheapest allowed format (all droppable blocks when even that is not enough).

    Restricting a plan's drops to these keeps the most tokens readable: a block kept at a coarse
    format still answers where it was, a dropped one only through the summary (issue 3's retention).
    """
    n_blocks = int(scores.shape[0])
    option_bytes = torch.tensor([float(o.block_bytes) for o in options], dtype=torch.float64)
    best = max(range(len(options)), key=lambda i: (options[i].fidelity, -options[i].block_bytes))
    cheapest = option_bytes.expand(n_blocks, -1).masked_fill(~allowed.cpu().bool(), float("inf")).amin(dim=1)
    cheapest = torch.where(protected.cpu().bool(), option_bytes[best], cheapest)
    excess = float(cheapest.sum()) - budget_bytes
    chosen = torch.zeros(n_blocks, dtype=torch.bool)
    candidates = torch.nonzero(droppable.cpu().bool() & ~protected.cpu().bool()).flatten()
    if excess <= 0 or candidates.numel() == 0:
        return chosen
    order = candidates[torch.sort(scores.float().cpu()[candidates], stable=True).indices]
    freed = torch.cumsum(cheapest[order], 0)
    enough = int(torch.searchsorted(freed, torch.tensor([excess], dtype=torch.float64)).item())
    chosen[order[: enough + 1]] = True
    return chosen
