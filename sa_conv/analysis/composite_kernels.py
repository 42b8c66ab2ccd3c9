"""Composite attention's positional term as the lightweight convolution it is (Chang et al., ACL 2021):
each head's bias table, read at every shift of the token grid (clipped shifts take the window's edge
entry), softmax-normalized: the convolution's kernel. Drawn per layer and head, the window marked."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from torch import Tensor

from sa_conv.analysis.figure_registry import FigureInput
from sa_conv.nn.encodings import CompositeRelativeEncoding

__all__ = ["composite_kernels_figure", "lightweight_kernel"]


def lightweight_kernel(encoding: CompositeRelativeEncoding, side: int) -> Tensor:
    """Each head's kernel over every shift of a ``side x side`` grid: ``(heads, 2 side - 1, 2 side - 1)``,
    row ``dy``, column ``dx`` from ``-(side - 1)``, summing to 1. At a query, attention with this bias
    alone is the kernel on the shifts to the image's keys, renormalized over them."""
    if encoding.bias is None:
        raise ValueError("this composite encoding has no bias term: no fixed kernel to draw")
    w = encoding.window
    shifts = torch.arange(-(side - 1), side, device=encoding.bias.device)
    index = shifts.clamp(-w, w) + w  # (S,): the table entry each shift reads
    logits = encoding.bias.detach().float()[:, index][:, :, index]  # (heads, S, S)
    if encoding.mask:  # shifts beyond the window are not attended to at all
        outside = shifts.abs() > w
        logits = logits.masked_fill(outside[:, None] | outside[None, :], float("-inf"))
    return logits.flatten(1).softmax(-1).view_as(logits)


def composite_kernels_figure(
    encodings: Sequence[CompositeRelativeEncoding], side: int, *, title: str | None = None
) -> Figure:
    """Every layer's heads (rows: layers, columns: heads) as lightweight kernels over every shift, on one
    log colour scale; the window's own entries inside the dashed square, the clipped region (its edge
    entries repeated outward) outside it; each head's kernel mass inside the window in its title."""
    kernels = [lightweight_kernel(e, side).cpu().numpy() for e in encodings]  # per layer (heads, S, S)
    heads = max(k.shape[0] for k in kernels)
    positive = np.concatenate([k[k > 0] for k in kernels])
    norm = LogNorm(vmin=max(float(positive.min()), 1e-8), vmax=float(positive.max()))
    reach = side - 1
    fig = Figure(figsize=(1.6 * heads + 1.2, 1.7 * len(kernels) + 1.0), constrained_layout=True)
    axes = fig.subplots(len(kernels), heads, squeeze=False)
    image = None
    for layer, (encoding, kernel) in enumerate(zip(encodings, kernels, strict=True)):
        w = encoding.window
        inside = slice(reach - w, reach + w + 1)
        for h, ax in enumerate(axes[layer]):
            if h >= kernel.shape[0]:
                ax.set_visible(False)
                continue
            extent = (-reach - 0.5, reach + 0.5, reach + 0.5, -reach - 0.5)  # x = dx, y = dy, dy down
            shown = np.where(kernel[h] > 0, kernel[h], np.nan)  # masked shifts: blank
            image = ax.imshow(shown, norm=norm, cmap="viridis", extent=extent, interpolation="nearest")
            ax.add_patch(Rectangle((-w - 0.5, -w - 0.5), 2 * w + 1, 2 * w + 1, fill=False, ls="--", lw=0.8))
            ax.plot([0], [0], marker="+", color="red", ms=5)
            mass = float(kernel[h][inside, inside].sum())
            ax.set_title(f"L{layer + 1} h{h + 1}: {mass:.2f} in window", fontsize=7)
            ax.set_xticks([-reach, 0, reach])
            ax.set_yticks([-reach, 0, reach])
            ax.tick_params(labelsize=6)
    assert image is not None
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="kernel weight (log scale)")
    note = (
        f"each head's bias term as a lightweight convolution kernel over every shift of the {side}x{side} "
        "grid\n"
        "(dx across, dy down, the query +); dashed: the window of learned entries;\n"
        "outside it the clipped shifts repeat its edge"
    )
    fig.suptitle((f"{title}\n" if title else "") + note, fontsize=8)
    return fig


def composite_kernels_of(inputs: FigureInput) -> Figure | None:
    """The registry's composite kernel figure: a model's composite encodings as the lightweight kernels
    they are (None for a model without them, or with them without their bias)."""
    composite = [e for e in inputs.backbone.encodings() if isinstance(e, CompositeRelativeEncoding)]
    if not composite or any(e.bias is None for e in composite):
        return None
    return composite_kernels_figure(composite, inputs.side, title=inputs.name or None)
