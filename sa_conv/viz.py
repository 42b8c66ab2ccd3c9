"""Pure figure functions: tensors in, a matplotlib ``Figure`` out (Agg backend, no pyplot state)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Ellipse, Rectangle
from torch import Tensor

__all__ = [
    "attention_grid",
    "centre_trajectories",
    "conversion_figure",
    "locality_summary",
    "mass_levels",
]

CMAP = "viridis"


def mass_levels(p: np.ndarray, masses: Sequence[float] = (0.5, 0.9)) -> list[float]:
    """Thresholds t such that the pixels with probability >= t hold each given mass (ascending)."""
    flat = np.sort(p.ravel())[::-1]
    cum = np.cumsum(flat)
    levels = {float(flat[min(int(np.searchsorted(cum, m)), flat.size - 1)]) for m in masses}
    return sorted(levels)


def _cell(ax, p: np.ndarray, query: tuple[int, int] | None, contours: bool = True) -> None:
    ax.imshow(p, cmap=CMAP, interpolation="nearest")
    if contours and p.max() > p.min():
        levels = mass_levels(p)
        if len(levels) == 2 or (len(levels) == 1 and levels[0] > p.min()):
            ax.contour(p, levels=levels, colors=["white", "orange"][: len(levels)], linewidths=0.7)
    if query is not None:
        ax.add_patch(
            Rectangle((query[1] - 0.5, query[0] - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.2)
        )
    ax.set_xticks([])
    ax.set_yticks([])


def attention_grid(
    maps: Sequence[Tensor],
    height: int,
    width: int,
    query: tuple[int, int],
    *,
    title: str | None = None,
) -> Figure:
    """Rows = layers, columns = heads: each cell the probabilities of one query over the grid.

    ``maps``: one ``(B|1, heads, N, N)`` tensor per layer (averaged over B). The query pixel is outlined
    in red; contours enclose 50% (white) and 90% (orange) of the mass.
    """
    layers, heads = len(maps), maps[0].shape[1]
    q = query[0] * width + query[1]
    fig = Figure(figsize=(1.3 * heads + 0.6, 1.3 * layers + 0.6), constrained_layout=True)
    axes = fig.subplots(layers, heads, squeeze=False)
    for i, m in enumerate(maps):
        probs = m.detach().float().mean(0)[:, q].reshape(heads, height, width).cpu().numpy()  # (heads, H, W)
        for h in range(heads):
            _cell(axes[i, h], probs[h], query)
            if i == 0:
                axes[i, h].set_title(f"head {h + 1}", fontsize=8)
        axes[i, 0].set_ylabel(f"layer {i + 1}", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def centre_trajectories(
    history: Tensor,
    *,
    steps: Sequence[int] | None = None,
    inverse_covariance: Tensor | None = None,
    extent: float = 8.0,
    title: str | None = None,
) -> Figure:
    """Each head's centre of attention per layer over training: one panel per layer.

    ``history`` ``(T, layers, heads, 2)`` in (dy, dx); lines from start (dot) to end (cross), drawn
    with x to the right and y down like the image. With ``inverse_covariance`` ``(layers, heads, 2, 2)``
    (generalized Gaussian) each head's final 1-sigma covariance ellipse is drawn too.
    """
    hist = history.detach().float().cpu().numpy()
    t, layers, heads, _ = hist.shape
    cols = min(layers, 3)
    rows = math.ceil(layers / cols)
    fig = Figure(figsize=(3.2 * cols, 3.2 * rows), constrained_layout=True)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    colors = matplotlib.colormaps["tab20"](np.linspace(0, 1, max(heads, 2)))
    for layer in range(layers):
        ax = axes[layer]
        for h in range(heads):
            dy, dx = hist[:, layer, h, 0], hist[:, layer, h, 1]
            ax.plot(dx, dy, color=colors[h], linewidth=1)
            ax.plot(dx[0], dy[0], "o", color=colors[h], markersize=3)
            ax.plot(dx[-1], dy[-1], "x", color=colors[h], markersize=6)
            if inverse_covariance is not None:
                cov = torch.linalg.inv(inverse_covariance[layer, h].detach().double().cpu()).numpy()
                vals, vecs = np.linalg.eigh(cov)
                # (dy, dx) covariance -> axis-aligned drawing in (x=dx, y=dy)
                angle = math.degrees(math.atan2(vecs[0, 1], vecs[1, 1]))
                w, hgt = 2 * np.sqrt(np.clip(vals[1], 0, 1e4)), 2 * np.sqrt(np.clip(vals[0], 0, 1e4))
                ax.add_patch(
                    Ellipse((dx[-1], dy[-1]), w, hgt, angle=angle, fill=False, color=colors[h], lw=0.8)
                )
        ax.plot(0, 0, "s", color="red", markersize=5)  # the query pixel
        ax.set_xlim(-extent, extent)
        ax.set_ylim(extent, -extent)
        ax.set_aspect("equal")
        ax.grid(True, linewidth=0.3)
        ax.set_title(f"layer {layer + 1}", fontsize=9)
        ax.set_xlabel("dx", fontsize=8)
        ax.set_ylabel("dy", fontsize=8)
    for ax in axes[layers:]:
        ax.set_visible(False)
    subtitle = f"{t} snapshots" + (f", steps {steps[0]}..{steps[-1]}" if steps else "")
    fig.suptitle(
        f"{title + ': ' if title else ''}centres of attention during training ({subtitle})", fontsize=10
    )
    return fig


def locality_summary(
    distances: Tensor, *, localized: Tensor | None = None, title: str | None = None
) -> Figure:
    """Mean attention distance of every head, per layer ``(layers, heads)``; localized heads filled."""
    d = distances.detach().float().cpu().numpy()
    layers, heads = d.shape
    fig = Figure(figsize=(1.0 + 0.8 * layers, 3.2), constrained_layout=True)
    ax = fig.subplots()
    for layer in range(layers):
        xs = np.full(heads, layer + 1) + np.linspace(-0.15, 0.15, heads)
        loc = localized[layer].cpu().numpy() if localized is not None else np.zeros(heads, bool)
        ax.scatter(xs[loc], d[layer, loc], color="tab:blue", s=18, label="localized" if layer == 0 else None)
        ax.scatter(
            xs[~loc],
            d[layer, ~loc],
            facecolor="none",
            edgecolor="tab:blue",
            s=18,
            label="spread out" if layer == 0 and localized is not None else None,
        )
    ax.plot(np.arange(1, layers + 1), d.mean(1), color="black", linewidth=1, label="mean")
    ax.set_xticks(np.arange(1, layers + 1))
    ax.set_xlabel("layer")
    ax.set_ylabel("mean attention distance (pixels)")
    ax.legend(fontsize=7)
    ax.set_title(title or "locality per layer and head", fontsize=10)
    return fig


def conversion_figure(
    kernel: Tensor, centres: Tensor, probs: Tensor, height: int, width: int, query: tuple[int, int]
) -> Figure:
    """Theorem 1 on one picture: the kernel's taps, the heads' centres on that grid, and the heads'
    attention at one query (summed over heads) covering exactly the receptive field.

    ``kernel`` ``(out, in, Kh, Kw)``, ``centres`` ``(heads, 2)``, ``probs`` ``(1, heads, N, N)``.
    """
    k = kernel.detach().float().cpu()
    kh, kw = k.shape[-2:]
    norm = k.flatten(0, 1).norm(dim=0).numpy()  # (Kh, Kw): weight norm of each tap
    c = centres.detach().float().cpu().numpy()
    fig = Figure(figsize=(10, 3.4), constrained_layout=True)
    ax_k, ax_c, ax_p = fig.subplots(1, 3)
    ax_k.imshow(norm, cmap=CMAP)
    ax_k.set_title(f"kernel {kh}x{kw}: |W[:, :, ky, kx]|", fontsize=9)
    ax_k.set_xticks(range(kw))
    ax_k.set_yticks(range(kh))
    ax_c.scatter(c[:, 1], c[:, 0], s=60, c=np.arange(len(c)), cmap="tab20")
    for h, (dy, dx) in enumerate(c):
        ax_c.annotate(str(h + 1), (dx, dy), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax_c.plot(0, 0, "s", color="red", markersize=5, fillstyle="none")
    pad = 1
    ax_c.set_xlim(c[:, 1].min() - pad, c[:, 1].max() + pad)
    ax_c.set_ylim(c[:, 0].max() + pad, c[:, 0].min() - pad)
    ax_c.set_aspect("equal")
    ax_c.grid(True, linewidth=0.3)
    ax_c.set_title(f"{len(c)} head centres Delta_h = tap shifts", fontsize=9)
    q = query[0] * width + query[1]
    total = probs.detach().float().cpu()[0, :, q].sum(0).reshape(height, width).numpy()
    _cell(ax_p, total, query, contours=False)
    ax_p.set_title("attention of all heads at the query (sum)", fontsize=9)
    return fig
