"""CIFAR-10 from its sources, decoded once into uint8 ``(N, 3, 32, 32)`` tensors and labels: torchvision's
download, an ImageFolder tree ``<dir>/train/<class>/*``, ``<dir>/test/<class>/*``, or synthetic images
(class templates plus noise, learnable) for tests and smoke runs. Errors name the file or folder.

- ``"torchvision"``: ``torchvision.datasets.CIFAR10(root, download=True)``.
- ``"folder"``: an ImageFolder tree ``<dir>/train/<class>/*``, ``<dir>/test/<class>/*``.
- ``"synthetic"``: generated class templates plus noise (learnable), for tests and smoke runs.
- ``"auto"``: ``"folder"`` when ``data_dir`` holds ``train/`` or ``test/``, else ``"torchvision"`` (which
  downloads only into a missing or empty folder, or one that already holds torchvision's copy).
"""

from __future__ import annotations

import urllib.error
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from sa_conv.data.tree import TreeError, class_folders, decode_bounded, image_files
from sa_conv.utils.errors import DataError
from sa_conv.utils.files import new_folders_removed_on_error
from sa_conv.utils.quote import quoted

__all__ = [
    "CIFAR10_CLASSES",
    "IMAGE_SIZE",
    "SOURCES",
    "DataError",
    "Source",
    "Split",
    "check_download_target",
    "load_image_folder",
    "load_split",
    "load_torchvision",
    "prepare",
    "resolve_source",
    "synthetic",
]

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
IMAGE_SIZE = 32

Split = Literal["train", "test"]
Source = Literal["auto", "torchvision", "folder", "synthetic"]
SOURCES: tuple[str, ...] = ("auto", "torchvision", "folder", "synthetic")


def load_image_folder(root: Path, split: Split) -> tuple[Tensor, Tensor]:
    """Decode ``root/split/<class>/*`` into uint8 ``(N, 3, 32, 32)`` and labels; errors name the file
    (``sa_conv.data.tree``: each folder read once, each image's size checked before it is decoded)."""
    folder = root / split
    if not folder.is_dir():
        raise DataError(f"{root} has no '{split}' folder: expected {root}/{split}/<class>/*.jpg")
    try:
        classes = class_folders(folder)
        if tuple(classes) != CIFAR10_CLASSES:
            missing = sorted(set(CIFAR10_CLASSES) - set(classes))
            extra = sorted(set(classes) - set(CIFAR10_CLASSES))
            raise DataError(
                f"{folder} does not hold the 10 CIFAR-10 classes (missing: {', '.join(missing) or '-'}; "
                f"unexpected: {', '.join(quoted(e, 30) for e in extra[:3]) or '-'}"
                f"{f' and {len(extra) - 3} more' if len(extra) > 3 else ''})"
            )
        samples = image_files(folder, classes)
        if empty := sorted(set(CIFAR10_CLASSES) - {CIFAR10_CLASSES[i] for _, i in samples}):
            raise DataError(f"{folder}: no image for the classes {', '.join(empty)} (*.jpg, *.png, ...)")
        images = torch.empty(len(samples), 3, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.uint8)
        for i, (path, _) in enumerate(samples):
            images[i] = decode_bounded(path, IMAGE_SIZE)
    except TreeError as err:
        raise DataError(str(err)) from None
    return images, torch.tensor([label for _, label in samples], dtype=torch.long)


def check_download_target(root: Path) -> None:
    """Refuse to download CIFAR-10 into a folder that holds something else (a mistyped ``data_dir``)."""
    if not root.exists() or (root / "cifar-10-batches-py").is_dir():
        return
    if not root.is_dir():
        raise DataError(f"{root} is a file, not a data folder")
    entries = sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
    if not entries or entries == ["cifar-10-python.tar.gz"]:
        return
    classes = sorted(set(entries) & set(CIFAR10_CLASSES))
    if classes:
        raise DataError(
            f"{root} holds class folders ({', '.join(classes[:2])}, ...): "
            f"it is one split of an ImageFolder tree; pass its parent folder, which holds train/ and test/"
        )
    raise DataError(
        f"{root} holds neither an ImageFolder tree (train/, test/) nor torchvision's CIFAR-10 "
        f"(cifar-10-batches-py), and is not empty: refusing to download CIFAR-10 into it"
    )


def load_torchvision(root: Path, split: Split, *, download: bool) -> tuple[Tensor, Tensor]:
    """CIFAR-10 through ``torchvision.datasets.CIFAR10`` as uint8 ``(N, 3, 32, 32)`` and labels."""
    from torchvision.datasets import CIFAR10

    hint = (
        "pass --data-dir with an existing CIFAR-10 copy (cifar-10-batches-py) or an ImageFolder tree "
        "<dir>/train/<class>/*, <dir>/test/<class>/*"
    )
    try:
        with new_folders_removed_on_error(root):  # a failed download leaves no empty folder behind
            dataset = CIFAR10(str(root), train=split == "train", download=download)
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        reason = getattr(err, "reason", err)
        raise DataError(f"could not download CIFAR-10 into {root} ({reason}): {hint}") from None
    except RuntimeError as err:  # "Dataset not found or corrupted"
        raise DataError(f"CIFAR-10 in {root} is missing or corrupt ({err}): {hint}") from None
    images = torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous()  # (N, 3, 32, 32)
    return images, torch.tensor(dataset.targets, dtype=torch.long)


def synthetic(n: int, *, seed: int, num_classes: int = 10) -> tuple[Tensor, Tensor]:
    """Learnable synthetic images: a fixed random template per class plus noise, uint8."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.rand(num_classes, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, num_classes, (n,), generator=g)
    noise = torch.rand(n, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
    images = (0.6 * templates[labels] + 0.4 * noise) * 255
    return images.round().to(torch.uint8), labels


def resolve_source(source: str, data_dir: Path | None) -> str:
    """The source a data folder is read from: ``auto`` resolved against ``data_dir``."""
    if source != "auto":
        return source
    if data_dir is not None and any((data_dir / split).is_dir() for split in ("train", "test")):
        return "folder"
    return "torchvision"


def load_split(
    source: str, split: Split, *, data_dir: Path | None, synthetic_size: int, seed: int
) -> tuple[Tensor, Tensor]:
    """One split of a (resolved) source as uint8 ``(N, 3, 32, 32)`` and labels; the synthetic test split
    is a quarter of its training images (at least 16), drawn from the next seed."""
    if source == "synthetic":
        n = synthetic_size if split == "train" else max(synthetic_size // 4, 16)
        return synthetic(n, seed=seed + (split == "test"))
    if data_dir is None:
        raise DataError(f"source {quoted(source)} needs a data_dir")
    if source == "folder":
        return load_image_folder(data_dir, split)
    check_download_target(data_dir)
    return load_torchvision(data_dir, split, download=True)


def prepare(source: str, data_dir: Path | None) -> None:
    """Download torchvision's CIFAR-10 where a (resolved) torchvision source will read it."""
    if source == "torchvision" and data_dir is not None:
        check_download_target(data_dir)
        for split in ("train", "test"):
            load_torchvision(data_dir, split, download=True)
