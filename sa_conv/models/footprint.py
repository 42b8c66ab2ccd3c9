"""What a model will take in memory, computed from its config before anything is allocated: its parameters
counted on PyTorch's meta device (shapes only, no storage) and the activations a training step keeps for
its backward pass, estimated per layer; ``check_fits`` refuses a run that cannot fit the memory there is."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sa_conv.models import MODELS, ModelConfig, ResNetConfig, SAConfig

__all__ = [
    "Footprint",
    "ModelTooLargeError",
    "check_fits",
    "footprint",
    "resnet_activations",
    "sa_activations",
]

FLOAT32 = 4  # bytes
# per parameter while training: the weight, its gradient and SGD's momentum buffer, float32
TRAINING_COPIES = 3


class ModelTooLargeError(ValueError):
    """A model (with its training state at a batch size) larger than the memory there is."""


@dataclass(frozen=True)
class Footprint:
    """A model's memory at a batch size: parameters, their training state, the activations kept for the
    backward pass (an estimate: the reference computation's, every layer's kept at once)."""

    parameters: int
    batch: int
    parameter_bytes: int  # weights, gradients and momentum
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        """Everything a training step holds at once."""
        return self.parameter_bytes + self.activation_bytes

    def describe(self) -> str:
        """In words: ``about 3.2 GiB (12,090,000 parameters ..., 1.1 GiB of activations at batch 100)``."""
        return (
            f"about {_gib(self.total_bytes)} ({self.parameters:,} parameters with their gradients and "
            f"momentum {_gib(self.parameter_bytes)}, activations at batch {self.batch} "
            f"{_gib(self.activation_bytes)})"
        )


def footprint(model: str, config: ModelConfig, batch: int) -> Footprint:
    """The footprint of model ``model`` (a registry name) with ``config`` when trained at ``batch``: the
    activations as its registry entry estimates them (``ModelEntry.activations``)."""
    entry = MODELS[model]
    with torch.device("meta"):  # shapes only: nothing is allocated, whatever the size
        built = entry.build(config)
    parameters = sum(p.numel() for p in built.parameters())
    per_image = entry.activations_estimate()(config)
    return Footprint(parameters, batch, parameters * FLOAT32 * TRAINING_COPIES, per_image * batch * FLOAT32)


def sa_activations(config: SAConfig) -> int:
    """Values one image keeps per SA layer: the token-wide tensors of the block, the FFN's, the heads'
    full-width outputs and, for attention that depends on the image, the (heads, N, N) probabilities
    (twice: with their dropout mask)."""
    tokens, d = config.grid**2, config.hidden
    total = tokens * config.in_channels * config.pool**2  # the input tokens
    for heads in config.heads_per_layer:
        per_token = 8 * d + 2 * config.ffn + 2 * heads * d
        maps = 2 * heads * tokens * tokens if config.content or config.attention == "mixed" else 0
        total += tokens * per_token + maps
    return total


def resnet_activations(config: ResNetConfig) -> int:
    """Values one image keeps in a CIFAR ResNet: each conv's output, its batch norm's and its ReLU's."""
    side, width = 32, config.width
    total = 3 * side * side * width  # the stem
    for stage, blocks in enumerate(config.blocks):
        channels, here = width * 2**stage, side // 2**stage
        total += blocks * 2 * 3 * channels * here * here
    return total


def check_fits(fp: Footprint, available: int | None, *, what: str, lift: str) -> None:
    """``ModelTooLargeError`` when ``fp`` needs more than ``available`` bytes (None: unknown, not checked);
    its message names the estimate, the memory there is and how to lift the check (``lift``)."""
    if available is not None and fp.total_bytes > available:
        raise ModelTooLargeError(
            f"{what} needs {fp.describe()}; this machine has {_gib(available)} available: make it smaller "
            f"(--layers, --hidden, --heads, --batch-size), or {lift} to try anyway"
        )


def _gib(n: int) -> str:
    """Bytes in GiB, MiB for small amounts."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"
