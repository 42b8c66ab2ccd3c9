"""Analysis of a model's attention, in one place: its maps, their locality now and over training, and
every figure of a model assembled from them (drawn by ``analysis.figures``, measured by
``analysis.locality``).
The training callbacks, the study and the figure command all call these."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from matplotlib.figure import Figure
from torch import Tensor

from sa_conv.analysis.centres import centre_plot, layer_centres
from sa_conv.analysis.curves import grid_formation, locality_over_training, locality_summary
from sa_conv.analysis.figure_registry import FIGURES, FigureInput, figure_function
from sa_conv.analysis.figures import attention_grid, layer_heads
from sa_conv.analysis.locality import (
    SHARP_MASS,
    gaussian_alpha,
    head_regions,
    interior_queries,
    locality,
    overlap_and_coverage,
    peak_shift,
    shift_profile,
)
from sa_conv.analysis.snapshots import LayerLocality, LayerSummary, LocalitySnapshot
from sa_conv.models import Backbone

__all__ = [
    "attention_maps_of",
    "figures_of",
    "figures_of_maps",
    "initial_of",
    "layer_summary",
    "locality_queries",
    "locality_snapshot",
]


def _side(backbone: Backbone) -> int:
    return backbone.config.grid


def locality_queries(side: int) -> Tensor:
    """The queries every locality number averages over: those at least a quarter of the grid from a border."""
    return interior_queries(side, side, side // 4)


def attention_maps_of(backbone: Backbone, images: Tensor) -> list[Tensor]:
    """Per layer ``(B|1, heads, N, N)`` attention probabilities in eval mode; the backbone's mode is kept."""
    was_training = backbone.training
    backbone.eval()
    maps = backbone.attention_maps(images)  # no_grad inside
    backbone.train(was_training)
    return maps


def locality_snapshot(backbone: Backbone, images: Tensor, step: int) -> LocalitySnapshot:
    """The locality of every layer now: per head mean distance, peak mass and peak shift (interior
    queries); how the heads' half-mass regions overlap (mean pairwise Jaccard) and how many pixels they
    cover; for Gaussian heads their centres and inverse covariances."""
    maps = attention_maps_of(backbone, images)  # per layer (B|1, heads, N, N)
    side = _side(backbone)
    queries = locality_queries(side)
    layers = []
    for probs, encoding in zip(maps, backbone.encodings(), strict=True):
        m = locality(probs, side, side, queries=queries)
        shift, _ = peak_shift(probs, side, side, queries=queries)
        overlap, coverage = overlap_and_coverage(
            head_regions(shift_profile(probs, side, side, queries=queries))
        )
        gaussians = encoding.head_gaussians() if encoding is not None else None
        centres, covariance = (g.float().cpu().tolist() for g in gaussians) if gaussians else (None, None)
        layers.append(
            LayerLocality(
                mean_distance=tuple(m.mean_distance.tolist()),
                peak_mass=tuple(m.peak_mass.tolist()),
                peak_shift=tuple((int(dy), int(dx)) for dy, dx in shift.tolist()),  # most frequent peak
                overlap=overlap,  # mean over head pairs of the Jaccard index of their half-mass regions
                coverage=coverage,  # pixels in the union of the heads' half-mass regions
                centres=None if centres is None else tuple((a, b) for a, b in centres),
                inverse_covariance=None
                if covariance is None
                else tuple(((a, b), (c, d)) for (a, b), (c, d) in covariance),
            )
        )
    return LocalitySnapshot(step=step, layers=tuple(layers))


