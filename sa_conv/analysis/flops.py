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

from sa_conv.models import MODELS

__all__ = ["FlopCounts", "Pass", "analytic_flops", "counted_flops", "run_flops"]

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


def analytic_flops(
    model: str, config: object, *, training: bool = True, passes: Pass = "forward+backward"
) -> int:
    """The FLOPs ``counted_flops`` should find, from the architecture (batch-free work left out): the
    formula the model's registry entry names (``ModelEntry.flops``)."""
    formula = MODELS[model].flops_formula()
    forward, first, recomputed = formula(config, training)
    if passes == "forward":
        return forward
    backward = 2 * forward - first  # input and weight gradients; the image itself needs no gradient
    return forward + backward + recomputed
