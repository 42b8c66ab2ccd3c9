"""Pure figure functions: tensors in, a matplotlib ``Figure`` out (Agg backend, no pyplot state).

Attention cells: colour = probability on one linear scale for the whole figure (its colour bar; a
uniform head is dark, a sharp one bright; each cell's title gives its peak), cropped to a window of
+-5 pixels around the query with the shifts (dy, dx) as ticks; the red corners mark the query pixel
(its own value stays visible), and the contours enclose 50% (white) and 90% (orange) of the head's
attention mass. Centre figures draw each head's Gaussian at its centre with the circles (ellipses)
holding 50% (solid) and 90% (dotted) of its mass, as the paper's Figures 3-4, every head numbered;
a head whose attention is uniform (alpha ~ 0) is a grey cross, without circles.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Ellipse, Rectangle
from torch import Tensor

from sa_conv.analysis.locality import SHARP_MASS

__all__ = [
    "attention_grid",
    "centre_plot",
    "conversion_figure",
    "layer_centres",
    "layer_heads",
    "mass_levels",
    "mass_radius",
]

CMAP = "viridis"
CONTOURS = ("orange", "white")  # for the ascending levels: the 90% boundary, then the 50% one
CONTOUR_NOTE = "contours: 50% (white) and 90% (orange) of the mass; red corners: the query pixel"
WINDOW = 5  # attention cells show +-WINDOW pixels around the query
UNIFORM_ALPHA = 1e-3  # a Gaussian head below this sharpness attends (almost) uniformly


def mass_levels(p: np.ndarray, masses: Sequence[float] = (0.5, 0.9)) -> list[float]:
    """Thresholds t such that the pixels with probability >= t hold each given mass (ascending)."""
    flat = np.sort(p.ravel())[::-1]
    cum = np.cumsum(flat)
    levels = {float(flat[min(int(np.searchsorted(cum, m)), flat.size - 1)]) for m in masses}
    return sorted(levels)


def mass_radius(mass: float) -> float:
    """Mahalanobis radius r of a 2D Gaussian whose ellipse d^T A d = r^2 holds ``mass``: sqrt(-2 ln(1-m))."""
    return math.sqrt(-2.0 * math.log(1.0 - mass))


def _crop(p: np.ndarray, query: tuple[int, int], window: int | None) -> tuple[np.ndarray, list[float]]:
    """The window of ``p`` (H, W) around the query, and its extent in shifts (dy, dx) from the query."""
    qy, qx = query
    h, w = p.shape
    if window is None:
        return p, [-qx - 0.5, w - qx - 0.5, h - qy - 0.5, -qy - 0.5]
    y0, y1, x0, x1 = (
        max(qy - window, 0),
        min(qy + window + 1, h),
        max(qx - window, 0),
        min(qx + window + 1, w),
    )
    return p[y0:y1, x0:x1], [x0 - qx - 0.5, x1 - qx - 0.5, y1 - qy - 0.5, y0 - qy - 0.5]


def _query_corners(ax) -> None:
    """Red corner marks around the query pixel (shift 0, 0): its own value stays visible."""
    for sx in (-1, 1):
        for sy in (-1, 1):
            x, y = sx * 0.5, sy * 0.5
            ax.plot([x, x - sx * 0.3], [y, y], color="red", lw=1.0, solid_capstyle="butt")
            ax.plot([x, x], [y, y - sy * 0.3], color="red", lw=1.0, solid_capstyle="butt")


def _cell(
    ax,
    p: np.ndarray,
    query: tuple[int, int] | None,
    *,
    vmax: float,
    window: int | None = WINDOW,
    contours: bool = True,
):
    """One attention map on the figure's colour scale, cropped around the query; returns the image."""
    if query is None:
        image = ax.imshow(p, cmap=CMAP, norm=Normalize(0, vmax), interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        return image
    crop, extent = _crop(p, query, window)
    image = ax.imshow(crop, cmap=CMAP, norm=Normalize(0, vmax), interpolation="nearest", extent=extent)
    if contours and p.max() > p.min():
        levels = mass_levels(p)  # ascending: the 90% threshold, then the 50% one (of the whole map)
        if len(levels) == 2 or (len(levels) == 1 and levels[0] > p.min()):
            ys = np.arange(crop.shape[0]) + extent[3] + 0.5
            xs = np.arange(crop.shape[1]) + extent[0] + 0.5
            ax.contour(xs, ys, crop, levels=levels, colors=list(CONTOURS[-len(levels) :]), linewidths=0.7)
    _query_corners(ax)
    ticks = list(range(-16, 17, 2))  # even shifts: 0, the query, always among them
    ax.set_xticks([t for t in ticks if extent[0] < t < extent[1]])
    ax.set_yticks([t for t in ticks if extent[3] < t < extent[2]])
    ax.tick_params(labelsize=5, length=2, pad=1)
    return image


def _query_maps(m: Tensor, q: int, height: int, width: int) -> np.ndarray:
    """``(B|1, heads, N, N)`` -> the query's maps ``(heads, H, W)``, averaged over the batch."""
    return m.detach().float().mean(0)[:, q].reshape(-1, height, width).cpu().numpy()


def peak_text(peak: float) -> str:
    """A head's peak to two decimals, rounded down below the sharp threshold: 0.498 reads 0.49, never as
    a sharp head's 0.50."""
    shown = math.floor(peak * 100) / 100 if peak < SHARP_MASS else round(peak, 2)
    return f"{shown:.2f}"


def head_title(h: int, peak: float) -> str:
    """A head's cell title: its number, its peak, and whether it is sharp."""
    return f"head {h + 1}: peak {peak_text(peak)}" + (", sharp" if peak >= SHARP_MASS else "")


def layer_heads(
    probs: Tensor, height: int, width: int, query: tuple[int, int], *, title: str | None = None
) -> Figure:
    """One layer's heads in a near-square grid (3x3 for 9 heads, 4x4 for 16), with a colour bar.

    ``probs``: ``(B|1, heads, N, N)`` (averaged over B); each cell the query's attention over the grid.
    """
    maps = _query_maps(probs, query[0] * width + query[1], height, width)
    heads = len(maps)
    vmax = max(float(maps.max()), 1e-12)
    cols = math.ceil(math.sqrt(heads))
    rows = math.ceil(heads / cols)
    fig = Figure(figsize=(2.0 * cols + 1.0, 2.0 * rows + 0.9), constrained_layout=True)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    image = None
    for h, ax in enumerate(axes):
        if h >= heads:
            ax.set_visible(False)
            continue
        image = _cell(ax, maps[h], query, vmax=vmax)
        ax.set_title(head_title(h, float(maps[h].max())), fontsize=8)
    assert image is not None  # at least one head
    fig.colorbar(image, ax=list(axes[:heads]), shrink=0.8, label="attention probability (one scale)")
    note = f"sharp: at least {SHARP_MASS:g} of the head's attention on one pixel (its peak, in the title)"
    fig.suptitle((f"{title}\n" if title else "") + f"{note}\n{CONTOUR_NOTE}", fontsize=9)
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
    all_maps = [_query_maps(m, q, height, width) for m in maps]  # per layer (heads, H, W)
    vmax = max(max(float(m.max()) for m in all_maps), 1e-12)
    image: Any = None
    cells: list[Any] = []
    for i, block in enumerate(blocks):
        if i >= layers:
            continue
        probs = all_maps[i]  # (heads, H, W)
        axes = np.atleast_1d(block.subplots(hr, hc, squeeze=False)).ravel()
        cells = []  # the last layer's: the colour bar sits beside them
        for h, ax in enumerate(axes):
            if h >= len(probs):
                ax.set_visible(False)
                continue
            image = _cell(ax, probs[h], query, vmax=vmax)
            ax.set_title(f"{h + 1} ({peak_text(float(probs[h].max()))})", fontsize=6, pad=2)
            cells.append(ax)
        block.suptitle(f"layer {i + 1}", fontsize=9)
    assert image is not None  # at least one layer
    fig.colorbar(image, ax=cells, shrink=0.8, label="attention probability (one scale)")
    fig.suptitle((f"{title}\n" if title else "") + "heads numbered (peak); " + CONTOUR_NOTE, fontsize=9)
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


def _centre_panel(ax, centres: np.ndarray, inv_cov: np.ndarray | None, extent: float, annotate: bool) -> None:
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


def _arrows(ax, start: np.ndarray, end: np.ndarray) -> None:
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
    _cell(ax_p, total, query, vmax=float(total.max()), window=None, contours=False)
    ax_p.set_title("attention of all heads at the query (sum)", fontsize=9)
    return fig
