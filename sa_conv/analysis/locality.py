"""Locality metrics of attention probabilities ``(B|1, heads, N, N)`` on an height x width token grid.

Each metric is per head, averaged over queries (and over the batch); distances are in token-grid
pixels, shifts are key - query. A head is *sharp* when, on average over the queries, at least half of
its mass falls on a single pixel: it then acts like one tap of a convolution.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from sa_conv.nn.encodings import interior_queries, relative_shifts

__all__ = [
    "REGION_MASS",
    "SHARP_MASS",
    "Locality",
    "gaussian_alpha",
    "head_regions",
    "head_table",
    "interior_queries",
    "locality",
    "overlap_and_coverage",
    "peak_shift",
    "shift_profile",
]

SHARP_MASS = 0.5  # a head with >= half of its mass on one pixel attends like one tap of a convolution
REGION_MASS = 0.5  # a head's region: the fewest shifts that hold half of its mass


@dataclass(frozen=True)
class Locality:
    """Per-head metrics, each ``(heads,)``."""

    mean_distance: Tensor  # sum_k P[q, k] |k - q|: how far from the query a head looks
    radius90: Tensor  # smallest radius around the query holding 90% of the mass
    entropy: Tensor  # -sum_k P log P, in nats
    spread: Tensor  # sqrt(sum_k P |k - centroid_q|^2): how concentrated, wherever it looks
    peak_mass: Tensor  # max_k P[q, k]: the mass on the single most attended pixel

    @property
    def sharp(self) -> Tensor:
        """Boolean ``(heads,)``: at least half of the head's mass is on one pixel."""
        return self.peak_mass >= SHARP_MASS


def gaussian_alpha(inverse_covariance: Tensor) -> Tensor:
    """Sharpness of Gaussian heads from their inverse covariances ``(..., 2, 2)``: sqrt(det A) / 2, the
    alpha of the isotropic head with the same area (alpha = s^2 / 2 for A = s^2 I)."""
    return torch.linalg.det(inverse_covariance.double()).clamp_min(0).sqrt().float() / 2


def locality(
    probs: Tensor, height: int, width: int, *, mass: float = 0.9, queries: Tensor | None = None
) -> Locality:
    """Locality metrics of attention probabilities ``(B|1, heads, N, N)``, N = height * width.

    ``queries``: indices of the queries to average over (default all), e.g. the interior ones.
    """
    if probs.ndim != 4 or probs.shape[-1] != height * width or probs.shape[-2] != height * width:
        raise ValueError(
            f"probs must be (B, heads, {height * width}, {height * width}), got {tuple(probs.shape)}"
        )
    p = probs.detach().double()
    if queries is not None:
        p = p[:, :, queries.to(p.device)]  # (B, heads, Q, N)
    n = height * width
    delta = relative_shifts(height, width, p.device).to(p.dtype)  # (N, N, 2)
    if queries is not None:
        delta = delta[queries.to(p.device)]  # (Q, N, 2)
    dist = delta.norm(dim=-1)  # (Q, N)
    mean_distance = (p * dist).sum(-1)  # (B, heads, Q)

    order = dist.argsort(dim=-1, stable=True)  # keys of each query, nearest first
    sorted_mass = p.gather(-1, order.expand_as(p)).cumsum(-1)  # (B, heads, Q, N)
    first = (sorted_mass < mass - 1e-9).sum(-1, keepdim=True).clamp_max(n - 1)
    radius = dist.gather(-1, order).expand(*p.shape).gather(-1, first).squeeze(-1)  # (B, heads, Q)

    entropy = -(p * p.clamp_min(1e-300).log()).sum(-1)  # (B, heads, Q)
    centroid = torch.einsum("bhqk,qkc->bhqc", p, delta)  # (B, heads, Q, 2): mean shift
    sq = ((delta[None, None] - centroid[..., None, :]) ** 2).sum(-1)  # (B, heads, Q, N)
    spread = (p * sq).sum(-1).clamp_min(0).sqrt()  # (B, heads, Q)
    peak = p.amax(-1)  # (B, heads, Q)

    def mean(t: Tensor) -> Tensor:
        return t.mean(dim=(0, 2)).float()

    return Locality(mean(mean_distance), mean(radius), mean(entropy), mean(spread), mean(peak))


