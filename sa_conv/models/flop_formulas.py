"""The registry's models' FLOPs from their architecture alone (the matrix products a layer computes, 2
FLOPs per multiply-add; softmax, norms and element-wise work do not count, PyTorch's convention): each
family's formula, named by its ``ModelEntry.flops``, and what an attention layer tells the formula about
itself. ``sa_conv.analysis.flops`` checks them against PyTorch's counter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from sa_conv.models.resnet_config import ResNetConfig
from sa_conv.models.sa_config import SAConfig
from sa_conv.nn.attention import MultiHeadSelfAttention2d

__all__ = ["AttentionFacts", "attention_facts", "attention_path", "resnet_flops", "sa_flops"]


@dataclass(frozen=True)
class AttentionFacts:
    """What an attention layer of a model computes on a CPU, as the layer itself answers it: its path
    (separable: two small mixings per head; dense: ``(heads, N, N)`` probabilities times the values) and
    which terms read the input (content ``q . k``, the encoding's query and key terms)."""

    path: Literal["separable", "dense"]
    content: bool
    query_term: bool
    key_term: bool


def attention_facts(config: SAConfig, heads: int, *, training: bool) -> AttentionFacts:
    """The facts of a layer of ``config`` with ``heads`` heads, asked of the layer built on the meta
    device (no memory, no arithmetic): the path it resolves, the terms its encoding declares."""
    from sa_conv.models.sa_classifier import SABlock

    with torch.device("meta"):
        block = SABlock(config, heads)
    layer = block.attention
    if not isinstance(layer, MultiHeadSelfAttention2d):
        raise TypeError(f"{type(layer).__name__} is not a multi-head self-attention layer")
    layer.train(training)
    path: Literal["separable", "dense"] = (
        "separable" if layer.resolved_impl("cpu") == "separable" else "dense"
    )
    return AttentionFacts(path, layer.content, layer.query_term, layer.key_term)


def attention_path(config: SAConfig, *, training: bool) -> Literal["separable", "dense"]:
    """The computation a layer of ``config`` takes on a CPU (``attention_facts``)."""
    return attention_facts(config, config.heads_per_layer[0], training=training).path


def sa_flops(config: SAConfig, training: bool) -> tuple[int, int, int]:
    """The SA classifier's formula: forward FLOPs, those of the products whose input is the image, and
    the mixings a separable layer's fused kernel recomputes in backward."""
    forward, first = _sa_forward(config, training=training)
    separable = config.attention != "mixed" and attention_path(config, training=training) == "separable"
    return forward, first, _separable_mixing(config) if separable else 0


def resnet_flops(config: ResNetConfig, training: bool) -> tuple[int, int, int]:
    """The CIFAR ResNet18's formula: forward FLOPs, those of the stem; nothing recomputed."""
    forward, first = _resnet_forward(config)
    return forward, first, 0


def _linear(tokens: int, d_in: int, d_out: int) -> int:
    return 2 * tokens * d_in * d_out


def _separable_mixing(config: SAConfig) -> int:
    """Every layer's row and column mixings: per head, N (H + W) D multiply-adds."""
    g, d = config.grid, config.hidden
    return sum(2 * heads * g * g * (2 * g) * d for heads in config.heads_per_layer)


def _sa_forward(config: SAConfig, *, training: bool) -> tuple[int, int]:
    """Forward FLOPs of the SA classifier, and those of the products whose input is the image."""
    n, d = config.grid**2, config.hidden
    embed = _linear(n, config.in_channels * config.pool**2, d)
    total = embed + _linear(1, d, config.num_classes)
    for heads in config.heads_per_layer:
        if config.attention == "mixed":
            total += _mixed_attention(config, heads)
        else:
            total += _mhsa(config, heads, attention_facts(config, heads, training=training))
        total += _linear(n, d, d) + _linear(n, d, config.ffn) + _linear(n, config.ffn, d)  # dense + FFN
    return total, embed


def _mhsa(config: SAConfig, heads: int, layer: AttentionFacts) -> int:
    n, d = config.grid**2, config.hidden
    flops = _linear(n, heads * d, d)  # the output projection of the concatenated full-width heads
    if layer.path == "separable":
        return flops + 2 * heads * n * (2 * config.grid) * d
    flops += 2 * heads * n * n * d  # probabilities times values
    query = layer.content or layer.query_term
    key = layer.content or layer.key_term
    flops += query * _linear(n, d, heads * d) + key * _linear(n, d, heads * d)
    if layer.content:
        flops += 2 * heads * n * n * d  # q . k
    # the encoding's terms of the input: q . w[delta] and k . w'[-delta]
    flops += 2 * heads * n * n * d * (layer.query_term + layer.key_term)
    return flops


def _mixed_attention(config: SAConfig, heads: int) -> int:
    n, d, k2 = config.grid**2, config.hidden, config.conv_kernel**2
    attention_heads = heads // config.head_ratio
    width = attention_heads * (d // heads)
    flops = 4 * _linear(n, d, width)  # query, key, value, conv values
    flops += 2 * 2 * n * n * width  # q . k and probabilities times values, over the attention heads
    flops += 2 * n * d * k2 + _linear(n, d, width)  # span-aware keys: depthwise K x K, pointwise
    flops += _linear(n, width, attention_heads * k2)  # the dynamic kernels
    flops += 2 * n * width * k2  # applying them
    return flops


def _resnet_forward(config: ResNetConfig) -> tuple[int, int]:
    """Forward FLOPs of the CIFAR ResNet18, and those of the stem (whose input is the image)."""

    def conv(side: int, c_in: int, c_out: int, k: int) -> int:
        return 2 * side * side * c_in * c_out * k * k

    side, w = 32, config.width
    stem = conv(side, config.in_channels, w, 3)
    total, planes_in = stem, w
    for stage, blocks in enumerate(config.blocks):
        planes = w * 2**stage
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            side_out = side // stride
            total += conv(side_out, planes_in, planes, 3) + conv(side_out, planes, planes, 3)
            if stride != 1 or planes_in != planes:
                total += conv(side_out, planes_in, planes, 1)
            side, planes_in = side_out, planes
    total += _linear(1, planes_in, config.num_classes)
    return total, stem
