"""Pure figure functions: tensors in, a matplotlib ``Figure`` out (Agg backend, no pyplot state).

Attention cells: colour = probability on one linear scale for the whole figure (its colour bar; a
uniform head is dark, a sharp one bright; each cell's title gives its peak), cropped to a window of
+-5 pixels around the query with the shifts (dy, dx) as ticks; the red corners mark the query pixel
(its own value stays visible), and the contours enclose 50% (white) and 90% (orange) of the head's
attention mass. The centre figures are in ``sa_conv.analysis.centres``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from torch import Tensor

from sa_conv.analysis.locality import SHARP_MASS

__all__ = [
    "attention_grid",
    "conversion_figure",
    "layer_heads",
    "mass_levels",
    "mass_radius",
]

CMAP = "viridis"
CONTOURS = ("orange", "white")  # for the ascending levels: the 90% boundary, then the 50% one
CONTOUR_NOTE = "contours: 50% (white) and 90% (orange) of the mass; red corners: the query pixel"
WINDOW = 5  # attention cells show +-WINDOW pixels around the query


def mass_levels(p: np.ndarray, masses: Sequence[float] = (0.5, 0.9)) -> list[float]:
    """Thresholds t such that the pixels with probability >= t hold each given mass (ascending)."""
    flat = np.sort(p.ravel())[::-1]
    cum = np.cumsum(flat)
    levels = {float(flat[min(int(np.searchsorted(cum, m)), flat.size - 1)]) for m in masses}
    return sorted(levels)


def mass_radius(mass: float) -> float:
    """Mahalanobis radius r of a 2D Gaussian whose ellipse d^T A d = r^2 holds ``mass``: sqrt(-2 ln(1-m))."""
    return math.sqrt(-2.0 * math.log(1.0 - mass))


def _crop(
    p: np.ndarray, query: tuple[int, int], window: int | None
) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """The window of ``p`` (H, W) around the query, and its extent in shifts (dy, dx) from the query."""
    qy, qx = query
    h, w = p.shape
    if window is None:
        return p, (-qx - 0.5, w - qx - 0.5, h - qy - 0.5, -qy - 0.5)
    y0, y1, x0, x1 = (
        max(qy - window, 0),
        min(qy + window + 1, h),
        max(qx - window, 0),
        min(qx + window + 1, w),
    )
    return p[y0:y1, x0:x1], (x0 - qx - 0.5, x1 - qx - 0.5, y1 - qy - 0.5, y0 - qy - 0.5)


def _query_corners(ax: Axes) -> None:
    """Red corner marks around the query pixel (shift 0, 0): its own value stays visible."""
    for sx in (-1, 1):
        for sy in (-1, 1):
            x, y = sx * 0.5, sy * 0.5
            ax.plot([x, x - sx * 0.3], [y, y], color="red", lw=1.0, solid_capstyle="butt")
            ax.plot([x, x], [y, y - sy * 0.3], color="red", lw=1.0, solid_capstyle="butt")


def _cell(
    ax: Axes,
    p: np.ndarray,
    query: tuple[int, int] | None,
    *,
    vmax: float,
    window: int | None = WINDOW,
    contours: bool = True,
) -> AxesImage:
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
