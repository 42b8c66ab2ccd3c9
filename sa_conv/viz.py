"""Pure figure functions: tensors in, a matplotlib ``Figure`` out (Agg backend, no pyplot state).

Attention cells: colour = probability divided by the head's own peak (one colour bar, 0..1; the cell's
title gives the peak), the red square is the query pixel, and the contours enclose 50% (white) and 90%
(orange) of the head's attention mass. Centre figures draw each head's Gaussian at its centre with the
circles (ellipses) holding 50% (solid) and 90% (dotted) of its mass, as the paper's Figures 3-4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Ellipse, Rectangle
from torch import Tensor

__all__ = [
    "attention_grid",
    "centre_plot",
    "conversion_figure",
    "layer_heads",
    "locality_over_training",
    "locality_summary",
    "mass_levels",
    "mass_radius",
]

CMAP = "viridis"
CONTOURS = ("orange", "white")  # for the ascending levels: the 90% boundary, then the 50% one
CONTOUR_NOTE = "contours: 50% (white) and 90% (orange) of the mass; red square: query"


def mass_levels(p: np.ndarray, masses: Sequence[float] = (0.5, 0.9)) -> list[float]:
    """Thresholds t such that the pixels with probability >= t hold each given mass (ascending)."""
    flat = np.sort(p.ravel())[::-1]
    cum = np.cumsum(flat)
    levels = {float(flat[min(int(np.searchsorted(cum, m)), flat.size - 1)]) for m in masses}
    return sorted(levels)


def mass_radius(mass: float) -> float:
    """Mahalanobis radius r of a 2D Gaussian whose ellipse d^T A d = r^2 holds ``mass``: sqrt(-2 ln(1-m))."""
    return math.sqrt(-2.0 * math.log(1.0 - mass))


def _cell(ax, p: np.ndarray, query: tuple[int, int] | None, contours: bool = True):
    """One attention map, scaled to its own peak; returns the image (for a colour bar)."""
    image = ax.imshow(
        p / max(float(p.max()), 1e-30), cmap=CMAP, norm=Normalize(0, 1), interpolation="nearest"
    )
    if contours and p.max() > p.min():
        levels = mass_levels(p)  # ascending: the 90% threshold, then the 50% one
        if len(levels) == 2 or (len(levels) == 1 and levels[0] > p.min()):
            ax.contour(p, levels=levels, colors=list(CONTOURS[-len(levels) :]), linewidths=0.7)
    if query is not None:
        ax.add_patch(
            Rectangle((query[1] - 0.5, query[0] - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.2)
        )
    ax.set_xticks([])
    ax.set_yticks([])
    return image


def _query_maps(m: Tensor, q: int, height: int, width: int) -> np.ndarray:
    """``(B|1, heads, N, N)`` -> the query's maps ``(heads, H, W)``, averaged over the batch."""
    return m.detach().float().mean(0)[:, q].reshape(-1, height, width).cpu().numpy()


def layer_heads(
    probs: Tensor, height: int, width: int, query: tuple[int, int], *, title: str | None = None
) -> Figure:
    """One layer's heads in a near-square grid (3x3 for 9 heads, 4x4 for 16), with a colour bar.

    ``probs``: ``(B|1, heads, N, N)`` (averaged over B); each cell the query's attention over the grid.
    """
    maps = _query_maps(probs, query[0] * width + query[1], height, width)
    heads = len(maps)
    cols = math.ceil(math.sqrt(heads))
    rows = math.ceil(heads / cols)
    fig = Figure(figsize=(1.9 * cols + 1.0, 1.9 * rows + 0.9), constrained_layout=True)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    image = None
    for h, ax in enumerate(axes):
        if h >= heads:
            ax.set_visible(False)
            continue
        image = _cell(ax, maps[h], query)
        ax.set_title(f"head {h + 1} (peak {maps[h].max():.2f})", fontsize=8)
    fig.colorbar(image, ax=list(axes[:heads]), shrink=0.8, label="probability / head's peak")
    fig.suptitle((f"{title}\n" if title else "") + CONTOUR_NOTE, fontsize=9)
    return fig


