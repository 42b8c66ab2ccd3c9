"""What a training batch goes through on its device: the paper's random crop and flip, drawn per image
from a resumable generator on that device, and the normalization of every batch.

Normalization divides by 255 and standardizes with constants kept on each device (no host-to-device
copy per batch, so a training step makes no host sync).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["CIFAR10_MEAN", "CIFAR10_STD", "AugmentationRNG", "Normalization", "random_crop_flip"]

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)  # the paper's train.py (not the pixel std 0.247, 0.243, 0.261)


def random_crop_flip(images: Tensor, *, padding: int = 4, generator: torch.Generator | None = None) -> Tensor:
    """Per-sample random crop (zero padding) and horizontal flip of a batch ``(B, C, H, W)``.

    ``transforms.v2.RandomCrop`` draws one crop per call, i.e. one for the whole batch; this draws one
    per image with tensor ops, on the batch's device.
    """
    b, _, h, w = images.shape
    device = images.device
    draw = generator.device if generator is not None else device  # random numbers where the generator lives
    padded = torch.nn.functional.pad(images, (padding,) * 4)  # (B, C, H + 2p, W + 2p)
    oy = torch.randint(0, 2 * padding + 1, (b,), generator=generator, device=draw).to(device)
    ox = torch.randint(0, 2 * padding + 1, (b,), generator=generator, device=draw).to(device)
    flip = (torch.rand(b, generator=generator, device=draw) < 0.5).to(device)
    rows = oy[:, None] + torch.arange(h, device=device)  # (B, H)
    cols = ox[:, None] + torch.arange(w, device=device)  # (B, W)
    cols = torch.where(flip[:, None], cols.flip(-1), cols)  # mirrored column order
    batch = torch.arange(b, device=device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()


class AugmentationRNG:
    """The generator of the crops and flips: created on the batches' device at the first batch, seeded
    from the run's seed, and resumable (its state goes into checkpoints with the device kind it ran on).

    A CPU and a CUDA generator are different algorithms: a run resumed on another kind of device draws
    other crops from there on.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng: torch.Generator | None = None
        self._resumed: tuple[str, Tensor] | None = None  # a resumed state, for the device kind it was on

    def generator(self, device: torch.device) -> torch.Generator:
        """The generator on ``device``: seeded, or the resumed state where it was saved on the same kind
        of device."""
        if self._rng is None or self._rng.device != device:
            self._rng = torch.Generator(device=device).manual_seed(self.seed)
            if self._resumed is not None and self._resumed[0] == device.type:
                self._rng.set_state(self._resumed[1])
            self._resumed = None
        return self._rng

    def state(self) -> tuple[str, Tensor]:
        """The device kind and the generator state (before any batch: the state a first batch starts from)."""
        if self._rng is None:
            return self._resumed or ("cpu", torch.Generator().manual_seed(self.seed).get_state())
        return self._rng.device.type, self._rng.get_state()

    def load(self, device_type: str, state: Tensor) -> None:
        """Resume from a saved state; the generator is made again at the next batch."""
        self._resumed, self._rng = (device_type, state), None


class Normalization:
    """uint8 images ``(B, 3, H, W)`` -> float32, scaled to [0, 1] and standardized, with the constants
    kept on each device it has seen."""

    def __init__(self, mean: tuple[float, ...] = CIFAR10_MEAN, std: tuple[float, ...] = CIFAR10_STD) -> None:
        self.mean, self.std = mean, std
        self._constants: dict[torch.device, tuple[Tensor, Tensor]] = {}

    def __call__(self, images: Tensor) -> Tensor:
        """The normalized images, on their device."""
        if images.device not in self._constants:
            shape = (1, len(self.mean), 1, 1)
            mean = torch.tensor(self.mean).view(shape).to(images.device)
            std = torch.tensor(self.std).view(shape).to(images.device)
            self._constants[images.device] = (mean, std)
        mean, std = self._constants[images.device]
        return (images.float() / 255 - mean) / std