def layer_summary(snapshot: LocalitySnapshot, initial: LocalitySnapshot | None = None) -> list[LayerSummary]:
    """Per layer: mean attention distance, number of sharp heads (>= 0.5 of their mass on one pixel),
    the number of distinct taps among them and the taps themselves, sorted (dy, dx) with one per sharp
    head (their peak shifts; rounded centres in records that predate them), the heads' mean mass on one
    pixel (conv-likeness), the overlap and coverage of their half-mass regions (records that hold them),
    and for Gaussian heads each head's alpha and their median, the mean norm of the loss gradient on each
    centre since the previous snapshot (records that hold it) and, given the ``initial`` snapshot (step
    0), how far each head's centre moved from it (pixels) and how much farther from the query it now is
    (``outward``, negative: nearer), with their medians."""
    out = []
    starts = initial.layers if initial is not None else (None,) * len(snapshot.layers)
    for layer, start in zip(snapshot.layers, starts, strict=True):
        sharp = torch.tensor(layer.peak_mass) >= SHARP_MASS
        shifts = layer.peak_shift
        if shifts is None and layer.centres is not None:
            shifts = tuple((round(dy), round(dx)) for dy, dx in layer.centres)
        distinct_taps: int | None = None
        taps: list[list[int]] | None = None
        if shifts is not None:
            sharp_shifts = torch.tensor(shifts, dtype=torch.float64).reshape(-1, 2)[sharp]  # (sharp heads, 2)
            distinct_taps = len(torch.unique(sharp_shifts, dim=0)) if len(sharp_shifts) else 0
            taps = sorted([int(dy), int(dx)] for dy, dx in sharp_shifts.round().tolist())
        alpha: Tensor | None = None
        if layer.inverse_covariance is not None:
            alpha = gaussian_alpha(torch.tensor(layer.inverse_covariance))  # (heads,)
        moved = outward = None
        begin_at = start.centres if start is not None else None
        if layer.centres is not None and begin_at is not None and len(begin_at) == len(layer.centres):
            end, begin = torch.tensor(layer.centres), torch.tensor(begin_at)  # (heads, 2) each
            moved = (end - begin).norm(dim=-1)  # (heads,)
            outward = end.norm(dim=-1) - begin.norm(dim=-1)  # (heads,): > 0 farther from the query
        out.append(
            LayerSummary(
                mean_distance=sum(layer.mean_distance) / layer.heads,
                sharp_heads=int(sharp.sum()),
                heads=layer.heads,
                conv_likeness=sum(layer.peak_mass) / layer.heads,
                sharp_distinct_taps=distinct_taps,
                sharp_taps=taps,
                overlap=layer.overlap,
                coverage=layer.coverage,
                median_alpha=None if alpha is None else float(alpha.median()),
                alpha=None if alpha is None else _rounded(alpha),
                # the mean gradient norm on each centre since the last snapshot
                centre_grad_norm=None if layer.centre_grad_norm is None else list(layer.centre_grad_norm),
                displacement=None if moved is None else _rounded(moved),
                median_displacement=None if moved is None else float(moved.median()),
                outward=None if outward is None else _rounded(outward),
                median_outward=None if outward is None else float(outward.median()),
            )
        )
    return out


def _rounded(values: Tensor) -> list[float]:
    """A per-head tensor as a list, each value to 4 decimals (what a results row keeps)."""
    return [round(float(v), 4) for v in values]


def initial_of(history: Sequence[LocalitySnapshot]) -> LocalitySnapshot | None:
    """The snapshot at step 0 of a locality history (what head motion is measured from), if recorded."""
    return history[0] if history and history[0].step == 0 else None


@dataclass(frozen=True)
class _Series:
    """A locality history as ``(T, layers)`` series (and ``(T, layers, heads, ...)`` centre arrays when
    every snapshot has Gaussian heads, as many in every layer); a series older records lack is None."""

    steps: list[int]
    mean_distance: Tensor
    sharp_fraction: Tensor
    conv_likeness: Tensor
    median_alpha: Tensor | None
    motion: dict[str, Tensor]  # sharp heads, distinct taps, median displacement, overlap, coverage
    centres: Tensor | None
    inverse_covariance: Tensor | None


def _history_tensors(history: Sequence[LocalitySnapshot]) -> _Series:
    """Snapshots -> their series, when consistent."""
    heads = [[layer.heads for layer in s.layers] for s in history]
    summaries = [layer_summary(s, initial_of(history)) for s in history]
    gaussian = all(r.median_alpha is not None for s in summaries for r in s)
    motion: dict[str, Tensor] = {}
    for key in ("sharp_heads", "sharp_distinct_taps", "median_displacement", "overlap", "coverage"):
        values = [[getattr(r, key) for r in s] for s in summaries]
        if all(v is not None for s in values for v in s):  # records that hold it (older ones may not)
            motion[key] = torch.tensor([[float(v) for v in s] for s in values])
    same_heads = all(h == heads[0] and len(set(h)) == 1 for h in heads)
    centred = gaussian and same_heads
    return _Series(
        steps=[s.step for s in history],
        mean_distance=torch.tensor([[r.mean_distance for r in s] for s in summaries]),
        sharp_fraction=torch.tensor([[r.sharp_heads / r.heads for r in s] for s in summaries]),
        conv_likeness=torch.tensor([[r.conv_likeness for r in s] for s in summaries]),
        median_alpha=torch.tensor([[r.median_alpha for r in s] for s in summaries]) if gaussian else None,
        motion=motion,
        centres=torch.tensor([[la.centres for la in s.layers] for s in history]) if centred else None,
        inverse_covariance=(
            torch.tensor([[la.inverse_covariance for la in s.layers] for s in history]) if centred else None
        ),
    )


