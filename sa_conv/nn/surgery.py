"""Model surgery on attention heads: removing heads from a layer (their encoding parameters, query and key
projections and their block of the output projection) and from a model's layers, whose config then
records each layer's heads (``layer_heads``) so that it rebuilds the pruned shape.

Beside the other surgery (``sa_conv.nn.conversion``); the paper prunes its degenerate heads this way
(``experiments.prune``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from sa_conv.nn.attention import MultiHeadSelfAttention2d

__all__ = ["PrunableModel", "prune_layer_heads", "prune_model_heads"]


class PrunableModel(Protocol):
    """A model whose attention layers can lose heads: its config (a frozen dataclass with a
    ``layer_heads`` field and the ``heads_per_layer`` it gives) and its attention layers, in order."""

    config: Any

    def attention_layers(self) -> Sequence[nn.Module]: ...


@torch.no_grad()
def prune_layer_heads(layer: MultiHeadSelfAttention2d, heads: Sequence[int]) -> None:
    """Remove ``heads`` (indices) from ``layer`` in place: their encoding parameters, projections and
    projection blocks."""
    remove = set(heads)
    if not remove <= set(range(layer.heads)):
        raise ValueError(f"heads to prune must be in 0..{layer.heads - 1}, got {sorted(remove)}")
    if len(remove) == layer.heads:
        raise ValueError(f"cannot prune all {layer.heads} heads of a layer")
    keep = torch.tensor([h for h in range(layer.heads) if h not in remove])
    d = layer.dim
    columns = (keep[:, None] * d + torch.arange(d)).flatten()  # the kept heads' blocks of heads * D
    if layer.encoding is not None:
        layer.encoding.select_heads(keep)
    if layer.query is not None:
        layer.query = _select_rows(layer.query, columns)
    if layer.key is not None:
        layer.key = _select_rows(layer.key, columns)
    old = layer.proj
    proj = nn.Linear(len(columns), layer.out_dim, bias=old.bias is not None)
    proj = proj.to(old.weight.device, old.weight.dtype)
    proj.weight.copy_(old.weight[:, columns.to(proj.weight.device)])
    if proj.bias is not None and old.bias is not None:
        proj.bias.copy_(old.bias)
    layer.proj, layer.heads = proj, len(keep)


@torch.no_grad()
def prune_model_heads(model: PrunableModel, heads: Mapping[int, Sequence[int]]) -> None:
    """Remove heads ``{layer index: [head indices]}`` from a model's attention layers, and record every
    layer's heads in its config (``layer_heads``)."""
    layers = list(model.attention_layers())
    counts = list(model.config.heads_per_layer)
    for i, remove in heads.items():
        if not remove:
            continue
        layer = layers[i]
        if not isinstance(layer, MultiHeadSelfAttention2d):
            raise ValueError(f"layer {i} is a {type(layer).__name__}: only self-attention layers prune")
        prune_layer_heads(layer, remove)
        counts[i] = layer.heads
    model.config = dataclasses.replace(model.config, layer_heads=tuple(counts))


def _select_rows(linear: nn.Linear, rows: Tensor) -> nn.Linear:
    """A copy of ``linear`` keeping only the output features ``rows``."""
    out = nn.Linear(linear.in_features, len(rows), bias=linear.bias is not None)
    out = out.to(linear.weight.device, linear.weight.dtype)
    rows = rows.to(linear.weight.device)
    out.weight.copy_(linear.weight[rows])
    if out.bias is not None and linear.bias is not None:
        out.bias.copy_(linear.bias[rows])
    return out
