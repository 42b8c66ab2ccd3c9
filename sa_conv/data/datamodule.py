"""CIFAR-10 as a LightningDataModule: decoded once into uint8 tensors, augmented per batch on the device.

Sources (``sa_conv.data.sources``):
- ``"torchvision"``: ``torchvision.datasets.CIFAR10(root, download=True)``.
- ``"folder"``: an ImageFolder tree ``<dir>/train/<class>/*``, ``<dir>/test/<class>/*``.
- ``"synthetic"``: generated class templates plus noise (learnable), for tests and smoke runs.
- ``"auto"``: ``"folder"`` when ``data_dir`` holds ``train/`` or ``test/``, else ``"torchvision"`` (which
  downloads only into a missing or empty folder, or one that already holds torchvision's copy).

Protocols: ``"clean"`` holds out ``val_size`` training images for validation (model selection) and
tests once; ``"paper"`` trains on every training image and runs the validation loop on the test split
every epoch, as the paper's ``train.py`` did.

Every image is decoded once and held as one ``(N, 3, 32, 32)`` uint8 tensor, so an epoch never
re-decodes a JPEG. The paper's augmentation (random crop 32 with padding 4, horizontal flip) runs per
sample but vectorized over the batch in ``on_after_batch_transfer``, i.e. on the training device;
normalization divides by 255 and standardizes with constants kept on each device (no host-to-device
copy per batch, so a training step makes no host sync).
"""

from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from sa_conv.data.batches import (
    ResumableBatchSampler,
    ResumableDataLoader,
    TensorImages,
    random_crop_flip,
    whole_batch,
)
from sa_conv.data.sources import (
    CIFAR10_CLASSES,
    DataError,
    Split,
    check_download_target,
    load_image_folder,
    load_torchvision,
    synthetic,
)
from sa_conv.utils.config import config_to_dict, option

__all__ = [
    "CIFAR10_CLASSES",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CIFAR10DataModule",
    "DataConfig",
    "DataError",
    "Protocol",
    "data_difference",
    "load_image_folder",
    "random_crop_flip",
]

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)  # the paper's train.py (not the pixel std 0.247, 0.243, 0.261)
Source = Literal["auto", "torchvision", "folder", "synthetic"]
Protocol = Literal["clean", "paper"]


