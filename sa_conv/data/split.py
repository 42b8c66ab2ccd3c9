"""The split protocol: which training images a run holds out for validation, drawn from its seed.

``clean`` holds out ``val_size`` training images (at most a fifth of them) for model selection and tests
once; ``paper`` trains on every training image and evaluates on the test split every epoch, as the
paper's ``train.py`` did.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sa_conv.data.config import DataConfig

__all__ = ["held_out", "split_indices", "split_warning"]


def held_out(n_images: int, config: DataConfig) -> int:
    """Training images held out for validation: none under the paper's protocol, else ``val_size`` up
    to a fifth of the images (a small, synthetic set keeps 4/5 for training)."""
    return 0 if config.protocol == "paper" else min(config.val_size, n_images // 5)


def split_indices(n_images: int, config: DataConfig, seed: int) -> tuple[Tensor, Tensor]:
    """The indices of the training and the validation images: a permutation drawn from ``seed``, its first
    ``held_out`` images for validation, the rest (the first ``train_subset`` of them) for training."""
    order = torch.randperm(n_images, generator=torch.Generator().manual_seed(seed))
    val_size = held_out(n_images, config)
    val_idx, train_idx = order[:val_size], order[val_size:]
    if config.train_subset is not None:
        train_idx = train_idx[: config.train_subset]
    return train_idx, val_idx


def split_warning(n_images: int, config: DataConfig) -> str | None:
    """The warning for a validation split cut to a fifth of the training images (None: not cut)."""
    val_size = held_out(n_images, config)
    if config.protocol != "clean" or val_size >= config.val_size:
        return None
    return (
        f"warning: val_size {config.val_size} is over a fifth of the {n_images} training "
        f"images: {val_size} are held out for validation"
    )
