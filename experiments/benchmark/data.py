"""The data path measured: crop, flip and normalization per batch on the device against per image with
torchvision's transforms.v2."""

from __future__ import annotations

from typing import Any

import torch

from experiments.benchmark.tools import time_it
from sa_conv.data.augmentation import CIFAR10_MEAN, CIFAR10_STD, random_crop_flip

__all__ = ["bench_data"]


def bench_data(device: torch.device, min_time: float, repeats: int | None = None) -> dict[str, Any]:
    """Augmentation + normalization per batch on the device vs per image with transforms.v2."""
    from torchvision.transforms import v2

    images = torch.randint(0, 256, (256, 3, 32, 32), dtype=torch.uint8, device=device)
    per_image = v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()])
    normalize = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(CIFAR10_MEAN, CIFAR10_STD)])
    batched = time_it(lambda: normalize(random_crop_flip(images)), device, min_time, repeats)
    cpu_images = images.cpu()
    looped = time_it(
        lambda: normalize(torch.stack([per_image(im) for im in cpu_images])), device, min_time, repeats
    )
    return {
        "batch": len(images),
        "batched_images_per_s": len(images) / batched,
        "per_image_v2_images_per_s": len(images) / looped,
        "speedup": looped / batched,
    }
