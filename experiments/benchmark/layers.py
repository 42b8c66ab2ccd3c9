"""The attention layers measured: every variant's fast path against its reference computation (time, peak
memory, and the floor: the full-width output projection alone), and time against the number of tokens."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch

from experiments.benchmark.tools import Scale, forward_backward, peak_memory, time_it
from sa_conv.nn.attention import Impl, MultiHeadSelfAttention2d
from sa_conv.nn.encodings import (
    CompositeRelativeEncoding,
    GaussianEncoding,
    LearnedRelativeEncoding,
    QuadraticEncoding,
)

__all__ = ["BASELINE", "bench_scaling", "bench_variants", "projection_floor", "variants"]

BASELINE = (
    "reference: dense float32 probabilities (heads, N, N) shared by the batch, "
    "or (B, heads, N, N) with content"
)


def variants(
    dim: int, heads: int, grid: int, device: torch.device
) -> dict[str, tuple[MultiHeadSelfAttention2d, Impl]]:
    """Each attention variant at one size, with its fast path on ``device``."""
    content: Impl = "sdpa" if device.type == "cuda" else "tiled"
    return {
        "quadratic": (MultiHeadSelfAttention2d(dim, heads, encoding=QuadraticEncoding(heads)), "separable"),
        "gaussian": (MultiHeadSelfAttention2d(dim, heads, encoding=GaussianEncoding(heads)), "shared"),
        "learned": (
            MultiHeadSelfAttention2d(dim, heads, encoding=LearnedRelativeEncoding(heads, dim, max_size=grid)),
            "separable",
        ),
        "learned-content": (
            MultiHeadSelfAttention2d(
                dim, heads, encoding=LearnedRelativeEncoding(heads, dim, max_size=grid), content=True
            ),
            content,
        ),
        "composite": (
            MultiHeadSelfAttention2d(
                dim, heads, encoding=CompositeRelativeEncoding(heads, dim), content=True
            ),
            content,  # measured, though auto keeps the reference on a CPU (the bias is per image)
        ),
    }


def projection_floor(
    layer: MultiHeadSelfAttention2d, batch: int, grid: int, device: torch.device
) -> Callable[[], None]:
    """The unavoidable part of a full-width layer: its output projection ``Linear(heads * dim, dim)`` alone,
    forward and backward (input gradient included), on a ``(B, H, W, heads * dim)`` input."""
    proj = copy.deepcopy(layer.proj)
    z = torch.randn(batch, grid, grid, proj.in_features, device=device, requires_grad=True)
    return forward_backward(proj, z, torch.randn(batch, grid, grid, proj.out_features, device=device))


def bench_variants(scale: Scale, device: torch.device) -> list[dict[str, Any]]:
    """Each variant's reference and fast path, forward + backward: times, peak memory, and their ratios."""
    rows = []
    for name, (layer, fast) in variants(scale.dim, scale.heads, scale.grid, device).items():
        layer = layer.to(device).train()
        x = torch.randn(scale.batch, scale.grid, scale.grid, scale.dim, device=device, requires_grad=True)
        grad = torch.randn(scale.batch, scale.grid, scale.grid, scale.dim, device=device)
        row: dict[str, Any] = {"variant": name, "fast_path": fast}
        for impl in ("reference", fast):
            layer.impl = impl
            run = forward_backward(layer, x, grad)
            row[f"{impl if impl == 'reference' else 'fast'}_s"] = time_it(
                run, device, scale.min_time, scale.repeats
            )
            row[f"{impl if impl == 'reference' else 'fast'}_peak_mb"] = (
                peak_memory(run, layer, x, device) / 2**20
            )
        row["floor_s"] = time_it(
            projection_floor(layer, scale.batch, scale.grid, device), device, scale.min_time, scale.repeats
        )
        row["speedup"] = row["reference_s"] / row["fast_s"]
        row["floor_ratio"] = row["fast_s"] / row["floor_s"]
        row["memory_ratio"] = row["fast_peak_mb"] / row["reference_peak_mb"]
        rows.append(row)
    return rows


def bench_scaling(scale: Scale, device: torch.device) -> dict[str, Any]:
    """The quadratic layer's time against the number of tokens, and the fitted exponent of each path."""
    rows = []
    for grid in scale.scaling_grids:
        layer = MultiHeadSelfAttention2d(scale.dim, scale.heads, encoding=QuadraticEncoding(scale.heads)).to(
            device
        )
        x = torch.randn(scale.scaling_batch, grid, grid, scale.dim, device=device, requires_grad=True)
        grad = torch.randn_like(x)
        row: dict[str, Any] = {"grid": grid, "tokens": grid * grid}
        for impl in ("reference", "separable"):
            layer.impl = impl
            row[f"{impl}_s"] = time_it(
                forward_backward(layer, x, grad), device, scale.min_time, scale.repeats
            )
        rows.append(row)
    exponents = {}
    for impl in ("reference", "separable"):
        logs = [(math.log(r["tokens"]), math.log(r[f"{impl}_s"])) for r in rows]
        mx, my = sum(a for a, _ in logs) / len(logs), sum(b for _, b in logs) / len(logs)
        slope = sum((a - mx) * (b - my) for a, b in logs) / sum((a - mx) ** 2 for a, _ in logs)
        exponents[impl] = slope
    return {"rows": rows, "exponent": exponents}
