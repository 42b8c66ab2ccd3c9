"""Curves: locality over training, locality per layer, and comparisons across runs (numbers in,
a matplotlib ``Figure`` out; no pyplot state)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter
from torch import Tensor

from sa_conv.analysis.snapshots import LayerSummary

__all__ = [
    "grid_formation",
    "learning_curves",
    "locality_by_layer",
    "locality_over_training",
    "locality_summary",
]

ALPHA_REFERENCE = 2.0  # the project's "localized" mark for a layer's median alpha
ALPHA_TICKS = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)  # labelled on log-alpha axes


def _log_alpha_axis(ax: Axes) -> None:
    """A log axis for alpha, labelled at the round values inside the data's range, the alpha = 2 mark."""
    ax.set_yscale("log")
    ax.axhline(ALPHA_REFERENCE, color="black", lw=0.8, ls="--", label=f"alpha = {ALPHA_REFERENCE:g}")
    low, high = ax.get_ylim()
    ticks = [t for t in ALPHA_TICKS if low <= t <= high]
    ax.yaxis.set_major_locator(FixedLocator(ticks or [ALPHA_REFERENCE]))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _legend_outside(fig: Figure, ax: Axes, ncols: int = 4) -> None:
    """The legend of ``ax`` below the figure, where it hides no line."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(ncols, len(handles)), fontsize=7)


def locality_over_training(
    steps: Sequence[int],
    mean_distance: Tensor,
    sharp_fraction: Tensor,
    *,
    conv_likeness: Tensor | None = None,
    median_alpha: Tensor | None = None,
    lr: Sequence[float] | None = None,
    title: str | None = None,
) -> Figure:
    """Per layer, against the training step: median alpha (Gaussian heads; log axis, the alpha = 2 mark),
    mean attention distance, the fraction of heads with >= 0.5 of their mass on one pixel, the heads'
    mean mass on their single most attended pixel (conv-likeness), and the learning rate at each step
    (a panel of its own when given). Each tensor is ``(T, layers)``."""
    series = [("mean attention distance (pixels)", mean_distance, False)]
    series.append(("fraction of heads with >= 50% on one pixel", sharp_fraction, False))
    if conv_likeness is not None:
        series.append(("conv-likeness: mean mass on one pixel", conv_likeness, False))
    if median_alpha is not None:
        series.insert(0, ("median alpha (log scale)", median_alpha, True))
    panels = len(series) + (lr is not None)
    fig = Figure(figsize=(3.4 * panels, 3.2), constrained_layout=True)
    axes = np.atleast_1d(fig.subplots(1, panels))
    x = np.asarray(steps)
    for ax, (label, values, log) in zip(axes, series, strict=False):
        v = values.detach().float().cpu().numpy()
        for layer in range(v.shape[1]):
            ax.plot(x, v[:, layer], marker=".", markersize=3, label=f"layer {layer + 1}")
        ax.set_title(label, fontsize=9)
        if log:
            _log_alpha_axis(ax)
    if lr is not None:
        axes[-1].plot(x, np.asarray(lr), color="black")
        axes[-1].set_title("learning rate", fontsize=9)
    for ax in axes:
        ax.set_xlabel("training step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, linewidth=0.3)
    _legend_outside(fig, axes[0], ncols=7)
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


def locality_by_layer(
    runs: Sequence[tuple[str, Sequence[LayerSummary]]], *, title: str | None = None
) -> Figure:
    """Layer by layer, for several runs side by side: mean attention distance, sharp heads, distinct taps
    among them, median alpha (Gaussian heads). ``runs``: each run's label and its layers' summaries; a
    run with fewer layers is drawn over its first layers (2-layer runs beside 6-layer ones)."""
    metrics = [
        ("mean_distance", "mean attention distance (pixels)"),
        ("sharp_heads", "sharp heads (>= 50% on one pixel)"),
        ("sharp_distinct_taps", "distinct taps among the sharp heads"),
        ("median_alpha", "median alpha (log scale)"),
    ]
    fig = Figure(figsize=(3.5 * len(metrics), 3.4), constrained_layout=True)
    axes = fig.subplots(1, len(metrics))
    markers = "osD^vP*Xph"
    colours = matplotlib.colormaps["tab10"](np.arange(10))
    for i, (name, summaries) in enumerate(runs):  # one colour and marker per run, the same in every panel
        layers = np.arange(1, len(summaries) + 1)
        style = {"marker": markers[i % 10], "color": colours[i % 10], "ls": "-" if i < 10 else "--"}
        for ax, (key, _) in zip(axes, metrics, strict=True):
            values = np.asarray([_number(getattr(row, key)) for row in summaries], dtype=float)
            if not np.all(np.isnan(values)):
                ax.plot(layers, values, markersize=4, lw=1, label=name, **style)
    for ax, (key, label) in zip(axes, metrics, strict=True):
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("layer", fontsize=8)
        ax.set_xticks(range(1, max(len(layers) for _, layers in runs) + 1))
        ax.tick_params(labelsize=7)
        ax.grid(True, linewidth=0.3)
        if key == "median_alpha":
            _log_alpha_axis(ax)
    _legend_outside(fig, axes[0], ncols=3)
    fig.suptitle(title or "locality layer by layer", fontsize=10)
    return fig


def learning_curves(
    runs: Sequence[tuple[str, Sequence[tuple[int, float]]]], *, title: str | None = None
) -> Figure:
    """Evaluation accuracy (validation, or test under the paper's protocol) against the epoch, one line
    per run: its label and its ``(epoch, accuracy)`` points, accuracy a fraction."""
    fig = Figure(figsize=(7.0, 4.2), constrained_layout=True)
    ax = fig.subplots()
    styles = ["-", "--", ":", "-."]
    for i, (name, points) in enumerate(runs):
        epochs = [epoch for epoch, _ in points]
        accuracy = [100 * acc for _, acc in points]
        ax.plot(epochs, accuracy, styles[(i // 10) % 4], marker=".", label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy (%)")
    ax.grid(True, linewidth=0.3)
    _legend_outside(fig, ax, ncols=3)
    ax.set_title(title or "learning curves", fontsize=10)
    return fig


def grid_formation(steps: Sequence[int], series: dict[str, Tensor], *, title: str | None = None) -> Figure:
    """Does a grid form? Per layer against the training step, one panel each: sharp heads, distinct taps
    among them, the heads' median centre displacement from initialization (pixels) and the overlap of
    their half-mass regions (mean pairwise Jaccard), as ``series`` holds them (``(T, layers)`` each)."""
    labels = {
        "sharp_heads": "sharp heads (>= 50% on one pixel)",
        "sharp_distinct_taps": "distinct taps among them",
        "median_displacement": "median centre displacement (pixels)",
        "overlap": "overlap of half-mass regions (Jaccard)",
        "coverage": "pixels covered by half-mass regions",
    }
    shown = [k for k in labels if k in series]
    fig = Figure(figsize=(3.3 * len(shown), 3.4), constrained_layout=True)
    axes = np.atleast_1d(fig.subplots(1, len(shown)))
    x = np.asarray(steps)
    for ax, key in zip(axes, shown, strict=True):
        v = series[key].detach().float().cpu().numpy()
        for layer in range(v.shape[1]):
            ax.plot(x, v[:, layer], marker=".", markersize=3, label=f"layer {layer + 1}")
        ax.set_title(labels[key], fontsize=9)
        ax.set_xlabel("training step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, linewidth=0.3)
    _legend_outside(fig, axes[0], ncols=6)
    fig.suptitle(title or "does a grid form?", fontsize=10)
    return fig


def _number(value: object) -> float:
    """A summary's value as a float for a plot; NaN (no point) where a record holds none."""
    return float(value) if isinstance(value, int | float) else float("nan")
