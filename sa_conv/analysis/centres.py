"""The paper's centre figures (Figures 3-4): each head's Gaussian at its centre with the circles
(ellipses) holding 50% (solid) and 90% (dotted) of its mass, every head numbered, every layer on one axis
range; a head whose attention is uniform (alpha ~ 0) is a grey cross, without circles. Tensors in, a
matplotlib ``Figure`` out."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Ellipse, Rectangle
from torch import Tensor

from sa_conv.analysis.figures import mass_radius

__all__ = ["centre_plot", "layer_centres"]

UNIFORM_ALPHA = 1e-3  # a Gaussian head below this sharpness attends (almost) uniformly


def _head_colours(heads: int) -> np.ndarray:
    return matplotlib.colormaps["tab20"](np.arange(heads) % 20)


def _gaussian_ellipse(
    centre: np.ndarray, inv_cov: np.ndarray, mass: float, colour: np.ndarray, style: str
) -> Ellipse:
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


def _uniform(inv_cov: np.ndarray | None) -> np.ndarray | None:
    """Heads whose Gaussian is (almost) flat: largest eigenvalue of A below 2 * UNIFORM_ALPHA."""
    if inv_cov is None:
        return None
    return np.linalg.eigvalsh(inv_cov)[..., -1] < 2 * UNIFORM_ALPHA


def _extent(centres: np.ndarray, inv_cov: np.ndarray | None, limit: float = 16.0) -> float:
    """Half the side of a centre panel: every centre and its 90% circle (uniform heads left out), at
    least 3 pixels, at most ``limit``."""
    reach = np.abs(centres).max(-1)
    if inv_cov is not None:
        vals = np.clip(np.linalg.eigvalsh(inv_cov)[..., 0], 1e-6, None)
        radius = mass_radius(0.9) / np.sqrt(vals)
        uniform = np.linalg.eigvalsh(inv_cov)[..., -1] < 2 * UNIFORM_ALPHA  # as _uniform says
        reach = np.where(uniform, np.abs(centres).max(-1), reach + radius)
    return float(np.clip(np.ceil(reach.max() + 0.5), 3.0, limit))


def _centre_panel(
    ax: Axes, centres: np.ndarray, inv_cov: np.ndarray | None, extent: float, annotate: bool
) -> None:
    colours = _head_colours(len(centres))
    uniform = _uniform(inv_cov)
    for h, (dy, dx) in enumerate(centres):
        flat = uniform is not None and uniform[h]
        if flat:  # a uniform head: its circles would cover the image; a grey cross instead
            ax.plot(dx, dy, "x", color="grey", markersize=6, mew=1.2)
        elif inv_cov is not None:
            ax.add_patch(_gaussian_ellipse(centres[h], inv_cov[h], 0.5, colours[h], "-"))
            ax.add_patch(_gaussian_ellipse(centres[h], inv_cov[h], 0.9, colours[h], ":"))
        if annotate:  # the number at the centre, on the head's colour
            box = {
                "boxstyle": "circle,pad=0.15",
                "fc": "white" if flat else colours[h],
                "ec": "none",
                "alpha": 0.9,
            }
            ax.text(dx, dy, str(h + 1), fontsize=6, ha="center", va="center", bbox=box, zorder=5)
        else:
            ax.plot(dx, dy, "o", color=colours[h], markersize=3)
    ax.add_patch(Rectangle((-0.5, -0.5), 1, 1, fill=False, edgecolor="black", lw=1.2))  # the query pixel
    ax.set_xlim(-extent, extent)
    ax.set_ylim(extent, -extent)  # y down, like the image
    ax.set_aspect("equal")
    ax.grid(True, linewidth=0.3)
    ax.tick_params(labelsize=6)


def _centre_legend(fig: Figure, *, moved: bool = False) -> None:
    legend = [
        Line2D([], [], color="grey", lw=0.8, ls="-", label="50% of the head's mass"),
        Line2D([], [], color="grey", lw=0.8, ls=":", label="90%"),
        Line2D([], [], marker="x", color="grey", ls="", label="uniform head (alpha ~ 0)"),
        Line2D([], [], marker="s", mfc="none", color="black", ls="", label="query pixel"),
    ]
    if moved:
        legend.append(
            Line2D(
                [],
                [],
                marker="o",
                mfc="none",
                color="grey",
                ls="",
                label="centre at step 0 (arrow: to the end)",
            )
        )
    fig.legend(handles=legend, loc="outside lower center", ncols=3, fontsize=7)


def _arrows(ax: Axes, start: np.ndarray, end: np.ndarray) -> None:
    """Each head's start (a hollow circle) and an arrow from it to where the head ended."""
    colours = _head_colours(len(start))
    for h in range(len(start)):
        ax.plot(start[h, 1], start[h, 0], "o", mfc="none", color=colours[h], markersize=4, mew=0.8)
        ax.annotate(
            "",
            xy=(end[h, 1], end[h, 0]),
            xytext=(start[h, 1], start[h, 0]),
            arrowprops={"arrowstyle": "->", "color": colours[h], "lw": 0.8, "shrinkA": 2, "shrinkB": 4},
        )


