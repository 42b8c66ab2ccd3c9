"""The positional encodings an SA model can be built with, by name, torch-free: each entry names its class
(or holds it) and how a layer builds it, imported on the first build. A new encoding is one class and one
entry here (``ENCODINGS``), or one entry added at run time."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sa_conv.nn.encodings import PositionalEncoding

__all__ = ["ENCODINGS", "EncodingEntry", "EncodingLayer"]


@dataclass(frozen=True, kw_only=True)
class EncodingLayer:
    """What a model tells the encoding of one of its layers."""

    heads: int
    dim: int  # the tokens' width
    grid: int  # the side of the token grid
    init_std: float | None = None  # BERT's N(0, init_std^2) for learned tables; None: the paper's init
    window: int = 7  # composite: the window of relative shifts
    window_mask: bool = False  # composite: mask shifts beyond the window instead of clipping
    key_term: bool = False  # composite: the key-dependent term too


def _load(target: Any) -> Any:
    """``target`` itself, or the object a ``"module:name"`` string names (imported now)."""
    if not isinstance(target, str):
        return target
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class EncodingEntry:
    """One encoding of the registry: its class (or ``"module:Class"``), and how a layer builds it (a
    function of an ``EncodingLayer``, or its ``"module:function"``; default: ``cls(heads)``)."""

    cls: type | str
    build_layer: Callable[[EncodingLayer], Any] | str | None = None

    def build(self, layer: EncodingLayer) -> PositionalEncoding:
        """The encoding of one layer."""
        build = _load(self.build_layer) if self.build_layer is not None else None
        built: PositionalEncoding = build(layer) if build is not None else _load(self.cls)(layer.heads)
        return built


_HOME = "sa_conv.nn.encodings"

# name -> entry: the encodings an SA model can be built with (``SAConfig.encoding``)
ENCODINGS: dict[str, EncodingEntry] = {
    "quadratic": EncodingEntry(f"{_HOME}:QuadraticEncoding"),
    "gaussian": EncodingEntry(f"{_HOME}:GaussianEncoding"),
    "learned": EncodingEntry(f"{_HOME}:LearnedRelativeEncoding", f"{_HOME}:learned_for_layer"),
    "composite": EncodingEntry(f"{_HOME}:CompositeRelativeEncoding", f"{_HOME}:composite_for_layer"),
}