def data_difference(stored: dict[str, Any], now: dict[str, Any]) -> str | None:
    """How two data fingerprints differ, in words (None: the same data)."""
    counts = [
        f"{k} {stored[k]} images (now: {now[k]})" for k in ("train", "val", "test") if stored[k] != now[k]
    ]
    if counts:
        return ", ".join(counts)
    if stored["sha256"] != now["sha256"]:
        was, now_ = stored["sha256"][:12], now["sha256"][:12]
        return f"the same numbers of images, other images or labels (sha256 {was}, now {now_})"
    return None


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """How a run uses its data: batches, the split protocol, augmentation (what decides its result)."""

    batch_size: int = option(100, "training batch size")
    protocol: Protocol = option("clean", "clean: hold out val_size images, test once; paper: test each epoch")
    val_size: int = option(5000, "clean protocol: training images held out for validation")
    train_subset: int | None = option(None, "train on the first N images of the training split")
    augment: bool = option(True, "random crop 32 (padding 4) and horizontal flip")

    def __post_init__(self) -> None:
        checks = [
            ("batch_size", self.batch_size >= 1, "a positive integer"),
            ("protocol", self.protocol in ("clean", "paper"), "clean or paper"),
            ("val_size", self.val_size >= 0, ">= 0"),
            ("train_subset", self.train_subset is None or self.train_subset >= 1, "a positive integer"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")


class CIFAR10DataModule(pl.LightningDataModule):
    """CIFAR-10 train/val/test as in-memory uint8 tensors; augmentation and normalization per batch.

    Args:
        config: batches, protocol, validation split, subset, augmentation.
        data_dir: an ImageFolder tree or a torchvision CIFAR-10 root (``source``).
        source: ``auto``, ``torchvision``, ``folder`` or ``synthetic`` (module docstring).
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
        if source not in ("auto", "torchvision", "folder", "synthetic"):
            raise ValueError(f"unknown data source {source!r}")
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
        self._constants: dict[torch.device, tuple[Tensor, Tensor]] = {}  # mean and std on each device
        # crops and flips: a generator on the batches' device (created at the first batch), resumable
        self._augment_rng: torch.Generator | None = None
        self._augment_state: tuple[str, Tensor] | None = None  # a resumed state, for the device it was on
        self._train_sampler: ResumableBatchSampler | None = None  # the one Lightning iterates
        self._fingerprint: dict[str, Any] | None = None
        self.train_set: TensorImages | None = None
        self.val_set: TensorImages | None = None
        self.test_set: TensorImages | None = None

    def resolved_source(self) -> str:
        """The source that ``setup`` reads: ``auto`` resolved against ``data_dir``."""
        if self.source != "auto":
            return self.source
        if self.data_dir is not None and any((self.data_dir / split).is_dir() for split in ("train", "test")):
            return "folder"
        return "torchvision"

    def _load(self, split: Split) -> tuple[Tensor, Tensor]:
        source = self.resolved_source()
        if source == "synthetic":
            n = self.synthetic_size if split == "train" else max(self.synthetic_size // 4, 16)
            return synthetic(n, seed=self.seed + (split == "test"))
        if self.data_dir is None:
            raise DataError(f"source {source!r} needs a data_dir")
        if source == "folder":
            return load_image_folder(self.data_dir, split)
        check_download_target(self.data_dir)
        return load_torchvision(self.data_dir, split, download=True)

    def prepare_data(self) -> None:
        if self.resolved_source() == "torchvision" and self.data_dir is not None:
            check_download_target(self.data_dir)
            for split in ("train", "test"):
                load_torchvision(self.data_dir, split, download=True)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        images, labels = self._load("train")
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(self.seed))
        # the paper's protocol trains on every image; a small (synthetic) set keeps 4/5 for training
        val_size = 0 if self.config.protocol == "paper" else min(self.config.val_size, len(labels) // 5)
        cut = self.config.protocol == "clean" and val_size < self.config.val_size
        if cut and self.resolved_source() != "synthetic":  # synthetic sets are small by design
            print(
                f"warning: val_size {self.config.val_size} is over a fifth of the {len(labels)} training "
                f"images: {val_size} are held out for validation",
                file=sys.stderr,
            )
        val_idx, train_idx = order[:val_size], order[val_size:]
        if self.config.train_subset is not None:
            train_idx = train_idx[: self.config.train_subset]
        self.train_set = TensorImages(images[train_idx], labels[train_idx])
        self.val_set = TensorImages(images[val_idx], labels[val_idx])
        self.test_set = TensorImages(*self._load("test"))

    def _loader(self, dataset: TensorImages | None, *, train: bool) -> ResumableDataLoader:
        assert dataset is not None, "call setup() first"
        trainer = self.trainer
        sampler = ResumableBatchSampler(
            len(dataset),
            self.config.batch_size if train else self.eval_batch_size,
            shuffle=train,
            seed=self.seed,
            rank=trainer.global_rank if trainer is not None else 0,
            world_size=trainer.world_size if trainer is not None else 1,
        )
        # a generator of its own: creating an iterator would otherwise draw from the global RNG, between the
        # epoch-end checkpoint and the next step, and a resumed run's dropout would be one draw behind
        # pinned host memory on CUDA: the copy to the device is then asynchronous (no host sync per step)
        pinned = trainer is not None and trainer.strategy.root_device.type == "cuda"
        return ResumableDataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=whole_batch,
            generator=torch.Generator(),
            pin_memory=pinned,
        )

    def train_batches(self, world_size: int = 1, limit: int | float | None = None) -> int:
        """Training batches of one epoch on each of ``world_size`` ranks (what the loader yields), cut
        as Lightning cuts them by ``limit_train_batches`` (a count, or a fraction of the epoch)."""
        self.setup()
        per_rank = math.ceil(len(self.train_set) / world_size)
        batches = math.ceil(per_rank / self.config.batch_size)
        if isinstance(limit, int):
            return min(batches, limit)
        return max(1, int(batches * limit)) if isinstance(limit, float) else batches

    def train_dataloader(self) -> DataLoader:
        loader = self._loader(self.train_set, train=True)
        self._train_sampler = loader.batch_sampler  # its position advances as batches are used
        return loader

    def val_dataloader(self) -> DataLoader:
        """The held-out split, or the test split under the paper's protocol."""
        return self._loader(self.test_set if self.config.protocol == "paper" else self.val_set, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, train=False)

    def on_after_batch_transfer(
        self, batch: tuple[Tensor, Tensor], dataloader_idx: int
    ) -> tuple[Tensor, Tensor]:
        images, labels = batch  # uint8 (B, 3, 32, 32) on the training device
        if self.trainer is not None and self.trainer.training:
            if self._train_sampler is not None:
                self._train_sampler.consumed += 1  # this batch is used now (the loader may run ahead)
            if self.config.augment:
                images = random_crop_flip(images, generator=self._generator(images.device))
        return self.normalize(images), labels

    def normalize(self, images: Tensor) -> Tensor:
        """uint8 images ``(B, 3, H, W)`` -> float32, scaled to [0, 1] and standardized (the paper's)."""
        if images.device not in self._constants:
            shape = (1, 3, 1, 1)
            mean = torch.tensor(CIFAR10_MEAN).view(shape).to(images.device)
            std = torch.tensor(CIFAR10_STD).view(shape).to(images.device)
            self._constants[images.device] = (mean, std)
        mean, std = self._constants[images.device]
        return (images.float() / 255 - mean) / std

    def _generator(self, device: torch.device) -> torch.Generator:
        """The augmentation generator on ``device``: seeded from the run's seed, or the resumed state
        where it was saved on the same kind of device (a CPU and a CUDA generator are different
        algorithms: a run resumed on another kind of device draws other crops from there on)."""
        if self._augment_rng is None or self._augment_rng.device != device:
            self._augment_rng = torch.Generator(device=device).manual_seed(self.seed + 1)
            if self._augment_state is not None and self._augment_state[0] == device.type:
                self._augment_rng.set_state(self._augment_state[1])
            self._augment_state = None
        return self._augment_rng

    def fingerprint(self) -> dict[str, Any]:
        """What the run's data is, wherever it lies: images per split and a SHA-256 of the decoded
        images and labels of every split (a moved copy has the same; other data, another split does not)."""
        if self._fingerprint is None:
            self.setup()
            digest = hashlib.sha256()
            counts = {}
            for name, dataset in (("train", self.train_set), ("val", self.val_set), ("test", self.test_set)):
                counts[name] = len(dataset)
                for tensor in (dataset.images, dataset.labels):
                    digest.update(tensor.contiguous().numpy().tobytes())
            self._fingerprint = {**counts, "sha256": digest.hexdigest()}
        return self._fingerprint

    def evaluation_images(
        self, n: int | None = None, *, split: str = "test", normalized: bool = True
    ) -> tuple[Tensor, Tensor]:
        """The first ``n`` images of a split (``test`` or ``val``), normalized (or as stored: uint8), and
        their labels."""
        self.setup()
        dataset = self.test_set if split == "test" else self.val_set
        images = dataset.images[:n]
        return (self.normalize(images) if normalized else images), dataset.labels[:n]

    def state_dict(self) -> dict[str, Any]:
        """The augmentation generator (Lightning stores it in checkpoints, so resumes crop alike) and the
        data's fingerprint (a resume on other data is refused)."""
        if self._augment_rng is None:  # no batch yet: the state a first batch would start from
            rng = self._augment_state or ("cpu", torch.Generator().manual_seed(self.seed + 1).get_state())
        else:
            rng = (self._augment_rng.device.type, self._augment_rng.get_state())
        return {"augment_rng": rng[1], "augment_device": rng[0], "fingerprint": self.fingerprint()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # checkpoints written before the generator moved to the device hold a CPU state
        self._augment_state = (state_dict.get("augment_device", "cpu"), state_dict["augment_rng"])
        self._augment_rng = None
