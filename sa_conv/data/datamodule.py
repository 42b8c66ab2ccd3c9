"""CIFAR-10 as a LightningDataModule: decoded once into uint8 tensors, augmented per batch on the device.

Its parts have modules of their own: the sources (``sa_conv.data.sources``: torchvision, an ImageFolder
tree, synthetic), the split protocol (``split``), the resumable batches (``batches``), the crop and flip
and the normalization (``augmentation``), the data's fingerprint (``fingerprint``) and the config
(``config``). The module wires them into Lightning's hooks.

Every image is decoded once and held as one ``(N, 3, 32, 32)`` uint8 tensor, so an epoch never
re-decodes a JPEG. The paper's augmentation (random crop 32 with padding 4, horizontal flip) runs per
sample but vectorized over the batch in ``on_after_batch_transfer``, i.e. on the training device.
"""

from __future__ import annotations

import math
import sys
from functools import partial
from pathlib import Path
from typing import Literal

import pytorch_lightning as pl
from torch import Tensor
from torch.utils.data import DataLoader

from sa_conv.data.augmentation import (
    AugmentationRNG,
    Normalization,
    random_crop_flip,
)
from sa_conv.data.batches import ResumableBatchSampler, ResumableDataLoader, TensorImages, resumable_loader
from sa_conv.data.config import DataConfig
from sa_conv.data.fingerprint import fingerprint
from sa_conv.data.sources import (
    SOURCES,
    Source,
    load_split,
    prepare,
    resolve_source,
)
from sa_conv.data.split import split_indices, split_warning
from sa_conv.utils.config import config_to_dict
from sa_conv.utils.errors import CheckpointError
from sa_conv.utils.quote import quoted

__all__ = ["CIFAR10DataModule"]

SplitName = Literal["train", "val", "test"]