def figures_of(
    backbone: Backbone,
    images: Tensor,
    *,
    maps: list[Tensor] | None = None,
    query: tuple[int, int] | None = None,
    history: Sequence[LocalitySnapshot] | None = None,
    lr: Callable[[int], float] | None = None,
    name: str = "",
) -> list[tuple[str, Figure | float]]:
    """Every attention figure and locality scalar of an SA backbone, as ``(tag, value)`` pairs: those of
    its maps (``figures_of_maps``) and every figure of the registry (``analysis.figure_registry``) that
    applies to it.

    The centre figures and the locality-over-training plot are drawn from ``history`` (the run's own
    snapshots) and need at least one (two) of them; ``lr`` (the learning rate at a step) draws the
    schedule beside the latter. ``maps``: the backbone's maps on ``images``, where already computed.
    """
    maps = maps if maps is not None else attention_maps_of(backbone, images)
    side = _side(backbone)
    out = figures_of_maps(maps, side, query=query, history=history, lr=lr, name=name)
    inputs = FigureInput(backbone=backbone, maps=maps, side=side, history=history or (), name=name)
    for tag, entry in FIGURES.items():
        figure = figure_function(entry)(inputs)
        if figure is not None:
            out.append((tag, figure))
    return out


def figures_of_maps(
    maps: list[Tensor],
    side: int,
    *,
    query: tuple[int, int] | None = None,
    history: Sequence[LocalitySnapshot] | None = None,
    lr: Callable[[int], float] | None = None,
    name: str = "",
) -> list[tuple[str, Figure | float]]:
    """``figures_of`` from attention maps already computed: per layer ``(B|1, heads, N, N)``, N = side^2."""
    query = query or (side // 2, side // 2)
    prefix = f"{name}: " if name else ""
    averaged = f", mean of {maps[0].shape[0]} images" if maps[0].shape[0] > 1 else ""
    out: list[tuple[str, Figure | float]] = []
    for i, m in enumerate(maps):
        title = f"{prefix}layer {i + 1}, query {query}{averaged}"
        out.append((f"attention/layer{i + 1}", layer_heads(m, side, side, query, title=title)))
    out.append(
        ("attention/grid", attention_grid(maps, side, side, query, title=f"{prefix}query {query}{averaged}"))
    )
    if maps[0].shape[0] > 1:  # content attention: one image too
        single = [m[:1] for m in maps]
        title = f"{prefix}query {query}, one image"
        out.append(("attention/grid_single_image", attention_grid(single, side, side, query, title=title)))
    queries = locality_queries(side)
    metrics = [locality(m, side, side, queries=queries) for m in maps]
    for i, metric in enumerate(metrics):
        out.append((f"locality/layer{i + 1}/mean_distance", float(metric.mean_distance.mean())))
        out.append((f"locality/layer{i + 1}/radius90", float(metric.radius90.mean())))
        out.append((f"locality/layer{i + 1}/entropy", float(metric.entropy.mean())))
        out.append((f"locality/layer{i + 1}/sharp_fraction", float(metric.sharp.float().mean())))
    if len({m.shape[1] for m in maps}) == 1:
        distances = torch.stack([m.mean_distance for m in metrics])
        sharp = torch.stack([m.sharp for m in metrics])
        out.append(("attention/locality", locality_summary(distances, sharp=sharp, title=name or None)))
    if history:
        out += _history_figures(history, lr, name)
    return out


def _history_figures(
    history: Sequence[LocalitySnapshot], lr: Callable[[int], float] | None, name: str
) -> list[tuple[str, Figure]]:
    """The figures of a run's locality record: its centres now and over training, its locality curves."""
    prefix = f"{name}: " if name else ""
    out: list[tuple[str, Figure]] = []
    series = _history_tensors(history)
    if series.centres is not None and series.inverse_covariance is not None:
        last = layer_centres(
            series.centres[-1],
            inverse_covariance=series.inverse_covariance[-1],
            initial=series.centres[0] if series.steps[0] == 0 else None,
            title=f"{name + ', ' if name else ''}step {series.steps[-1]}",
        )
        out.append(("attention/layer_centres", last))
        centres = centre_plot(
            series.centres,
            inverse_covariance=series.inverse_covariance,
            steps=series.steps,
            title=name or None,
        )
        out.append(("attention/centres", centres))
    if len(history) >= 2:
        figure = locality_over_training(
            series.steps,
            series.mean_distance,
            series.sharp_fraction,
            conv_likeness=series.conv_likeness,
            median_alpha=series.median_alpha,
            lr=[lr(step) for step in series.steps] if lr is not None else None,
            title=f"{prefix}locality over training",
        )
        out.append(("attention/locality_over_training", figure))
        if "overlap" in series.motion:  # motion and coverage, in records that hold them
            keys = ("sharp_heads", "sharp_distinct_taps", "median_displacement", "overlap")
            present = {k: series.motion[k] for k in keys if k in series.motion}
            figure = grid_formation(series.steps, present, title=f"{prefix}does a grid form?")
            out.append(("attention/grid_formation", figure))
    return out
