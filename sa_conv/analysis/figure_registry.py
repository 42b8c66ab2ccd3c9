"""The figures of a trained model beyond the attention maps and locality curves every SA model has, by tag:
each entry names a function (``"module:function"``, imported when first drawn) that draws its figure from
a ``FigureInput``, or returns None where the model has nothing to show. Training (TensorBoard), the study
and ``experiments.figures`` all draw every entry: a new figure is one function and one line here."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from torch import Tensor

    from sa_conv.analysis.snapshots import LocalitySnapshot
    from sa_conv.models import Backbone

__all__ = ["FIGURES", "FigureInput", "figure_function"]


@dataclass(frozen=True)
class FigureInput:
    """What a figure of a model is drawn from: the model (eval mode), its attention maps per layer
    ``(B|1, heads, N, N)`` on the images shown, the side of its token grid, its locality record (empty
    without one), and the run's name for titles ("" without one)."""

    backbone: Backbone
    maps: Sequence[Tensor]
    side: int
    history: Sequence[LocalitySnapshot]
    name: str


FigureFunction = Callable[[FigureInput], "Figure | None"]

# tag -> the function that draws it (its file is ``<prefix>_<tag after the slash>.png``)
FIGURES: dict[str, str | FigureFunction] = {
    "attention/composite_kernels": "sa_conv.analysis.composite_kernels:composite_kernels_of",
}


def figure_function(entry: str | FigureFunction) -> FigureFunction:
    """The function of a registry entry (a ``"module:function"`` string imported now)."""
    if not isinstance(entry, str):
        return entry
    module, name = entry.split(":")
    function: FigureFunction = getattr(importlib.import_module(module), name)
    return function
