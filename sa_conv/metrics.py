"""Locality metrics of attention probabilities ``(B|1, heads, N, N)`` on an height x width token grid.

Each metric is per head, averaged over queries (and over the batch); distances are in token-grid
pixels, shifts are key - query.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from sa_conv.encodings import relative_shifts

__all__ = ["LOCALIZED_SPREAD", "Locality", "locality"]

LOCALIZED_SPREAD = 1.0  # a head whose mass lies within ~1 pixel of its centroid attends to "one pixel"


@dataclass(frozen=True)
class Locality:
    """Per-head metrics, each ``(heads,)``."""

    mean_distance: Tensor  # sum_k P[q, k] |k - q|: how far from the query a head looks
    radius90: Tensor  # smallest radius around the query holding 90% of the mass
    entropy: Tensor  # -sum_k P log P, in nats
    spread: Tensor  # sqrt(sum_k P |k - centroid_q|^2): how concentrated, wherever it looks

    @property
    def localized(self) -> Tensor:
        """Boolean ``(heads,)``: the head concentrates on about one pixel (spread <= 1 pixel)."""
        return self.spread <= LOCALIZED_SPREAD


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
    delta = relative_shifts(height, width, p.device).to(p.dtype)  # (N, N, 2)
    dist = delta.norm(dim=-1)  # (N, N)
    mean_distance = (p * dist).sum(-1)  # (B, heads, N)

    order = dist.argsort(dim=-1, stable=True)  # keys of each query, nearest first
    sorted_mass = p.gather(-1, order.expand_as(p)).cumsum(-1)  # (B, heads, N, N)
    first = (sorted_mass < mass - 1e-9).sum(-1, keepdim=True).clamp_max(dist.shape[-1] - 1)
    radius = dist.gather(-1, order).expand(*p.shape).gather(-1, first).squeeze(-1)  # (B, heads, N)

    entropy = -(p * p.clamp_min(1e-300).log()).sum(-1)  # (B, heads, N)
    centroid = torch.einsum("bhqk,qkc->bhqc", p, delta)  # (B, heads, N, 2): mean shift
    sq = ((delta[None, None] - centroid[..., None, :]) ** 2).sum(-1)  # (B, heads, N, N)
    spread = (p * sq).sum(-1).clamp_min(0).sqrt()  # (B, heads, N)

    def mean(t: Tensor) -> Tensor:
        if queries is not None:
            t = t[:, :, queries.to(t.device)]
        return t.mean(dim=(0, 2)).float()

    return Locality(mean(mean_distance), mean(radius), mean(entropy), mean(spread))
