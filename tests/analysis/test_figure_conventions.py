"""Figures a reviewer reads without help: a tick at the query (0) on both axes, the sharp threshold said
and a head just under it not titled like a sharp one, one axis range for every layer's centres with the
step-0 centres and an arrow to each final one, log-alpha axes labelled where the curves are, legends
outside the panels."""

import numpy as np
import pytest
import torch

from sa_conv.analysis.centres import centre_plot, layer_centres
from sa_conv.analysis.curves import grid_formation, locality_over_training
from sa_conv.analysis.figures import head_title, layer_heads, peak_text
from sa_conv.nn.encodings import QuadraticEncoding


@pytest.mark.parametrize(
    ("peak", "text"), [(0.498, "0.49"), (0.4999, "0.49"), (0.5, "0.50"), (0.504, "0.50"), (0.129, "0.12")]
)
def test_a_peak_under_the_threshold_never_reads_as_a_sharp_one(peak: float, text: str) -> None:
    assert peak_text(peak) == text
    assert head_title(2, peak).endswith(", sharp") == (peak >= 0.5)


def test_layer_cells_have_a_tick_at_the_query_and_say_the_threshold() -> None:
    enc = QuadraticEncoding(2).set_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), torch.tensor([4.0, 0.3]))
    probs = enc.logits(16, 16).softmax(-1)[None].detach()
    figure = layer_heads(probs, 16, 16, (8, 8))
    axes = [ax for ax in figure.axes if ax.get_title().startswith("head")]
    assert [ax.get_title() for ax in axes] == [
        f"head 1: peak {peak_text(float(probs[0, 0, 8 * 16 + 8].max()))}, sharp",
        f"head 2: peak {peak_text(float(probs[0, 1, 8 * 16 + 8].max()))}",
    ]
    for ax in axes:
        assert 0 in list(ax.get_xticks()) and 0 in list(ax.get_yticks())
    assert "at least 0.5 of the head's attention on one pixel" in figure._suptitle.get_text()


def test_every_layers_centres_share_one_axis_range_and_arrows_start_at_step_zero() -> None:
    start = torch.zeros(2, 3, 2)
    start[0] = torch.tensor([[0.5, 0.5], [-1.0, 0.0], [0.0, 1.0]])
    start[1] = torch.tensor([[3.0, -4.0], [0.0, 2.0], [1.0, 1.0]])
    end = start * 0.5
    inv = torch.eye(2).expand(2, 2, 3, 2, 2) * 8.0
    figure = centre_plot(torch.stack([start, end]), inverse_covariance=inv, steps=[0, 100])
    panels = [ax for ax in figure.axes if ax.get_xlim() != (0.0, 1.0)]
    assert len({ax.get_xlim() for ax in panels}) == 1  # one range: layer 1's small circles stay small
    last_row = panels[-2:]
    for ax, layer in zip(last_row, range(2), strict=True):
        arrows = [a for a in ax.texts if getattr(a, "arrow_patch", None) is not None]
        assert len(arrows) == 3
        tails = sorted((a.xyann[1], a.xyann[0]) for a in arrows)  # (dy, dx) each arrow starts at
        heads = sorted((a.xy[1], a.xy[0]) for a in arrows)
        assert tails == sorted(map(tuple, start[layer].tolist()))
        assert heads == sorted(map(tuple, end[layer].tolist()))
    final = layer_centres(end, inverse_covariance=inv[1], initial=start)
    panels = [ax for ax in final.axes if ax.get_title().startswith("layer")]
    assert len({ax.get_xlim() for ax in panels}) == 1
    assert all(len([a for a in ax.texts if getattr(a, "arrow_patch", None)]) == 3 for ax in panels)


def test_log_alpha_axes_are_labelled_at_the_values_the_curves_take_and_legends_sit_outside() -> None:
    steps = [0, 10, 20]
    alpha = torch.tensor([[0.5, 0.5], [1.2, 0.4], [2.6, 0.3]])
    figure = locality_over_training(steps, torch.ones(3, 2), torch.zeros(3, 2), median_alpha=alpha, title="t")
    ax = figure.axes[0]
    low, high = ax.get_ylim()
    labelled = [float(t) for t in ax.get_yticks() if low <= t <= high]
    assert {0.3, 0.5, 1.0, 2.0} <= set(labelled) and all(0.2 <= t <= 3.0 for t in labelled)
    assert all(ax.get_legend() is None for ax in figure.axes) and len(figure.legends) == 1
    grid = grid_formation(steps, {"sharp_heads": torch.tensor([[0.0, 0], [3, 0], [8, 1]])})
    lines = grid.axes[0].get_lines()
    assert np.allclose(lines[0].get_ydata(), [0, 3, 8]) and len(grid.legends) == 1