def layer_centres(
    centres: Tensor,
    *,
    inverse_covariance: Tensor | None = None,
    initial: Tensor | None = None,
    title: str | None = None,
) -> Figure:
    """The paper's centre figure for a whole model: one panel per layer (near-square grid, one axis
    range for all), every head numbered at its centre with its 50% / 90% circles, and, given the
    ``initial`` centres (step 0), an arrow from each to where the head ended. ``centres`` and ``initial``
    ``(layers, heads, 2)`` in (dy, dx), ``inverse_covariance`` ``(layers, heads, 2, 2)``."""
    c = centres.detach().double().cpu().numpy()
    inv = None if inverse_covariance is None else inverse_covariance.detach().double().cpu().numpy()
    start = None if initial is None else initial.detach().double().cpu().numpy()
    layers = c.shape[0]
    extent = max(_extent(c[layer], None if inv is None else inv[layer]) for layer in range(layers))
    if start is not None:
        extent = max(extent, float(np.clip(np.ceil(np.abs(start).max() + 0.5), 3.0, 16.0)))
    cols = math.ceil(math.sqrt(layers))
    rows = math.ceil(layers / cols)
    fig = Figure(figsize=(3.2 * cols + 0.4, 3.2 * rows + 1.0), constrained_layout=True)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for layer, ax in enumerate(axes):
        if layer >= layers:
            ax.set_visible(False)
            continue
        layer_inv = None if inv is None else inv[layer]
        _centre_panel(ax, c[layer], layer_inv, extent, annotate=True)
        if start is not None:
            _arrows(ax, start[layer], c[layer])
        ax.set_title(f"layer {layer + 1}", fontsize=9)
    _centre_legend(fig, moved=start is not None)
    fig.suptitle(f"{title + ': ' if title else ''}centres of attention (dy down, dx right)", fontsize=10)
    return fig


def centre_plot(
    centres: Tensor,
    *,
    inverse_covariance: Tensor | None = None,
    steps: Sequence[int] | None = None,
    points: int = 4,
    title: str | None = None,
) -> Figure:
    """The paper's centre plot over training: each head's centre with its 50% / 90% circles, per layer,
    at several points of training (rows, every head numbered), and a last row with every head's
    trajectory. ``centres`` ``(T, layers, heads, 2)`` in (dy, dx) over T snapshots; ``inverse_covariance``
    ``(T, layers, heads, 2, 2)`` (the quadratic's s^2 I or the generalized S S^T) draws the circles."""
    c = centres.detach().double().cpu().numpy()
    inv = None if inverse_covariance is None else inverse_covariance.detach().double().cpu().numpy()
    t, layers, heads, _ = c.shape
    chosen = sorted({round(i * (t - 1) / max(points - 1, 1)) for i in range(min(points, t))})
    rows = len(chosen) + (t > 1)
    extent = max(  # one axis range for every layer and snapshot: circles compare across them
        _extent(c[i, layer], None if inv is None else inv[i, layer])
        for i in chosen
        for layer in range(layers)
    )
    extents = [extent] * layers
    fig = Figure(figsize=(2.6 * layers + 0.6, 2.6 * rows + 0.9), constrained_layout=True)
    axes = fig.subplots(rows, layers, squeeze=False)
    for r, i in enumerate(chosen):
        for layer in range(layers):
            ax = axes[r, layer]
            _centre_panel(
                ax, c[i, layer], None if inv is None else inv[i, layer], extents[layer], annotate=True
            )
            if r == 0:
                ax.set_title(f"layer {layer + 1}", fontsize=9)
        label = f"step {steps[i]}" if steps is not None else f"snapshot {i + 1}"
        axes[r, 0].set_ylabel(label, fontsize=8)
    if t > 1:
        colours = _head_colours(heads)
        for layer in range(layers):
            ax = axes[-1, layer]
            for h in range(heads):
                ax.plot(c[:, layer, h, 1], c[:, layer, h, 0], color=colours[h], lw=0.6, alpha=0.6)
            _centre_panel(ax, c[-1, layer], None, extents[layer], annotate=True)
            _arrows(ax, c[0, layer], c[-1, layer])
        axes[-1, 0].set_ylabel("first -> last", fontsize=8)
    _centre_legend(fig, moved=t > 1)
    span = f", steps {steps[0]}..{steps[-1]}" if steps else ""
    fig.suptitle(
        f"{title + ': ' if title else ''}centres of attention (dy down, dx right){span}", fontsize=10
    )
    return fig
