"""Curves: locality over training, locality per layer, and comparisons across runs (numbers in,
a matplotlib ``Figure`` out; no pyplot state)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter
from torch import Tensor

__all__ = ["learning_curves", "locality_by_layer", "locality_over_training", "locality_summary"]

ALPHA_REFERENCE = 2.0  # the project's "localized" mark for a layer's median alpha


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
            ax.set_yscale("log")
            ax.axhline(ALPHA_REFERENCE, color="black", lw=0.8, ls="--", label=f"alpha = {ALPHA_REFERENCE:g}")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
    if lr is not None:
        axes[-1].plot(x, np.asarray(lr), color="black")
        axes[-1].set_title("learning rate", fontsize=9)
    for ax in axes:
        ax.set_xlabel("training step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, linewidth=0.3)
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


def locality_by_layer(runs: Sequence[dict[str, Any]], *, title: str | None = None) -> Figure:
    """Layer by layer, for several runs side by side: mean attention distance, sharp heads, distinct taps
    among them, median alpha (Gaussian heads). ``runs``: ``{"label": str, "layers": [layer_summary
    rows]}``; a run with fewer layers is drawn over its first layers (2-layer runs beside 6-layer ones)."""
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
    for i, run in enumerate(runs):  # one colour and marker per run, the same in every panel
        layers = np.arange(1, len(run["layers"]) + 1)
        style = {"marker": markers[i % 10], "color": colours[i % 10], "ls": "-" if i < 10 else "--"}
        for ax, (key, _) in zip(axes, metrics, strict=True):
            values = np.asarray([row.get(key, np.nan) for row in run["layers"]], dtype=float)
            if not np.all(np.isnan(values)):
                ax.plot(layers, values, markersize=4, lw=1, label=run["label"], **style)
    for ax, (key, label) in zip(axes, metrics, strict=True):
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("layer", fontsize=8)
        ax.set_xticks(range(1, max(len(r["layers"]) for r in runs) + 1))
        ax.tick_params(labelsize=7)
        ax.grid(True, linewidth=0.3)
        if key == "median_alpha":
            ax.set_yscale("log")
            ax.axhline(ALPHA_REFERENCE, color="black", lw=0.8, ls="--")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
    axes[0].legend(fontsize=6)
    fig.suptitle(title or "locality layer by layer", fontsize=10)
    return fig


def learning_curves(runs: Sequence[dict[str, Any]], *, title: str | None = None) -> Figure:
    """Evaluation accuracy (validation, or test under the paper's protocol) against the epoch, one line
    per run. ``runs``: ``{"label": str, "epochs": [per-epoch records with val_acc or test_acc]}``."""
    fig = Figure(figsize=(7.0, 4.2), constrained_layout=True)
    ax = fig.subplots()
    styles = ["-", "--", ":", "-."]
    for i, run in enumerate(runs):
        rows = [r for r in run["epochs"] if "val_acc" in r or "test_acc" in r]
        epochs = [r["epoch"] for r in rows]
        accuracy = [100 * r.get("val_acc", r.get("test_acc")) for r in rows]
        ax.plot(epochs, accuracy, styles[(i // 10) % 4], marker=".", label=run["label"])
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy (%)")
    ax.grid(True, linewidth=0.3)
    ax.legend(fontsize=7, ncols=2)
    ax.set_title(title or "learning curves", fontsize=10)
    return fig