def peak_shift(
    probs: Tensor, height: int, width: int, *, queries: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Each head's most frequent peak shift and how constant it is, over queries (and images).

    Returns ``shift`` ``(heads, 2)`` as (dy, dx), the shift key - query of the most attended pixel
    that occurs most often over the (image, query) pairs, and ``constancy`` ``(heads,)``, the fraction
    of those pairs whose most attended pixel sits at that shift. A head whose peak follows the query at
    a fixed offset, like one tap of a convolution, has constancy 1. Ties between shifts go to the smallest
    (dy, dx) in lexicographic order, ties between keys to the first key in row-major order: for a head
    without a peak (peak mass ~ 1/N) the shift says nothing.
    """
    if probs.ndim != 4 or probs.shape[-1] != height * width or probs.shape[-2] != height * width:
        raise ValueError(
            f"probs must be (B, heads, {height * width}, {height * width}), got {tuple(probs.shape)}"
        )
    p = probs.detach()
    delta = relative_shifts(height, width, p.device)  # (N, N, 2)
    if queries is not None:
        p = p[:, :, queries.to(p.device)]  # (B, heads, Q, N)
        delta = delta[queries.to(p.device)]  # (Q, N, 2)
    if p.shape[0] == 0 or p.shape[2] == 0:
        raise ValueError(f"no (image, query) pair to count: probs {tuple(probs.shape)}, {p.shape[2]} queries")
    top = p.argmax(-1)  # (B, heads, Q): the most attended key of each query
    q = torch.arange(delta.shape[0], device=p.device)
    shifts = delta[q, top]  # (B, heads, Q, 2)
    codes = (shifts[..., 0] + height) * (2 * width + 1) + shifts[..., 1] + width  # (B, heads, Q), ordered
    codes = codes.transpose(0, 1).flatten(1)  # (heads, B * Q)
    counts = torch.zeros(codes.shape[0], (2 * height + 1) * (2 * width + 1), device=p.device)
    counts.scatter_add_(1, codes, torch.ones_like(codes, dtype=counts.dtype))  # (heads, codes)
    best = counts.argmax(-1)  # (heads,): the first of the most frequent codes
    constancy = counts.gather(1, best[:, None]).squeeze(1) / codes.shape[1]
    shift = torch.stack([best // (2 * width + 1) - height, best % (2 * width + 1) - width], dim=-1)
    return shift, constancy


def head_table(
    probs: Tensor, height: int, width: int, *, queries: Tensor | None = None
) -> list[dict[str, float | bool | list[int]]]:
    """One row per head: mean distance, peak mass, sharp, peak shift and its constancy (a JSON record)."""
    m = locality(probs, height, width, queries=queries)
    shift, constancy = peak_shift(probs, height, width, queries=queries)
    return [
        {
            "mean_distance": float(m.mean_distance[h]),
            "peak_mass": float(m.peak_mass[h]),
            "sharp": bool(m.sharp[h]),
            "peak_shift": [int(v) for v in shift[h]],
            "shift_constancy": float(constancy[h]),
        }
        for h in range(len(constancy))
    ]


def shift_profile(probs: Tensor, height: int, width: int, *, queries: Tensor | None = None) -> Tensor:
    """Each head's mean attention by shift key - query, over (images, queries): ``(heads, 2 height - 1,
    2 width - 1)``, index ``[h, dy + height - 1, dx + width - 1]``; each head's profile sums to 1."""
    if probs.ndim != 4 or probs.shape[-1] != height * width or probs.shape[-2] != height * width:
        raise ValueError(
            f"probs must be (B, heads, {height * width}, {height * width}), got {tuple(probs.shape)}"
        )
    p = probs.detach().double()
    delta = relative_shifts(height, width, p.device)  # (N, N, 2)
    if queries is not None:
        p = p[:, :, queries.to(p.device)]  # (B, heads, Q, N)
        delta = delta[queries.to(p.device)]  # (Q, N, 2)
    codes = (delta[..., 0] + height - 1) * (2 * width - 1) + delta[..., 1] + width - 1  # (Q, N)
    b, heads, q, n = p.shape
    profile = torch.zeros(heads, (2 * height - 1) * (2 * width - 1), dtype=p.dtype, device=p.device)
    flat = p.permute(1, 0, 2, 3).reshape(heads, b * q * n)  # (heads, B * Q * N)
    profile.scatter_add_(1, codes.flatten().repeat(b)[None].expand(heads, -1), flat)
    return (profile / (b * q)).view(heads, 2 * height - 1, 2 * width - 1)


def head_regions(profile: Tensor, mass: float = REGION_MASS) -> Tensor:
    """Each head's region: the fewest shifts holding at least ``mass`` of its profile (``shift_profile``),
    the heaviest first; boolean ``(heads, rows, cols)``."""
    heads = profile.shape[0]
    flat = profile.reshape(heads, -1)
    order = flat.argsort(dim=-1, descending=True, stable=True)
    before = flat.gather(-1, order).cumsum(-1) - flat.gather(-1, order)  # mass of the heavier shifts
    taken = before < mass - 1e-9  # (heads, shifts) in the sorted order: until the mass is reached
    regions = torch.zeros_like(flat, dtype=torch.bool).scatter(-1, order, taken)
    return regions.view_as(profile)


def overlap_and_coverage(regions: Tensor) -> tuple[float, int]:
    """How the heads' regions ``(heads, rows, cols)`` overlap and cover: the mean over head pairs of
    |A and B| / |A or B| (0: disjoint, 1: the same pixels; 0 for one head), and the pixels in their union."""
    flat = regions.reshape(regions.shape[0], -1).double()  # (heads, shifts)
    inter = flat @ flat.T  # (heads, heads)
    sizes = flat.sum(-1)
    union = sizes[:, None] + sizes[None, :] - inter
    pairs = torch.triu_indices(len(sizes), len(sizes), offset=1)
    jaccard = inter[pairs[0], pairs[1]] / union[pairs[0], pairs[1]].clamp_min(1)
    overlap = float(jaccard.mean()) if jaccard.numel() else 0.0
    return overlap, int(regions.any(0).sum())