class CIFAR10DataModule(pl.LightningDataModule):
    """CIFAR-10 train/val/test as in-memory uint8 tensors; augmentation and normalization per batch.

    Args:
        config: batches, protocol, validation split, subset, augmentation.
        data_dir: an ImageFolder tree or a torchvision CIFAR-10 root (``source``).
        source: ``auto``, ``torchvision``, ``folder`` or ``synthetic`` (``sa_conv.data.sources``).
        synthetic_size: training images of the synthetic source.
        seed: the validation split and the augmentation generator.
        eval_batch_size: evaluation batches (default: the larger of the batch and 256).
    """

    def __init__(
        self,
        config: DataConfig | None = None,
        *,
        data_dir: str | Path | None = None,
        source: Source = "auto",
        synthetic_size: int = 512,
        seed: int = 0,
        eval_batch_size: int | None = None,
    ) -> None:
        super().__init__()
        config = config or DataConfig()
        if source not in SOURCES:
            raise ValueError(f"unknown data source {quoted(source)}")
        if synthetic_size <= 0:
            raise ValueError(f"synthetic_size must be positive, got {synthetic_size}")
        if eval_batch_size is not None and eval_batch_size <= 0:
            raise ValueError(f"eval_batch_size must be positive, got {eval_batch_size}")
        self.config = config
        resolved = None if data_dir is None else str(Path(data_dir).resolve())
        self.save_hyperparameters(
            {"config": config_to_dict(config), "data_dir": resolved, "source": source}
            | {"synthetic_size": synthetic_size, "seed": seed}
        )
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.source, self.synthetic_size, self.seed = source, synthetic_size, seed
        self.eval_batch_size = eval_batch_size or max(config.batch_size, 256)
        self.normalize = Normalization()
        self.augment_rng = AugmentationRNG(seed + 1)  # crops and flips, on the batches' device
        self._train_sampler: ResumableBatchSampler | None = None  # the one Lightning iterates
        self._fingerprint: dict[str, object] | None = None
        self.train_set: TensorImages | None = None
        self.val_set: TensorImages | None = None
        self.test_set: TensorImages | None = None

    def resolved_source(self) -> str:
        """The source that ``setup`` reads: ``auto`` resolved against ``data_dir``."""
        return resolve_source(self.source, self.data_dir)

    def prepare_data(self) -> None:
        prepare(self.resolved_source(), self.data_dir)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        source = self.resolved_source()
        load = partial(
            load_split, source, data_dir=self.data_dir, synthetic_size=self.synthetic_size, seed=self.seed
        )
        images, labels = load("train")
        warning = split_warning(len(labels), self.config)
        if warning is not None and source != "synthetic":  # synthetic sets are small by design
            print(warning, file=sys.stderr)
        train_idx, val_idx = split_indices(len(labels), self.config, self.seed)
        self.train_set = TensorImages(images[train_idx], labels[train_idx])
        self.val_set = TensorImages(images[val_idx], labels[val_idx])
        self.test_set = TensorImages(*load("test"))

    def split(self, name: SplitName) -> TensorImages:
        """One split's images and labels (``setup`` first, where it has not run)."""
        self.setup()
        dataset = {"train": self.train_set, "val": self.val_set, "test": self.test_set}[name]
        assert dataset is not None  # setup made every split
        return dataset

    def evaluated_split(self) -> SplitName:
        """The split the validation loop evaluates every epoch: the test split under the paper's protocol."""
        return "test" if self.config.protocol == "paper" else "val"

    def _loader(self, dataset: TensorImages, *, train: bool) -> ResumableDataLoader:
        trainer = self.trainer
        return resumable_loader(
            dataset,
            self.config.batch_size if train else self.eval_batch_size,
            shuffle=train,
            seed=self.seed,
            rank=trainer.global_rank if trainer is not None else 0,
            world_size=trainer.world_size if trainer is not None else 1,
            pin_memory=trainer is not None and trainer.strategy.root_device.type == "cuda",
        )

    def train_batches(self, world_size: int = 1, limit: int | float | None = None) -> int:
        """Training batches of one epoch on each of ``world_size`` ranks (what the loader yields), cut
        as Lightning cuts them by ``limit_train_batches`` (a count, or a fraction of the epoch)."""
        per_rank = math.ceil(len(self.split("train")) / world_size)
        batches = math.ceil(per_rank / self.config.batch_size)
        if isinstance(limit, int):
            return min(batches, limit)
        return max(1, int(batches * limit)) if isinstance(limit, float) else batches

    def train_dataloader(self) -> DataLoader[tuple[Tensor, Tensor]]:
        loader = self._loader(self.split("train"), train=True)
        self._train_sampler = loader.position  # it advances as batches are used
        return loader

    def val_dataloader(self) -> DataLoader[tuple[Tensor, Tensor]]:
        """The held-out split, or the test split under the paper's protocol."""
        return self._loader(self.split(self.evaluated_split()), train=False)

    def test_dataloader(self) -> DataLoader[tuple[Tensor, Tensor]]:
        return self._loader(self.split("test"), train=False)

    def on_after_batch_transfer(
        self, batch: tuple[Tensor, Tensor], dataloader_idx: int
    ) -> tuple[Tensor, Tensor]:
        images, labels = batch  # uint8 (B, 3, 32, 32) on the training device
        if self.trainer is not None and self.trainer.training:
            if self._train_sampler is not None:
                self._train_sampler.consumed += 1  # this batch is used now (the loader may run ahead)
            if self.config.augment:
                images = random_crop_flip(images, generator=self.augment_rng.generator(images.device))
        return self.normalize(images), labels

    def fingerprint(self) -> dict[str, object]:
        """What the run's data is, wherever it lies (``sa_conv.data.fingerprint``)."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint({name: self.split(name) for name in ("train", "val", "test")})
        return self._fingerprint

    def evaluation_images(
        self, n: int | None = None, *, split: str = "test", normalized: bool = True
    ) -> tuple[Tensor, Tensor]:
        """The first ``n`` images of a split (``test`` or ``val``), normalized (or as stored: uint8), and
        their labels."""
        dataset = self.split("test" if split == "test" else "val")
        images = dataset.images[:n]
        return (self.normalize(images) if normalized else images), dataset.labels[:n]

    def state_dict(self) -> dict[str, object]:
        """The augmentation generator (Lightning stores it in checkpoints, so resumes crop alike) and the
        data's fingerprint (a resume on other data is refused)."""
        device, rng = self.augment_rng.state()
        return {"augment_rng": rng, "augment_device": device, "fingerprint": self.fingerprint()}

    def load_state_dict(self, state_dict: dict[str, object]) -> None:
        # checkpoints written before the generator moved to the device hold a CPU state
        device, rng = state_dict.get("augment_device", "cpu"), state_dict.get("augment_rng")
        if not isinstance(device, str) or not isinstance(rng, Tensor):
            raise CheckpointError("the checkpoint's data module holds no augmentation generator state")
        self.augment_rng.load(device, rng)
