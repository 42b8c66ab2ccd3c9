"""Image trees on disk: an ImageFolder tree of CIFAR-10's classes in JPEG (train/, test/)."""

from __future__ import annotations

from pathlib import Path

import torch
from torchvision.io import encode_jpeg

from sa_conv.data.sources import CIFAR10_CLASSES


def write_tree(root: Path, classes=CIFAR10_CLASSES, per_class: int = 2, size: int = 32) -> Path:
    """``per_class`` flat images of each class and split, image ``i`` of class ``c`` of value ``20 c + i``
    (JPEG quality 100)."""
    for split in ("train", "test"):
        for c, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                image = torch.full((3, size, size), 20 * c + i, dtype=torch.uint8)
                (folder / f"{i:04d}.jpg").write_bytes(encode_jpeg(image, quality=100).numpy().tobytes())
    return root


def jpeg_tree(root: Path) -> Path:
    """Three random 32 x 32 JPEG images of each class and split."""
    for split in ("train", "test"):
        for name in CIFAR10_CLASSES:
            (root / split / name).mkdir(parents=True)
            for i in range(3):
                data = encode_jpeg(torch.randint(0, 255, (3, 32, 32), dtype=torch.uint8)).numpy().tobytes()
                (root / split / name / f"{i}.jpg").write_bytes(data)
    return root