def attention_grid(
    maps: Sequence[Tensor],
    height: int,
    width: int,
    query: tuple[int, int],
    *,
    title: str | None = None,
) -> Figure:
    """Every layer's heads, one near-square block of heads per layer, the blocks on a near-square grid
    (6 layers of 9 heads: 2 rows of 3 blocks of 3 x 3). ``maps``: one ``(B|1, heads, N, N)`` tensor per
    layer (averaged over B); each cell the query's attention over the grid."""
    layers, heads = len(maps), max(m.shape[1] for m in maps)
    q = query[0] * width + query[1]
    hc = math.ceil(math.sqrt(heads))
    hr = math.ceil(heads / hc)
    lc = math.ceil(math.sqrt(layers))
    lr = math.ceil(layers / lc)
    fig = Figure(
        figsize=(lc * (1.15 * hc + 0.2) + 1.2, lr * (1.15 * hr + 0.45) + 0.8), constrained_layout=True
    )
    blocks = np.atleast_1d(fig.subfigures(lr, lc, squeeze=False)).ravel()
    image, cells = None, []
    for i, block in enumerate(blocks):
        if i >= layers:
            continue
        probs = _query_maps(maps[i], q, height, width)  # (heads, H, W)
        axes = np.atleast_1d(block.subplots(hr, hc, squeeze=False)).ravel()
        cells = []  # the last layer's: the colour bar sits beside them
        for h, ax in enumerate(axes):
            if h >= len(probs):
                ax.set_visible(False)
                continue
            image = _cell(ax, probs[h], query)
            ax.set_title(f"{h + 1}", fontsize=7, pad=2)
            cells.append(ax)
        block.suptitle(f"layer {i + 1}", fontsize=9)
    fig.colorbar(image, ax=cells, shrink=0.8, label="probability / head's peak")
    fig.suptitle((f"{title}\n" if title else "") + "heads numbered; " + CONTOUR_NOTE, fontsize=9)
    return fig


def _head_colours(heads: int) -> np.ndarray:
    return matplotlib.colormaps["tab20"](np.arange(heads) % 20)


def _gaussian_ellipse(centre: np.ndarray, inv_cov: np.ndarray, mass: float, colour, style: str) -> Ellipse:
    """The ellipse d^T A d = r(mass)^2 around ``centre`` (dy, dx), drawn in (x = dx, y = dy)."""
    vals, vecs = np.linalg.eigh(inv_cov)  # A in (dy, dx) coordinates, ascending eigenvalues
    vals = np.clip(vals, 1e-6, None)
    r = mass_radius(mass)
    axes = 2 * r / np.sqrt(vals)  # full axis lengths along each eigenvector
    vy, vx = vecs[0, 0], vecs[1, 0]  # first eigenvector in (dy, dx)
    angle = math.degrees(math.atan2(vy, vx))
    return Ellipse(
        (centre[1], centre[0]), axes[0], axes[1], angle=angle, fill=False, color=colour, lw=0.8, ls=style
    )


def _centre_panel(ax, centres: np.ndarray, inv_cov: np.ndarray | None, extent: float, annotate: bool) -> None:
    colours = _head_colours(len(centres))
    for h, (dy, dx) in enumerate(centres):
        ax.plot(dx, dy, "o", color=colours[h], markersize=3)
        if inv_cov is not None:
            ax.add_patch(_gaussian_ellipse(centres[h], inv_cov[h], 0.5, colours[h], "-"))
            ax.add_patch(_gaussian_ellipse(centres[h], inv_cov[h], 0.9, colours[h], ":"))
        if annotate:
            ax.annotate(str(h + 1), (dx, dy), textcoords="offset points", xytext=(3, 3), fontsize=6)
    ax.add_patch(Rectangle((-0.5, -0.5), 1, 1, color="black"))  # the query pixel
    ax.set_xlim(-extent, extent)
    ax.set_ylim(extent, -extent)  # y down, like the image
    ax.set_aspect("equal")
    ax.grid(True, linewidth=0.3)
    ax.tick_params(labelsize=6)


