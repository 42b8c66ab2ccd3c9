"""FLOPs of a model's image, counted two ways: by ``torch.utils.flop_counter`` and analytically.

``counted_flops`` runs a copy of the model on the meta device (no arithmetic is done, any batch is
free) under ``FlopCounterMode``, on the path it takes (``training=True``: the trained path, e.g. the
shared dense path under attention dropout; ``False``: evaluation, e.g. the separable path), forward
only or forward + backward, and divides by the batch: batch-free work (positional logits) is shared
by the batch's images. PyTorch's counter knows the out-of-place matrix products; the in-place ones
(``addmm_``, ``baddbmm_``) and the CPU flash-attention kernel of ``scaled_dot_product_attention``
are added here with the same formulas, so that no product counts 0, and its convolution backward,
which ignores ``groups`` (a depthwise 3 x 3 backward counted 200x), is replaced by one that does not.

``analytic_flops`` is the same number from the architecture alone (the matrix products a layer
computes, 2 FLOPs per multiply-add), the check that the counter sees every product. Only matrix
products and convolutions count; softmax, norms and element-wise work do not (PyTorch's convention).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from sa_conv.models import ResNetConfig, SAConfig

__all__ = ["FlopCounts", "Pass", "analytic_flops", "attention_path", "counted_flops", "run_flops"]

Pass = Literal["forward", "forward+backward"]
_aten = torch.ops.aten


Shape = Sequence[int]  # a tensor's shape, as torch's FLOP formulas receive it


def _sdpa_cpu(
    query: Shape, key: Shape, value: Shape, *args: object, out_shape: object = None, **kwargs: object
) -> int:
    return flop_counter.sdpa_flop_count(query, key, value)


def _sdpa_cpu_backward(
    grad_out: Shape,
    query: Shape,
    key: Shape,
    value: Shape,
    *args: object,
    out_shape: object = None,
    **kwargs: object,
) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)


def _conv_backward(
    grad_out: Shape,
    x: Shape,
    weight: Shape,
    bias: Shape | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    *args: Any,
    out_shape: object = None,
) -> int:
    """Each requested gradient (input, weight) costs the forward's products: 2 out C_in/groups K^2."""
    output_padding, groups, output_mask = args
    if transposed:
        return flop_counter.conv_backward_flop(
            grad_out,
            x,
            weight,
            bias,
            stride,
            padding,
            dilation,
            transposed,
            output_padding,
            groups,
            output_mask,
            out_shape=out_shape,
        )
    forward = 2 * math.prod(grad_out) * math.prod(weight[1:])  # weight: (C_out, C_in / groups, *K)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


def _already_wrapped(formula: Any) -> Any:
    """A registry formula (already taking tensors) marked so that the counter does not wrap it twice."""

    def wrapped(*args: Any, **kwargs: Any) -> int:
        return formula(*args, **kwargs)

    wrapped._get_raw = True  # type: ignore[attr-defined]  # FlopCounterMode's own marker on a function
    return wrapped


def _extra_formulas() -> dict[Any, Any]:
    """Formulas PyTorch's registry lacks or gets wrong: in-place products, the CPU fused attention,
    grouped convolution backward."""
    registry = flop_counter.flop_registry
    extra: dict[Any, Any] = {
        _aten.addmm_: _already_wrapped(registry[_aten.addmm]),
        _aten.baddbmm_: _already_wrapped(registry[_aten.baddbmm]),
        _aten.convolution_backward: _conv_backward,
    }
    extra[_aten._scaled_dot_product_flash_attention_for_cpu] = _sdpa_cpu
    extra[_aten._scaled_dot_product_flash_attention_for_cpu_backward] = _sdpa_cpu_backward
    return extra


def counted_flops(
    model: nn.Module,
    *,
    training: bool = True,
    passes: Pass = "forward+backward",
    batch: int = 100,
    image_size: int = 32,
) -> float:
    """FLOPs per image of a ``batch`` of ``image_size`` RGB images through ``model`` as it computes them
    (see the module docstring). The model itself is not touched: a copy runs on the meta device."""
    meta = copy.deepcopy(model).to("meta").train(training)
    images = torch.zeros(batch, 3, image_size, image_size, device="meta")
    counter = FlopCounterMode(display=False, custom_mapping=_extra_formulas())
    with counter, torch.set_grad_enabled(passes == "forward+backward"):
        logits = meta(images)
        if passes == "forward+backward":
            logits.sum().backward()
    return counter.get_total_flops() / batch


@dataclass(frozen=True)
class FlopCounts:
    """A run's counted FLOPs per image: the trained path (forward + backward) and evaluation (forward)."""

    train: float
    eval: float


def run_flops(model: nn.Module, *, batch: int = 100) -> FlopCounts:
    """A run's FLOPs per image at its batch, counted on the paths training and evaluation take."""
    return FlopCounts(
        train=counted_flops(model, training=True, batch=batch),
        eval=counted_flops(model, training=False, passes="forward", batch=batch),
    )


def attention_path(config: SAConfig, *, training: bool) -> Literal["separable", "dense"]:
    """The computation a layer of ``config`` takes on a CPU: separable (two small mixings per head) or
    dense (``(heads, N, N)`` probabilities times the values), as ``MultiHeadSelfAttention2d`` picks it."""
    separable_encoding = config.encoding in ("quadratic", "learned")
    dropout = training and config.attn_dropout > 0
    positional_only = not config.content and config.encoding != "composite"
    if config.impl == "separable" or (
        config.impl == "auto" and separable_encoding and positional_only and not dropout
    ):
        return "separable"
    return "dense"


def analytic_flops(
    model: str, config: SAConfig | ResNetConfig, *, training: bool = True, passes: Pass = "forward+backward"
) -> int:
    """The FLOPs ``counted_flops`` should find, from the architecture (batch-free work left out)."""
    if isinstance(config, ResNetConfig):
        forward, first = _resnet_forward(config)
    else:
        forward, first = _sa_forward(config, training=training)
    if passes == "forward":
        return forward
    backward = 2 * forward - first  # input and weight gradients; the image itself needs no gradient
    if isinstance(config, SAConfig) and attention_path(config, training=training) == "separable":
        backward += _separable_mixing(config)  # the fused kernel recomputes the mixings in backward
    return forward + backward


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
    path = attention_path(config, training=training)
    for heads in config.heads_per_layer:
        if config.attention == "mixed":
            total += _mixed_attention(config, heads)
        else:
            total += _mhsa(config, heads, path)
        total += _linear(n, d, d) + _linear(n, d, config.ffn) + _linear(n, config.ffn, d)  # dense + FFN
    return total, embed


def _mhsa(config: SAConfig, heads: int, path: str) -> int:
    n, d = config.grid**2, config.hidden
    flops = _linear(n, heads * d, d)  # the output projection of the concatenated full-width heads
    if path == "separable":
        return flops + 2 * heads * n * (2 * config.grid) * d
    flops += 2 * heads * n * n * d  # probabilities times values
    query = config.content or config.encoding == "composite"
    key = config.content or config.key_term
    flops += query * _linear(n, d, heads * d) + key * _linear(n, d, heads * d)
    if config.content:
        flops += 2 * heads * n * n * d  # q . k
    if config.encoding == "composite":
        flops += 2 * heads * n * n * d * (1 + config.key_term)  # q . w[delta] (and k . w'[-delta])
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