def centre_plot(
    centres: Tensor,
    *,
    inverse_covariance: Tensor | None = None,
    steps: Sequence[int] | None = None,
    points: int = 4,
    extent: float = 6.0,
    title: str | None = None,
) -> Figure:
    """The paper's centre plot: each head's centre with its 50% / 90% circles, per layer, at several
    points of training (rows), and a last row with every head's trajectory.

    ``centres`` ``(T, layers, heads, 2)`` in (dy, dx) over T snapshots; ``inverse_covariance``
    ``(T, layers, heads, 2, 2)`` (the quadratic's s^2 I or the generalized S S^T) draws the circles.
    """
    c = centres.detach().double().cpu().numpy()
    inv = None if inverse_covariance is None else inverse_covariance.detach().double().cpu().numpy()
    t, layers, heads, _ = c.shape
    chosen = sorted({round(i * (t - 1) / max(points - 1, 1)) for i in range(min(points, t))})
    rows = len(chosen) + (t > 1)
    fig = Figure(figsize=(2.3 * layers + 0.6, 2.3 * rows + 0.9), constrained_layout=True)
    axes = fig.subplots(rows, layers, squeeze=False)
    for r, i in enumerate(chosen):
        for layer in range(layers):
            ax = axes[r, layer]
            _centre_panel(ax, c[i, layer], None if inv is None else inv[i, layer], extent, annotate=r == 0)
            if r == 0:
                ax.set_title(f"layer {layer + 1}", fontsize=9)
        label = f"step {steps[i]}" if steps is not None else f"snapshot {i + 1}"
        axes[r, 0].set_ylabel(label, fontsize=8)
    if t > 1:
        colours = _head_colours(heads)
        for layer in range(layers):
            ax = axes[-1, layer]
            for h in range(heads):
                ax.plot(c[:, layer, h, 1], c[:, layer, h, 0], color=colours[h], lw=0.9)
                ax.plot(c[-1, layer, h, 1], c[-1, layer, h, 0], "x", color=colours[h], markersize=5)
            _centre_panel(ax, c[-1, layer], None, extent, annotate=False)
        axes[-1, 0].set_ylabel("trajectories", fontsize=8)
    legend = [
        Line2D([], [], color="grey", lw=0.8, ls="-", label="50% of the head's mass"),
        Line2D([], [], color="grey", lw=0.8, ls=":", label="90%"),
        Line2D([], [], marker="s", color="black", ls="", label="query pixel"),
    ]
    fig.legend(handles=legend, loc="outside lower center", ncols=3, fontsize=7)
    span = f", steps {steps[0]}..{steps[-1]}" if steps else ""
    fig.suptitle(
        f"{title + ': ' if title else ''}centres of attention (dy down, dx right){span}", fontsize=10
    )
    return fig


def locality_over_training(
    steps: Sequence[int],
    mean_distance: Tensor,
    sharp_fraction: Tensor,
    *,
    conv_likeness: Tensor | None = None,
    median_alpha: Tensor | None = None,
    title: str | None = None,
) -> Figure:
    """Per layer, against the training step: median alpha (Gaussian heads), mean attention distance,
    the fraction of heads with >= 0.5 of their mass on one pixel, and the heads' mean mass on their
    single most attended pixel (conv-likeness). Each tensor is ``(T, layers)``."""
    series = [("mean attention distance (pixels)", mean_distance, False)]
    series.append(("fraction of heads with >= 50% on one pixel", sharp_fraction, False))
    if conv_likeness is not None:
        series.append(("conv-likeness: mean mass on one pixel", conv_likeness, False))
    if median_alpha is not None:
        series.insert(0, ("median alpha (log scale)", median_alpha, True))
    fig = Figure(figsize=(3.6 * len(series), 3.2), constrained_layout=True)
    axes = np.atleast_1d(fig.subplots(1, len(series)))
    x = np.asarray(steps)
    for ax, (label, values, log) in zip(axes, series, strict=True):
        v = values.detach().float().cpu().numpy()
        for layer in range(v.shape[1]):
            ax.plot(x, v[:, layer], marker=".", markersize=3, label=f"layer {layer + 1}")
        ax.set_xlabel("training step", fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(True, linewidth=0.3)
        if log:
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.suptitle(title or "locality over training", fontsize=10)
    return fig


def locality_summary(distances: Tensor, *, sharp: Tensor | None = None, title: str | None = None) -> Figure:
    """Mean attention distance of every head, per layer ``(layers, heads)``; sharp heads filled."""
    d = distances.detach().float().cpu().numpy()
    layers, heads = d.shape
    fig = Figure(figsize=(1.4 + 0.8 * layers, 3.2), constrained_layout=True)
    ax = fig.subplots()
    for layer in range(layers):
        xs = np.full(heads, layer + 1) + np.linspace(-0.15, 0.15, heads)
        filled = sharp[layer].cpu().numpy() if sharp is not None else np.zeros(heads, bool)
        ax.scatter(
            xs[filled],
            d[layer, filled],
            color="tab:blue",
            s=18,
            label=">= 50% on one pixel" if layer == 0 else None,
        )
        ax.scatter(
            xs[~filled],
            d[layer, ~filled],
            facecolor="none",
            edgecolor="tab:blue",
            s=18,
            label="spread out" if layer == 0 and sharp is not None else None,
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
