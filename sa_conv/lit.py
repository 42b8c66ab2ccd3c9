"""The LightningModule: any ``create_model`` backbone, cross-entropy, accuracy per stage, SGD + schedule."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from sa_conv import __version__
from sa_conv.checkpointing import CheckpointError, read_checkpoint
from sa_conv.models import create_model

__all__ = ["ImageClassifier", "Schedule", "lr_factor"]


Schedule = Literal["warmup-cosine", "multistep"]


def lr_factor(
    step: int,
    total: int,
    *,
    schedule: Schedule,
    warmup: float = 0.05,
    milestones: tuple[float, ...] = (80 / 300, 150 / 300, 250 / 300),
    gamma: float = 0.1,
) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` of ``total``.

    ``warmup-cosine``: linear warm-up over the first ``warmup`` fraction, then cosine to zero (the
    paper's run.sh). ``multistep``: times ``gamma`` at each milestone, given as fractions of training
    (epochs 80, 150, 250 of 300 for the paper's ResNet18).
    """
    total = max(total, 1)
    if schedule == "multistep":
        return gamma ** sum(step >= round(m * total) for m in milestones)
    warm = max(round(warmup * total), 1)
    if step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(total - warm, 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


class ImageClassifier(pl.LightningModule):
    """Image classification over a backbone from the model registry (rebuilt from the checkpoint).

    ``val_name`` names the validation loop's metrics: ``val`` for a held-out split, ``test`` when the
    validation loop runs on the test split every epoch (the paper's protocol).
    """

    def __init__(
        self,
        *,
        model: str,
        model_config: Mapping[str, Any] | None = None,
        num_classes: int = 10,
        lr: float = 0.1,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        schedule: Schedule = "warmup-cosine",
        warmup: float = 0.05,
        milestones: tuple[float, ...] = (80 / 300, 150 / 300, 250 / 300),
        gamma: float = 0.1,
        val_name: str = "val",
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = create_model(model, **dict(model_config or {}))
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")

    def forward(self, images: Tensor) -> Tensor:
        return self.backbone(images)

    @classmethod
    def from_checkpoint(cls, checkpoint: str | Path | dict[str, Any]) -> ImageClassifier:
        """Rebuild the module from a checkpoint path, or from its already-read ``read_checkpoint`` dict."""
        ckpt = checkpoint if isinstance(checkpoint, dict) else read_checkpoint(checkpoint)
        hparams = ckpt["hyper_parameters"]
        try:
            module = cls(**hparams)
            module.load_state_dict(ckpt["state_dict"])
        except (ValueError, TypeError, RuntimeError) as err:
            first = str(err).strip().splitlines()[0]
            raise CheckpointError(
                f"the checkpoint does not match its model {hparams['model']!r}: {first}"
            ) from None
        return module

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["sa_conv_version"] = __version__

    def _step(self, batch: tuple[Tensor, Tensor], stage: str, name: str) -> Tensor:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        if stage == "train" and not torch.isfinite(loss):
            raise FloatingPointError(f"training loss became {loss.item()} at step {self.global_step}")
        metric = getattr(self, f"{stage}_acc")
        metric(logits, labels)
        train = stage == "train"
        # train/loss: the epoch mean, with the per-step curve beside it as train/loss_step
        self.log(f"{name}/loss", loss, on_step=False, on_epoch=True, sync_dist=not train)
        if train:
            self.log("train/loss_step", loss, on_step=True, on_epoch=False, prog_bar=True)
        self.log(f"{name}/acc", metric, on_step=False, on_epoch=True, prog_bar=stage != "test")
        return loss

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "train", "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "val", self.hparams.val_name)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "test", "test")

    def parameter_groups(self) -> list[dict[str, Any]]:
        """Two groups: everything with weight decay, and the backbone's ``no_weight_decay()`` without."""
        exempt = self.backbone.no_weight_decay()
        params = [(n, p) for n, p in self.backbone.named_parameters() if p.requires_grad]
        decay = [p for n, p in params if n not in exempt]
        no_decay = [p for n, p in params if n in exempt]
        groups = [{"params": decay, "weight_decay": self.hparams.weight_decay, "name": "decay"}]
        if no_decay:
            groups.append({"params": no_decay, "weight_decay": 0.0, "name": "no_decay"})
        return groups

    def total_steps(self) -> int:
        """Optimizer steps of the whole fit (the schedule's length).

        The same number as ``trainer.estimated_stepping_batches``, which we do not call: it builds the
        fit loop's training loader before a resumed checkpoint's loader position is restored, and that
        loader then restarts its epoch from the first batch. With a data module we count from a
        separate loader instead.
        """
        trainer = self.trainer
        datamodule = trainer.datamodule
        if datamodule is None:
            return int(trainer.estimated_stepping_batches)
        batches = len(datamodule.train_dataloader())
        limit = trainer.limit_train_batches
        batches = min(batches, limit) if isinstance(limit, int) else int(batches * limit)
        epochs = (
            trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs >= 0 else math.inf
        )
        total = math.ceil(batches / trainer.accumulate_grad_batches) * epochs
        if trainer.max_steps > 0:
            total = min(total, trainer.max_steps)
        if total == math.inf:
            raise ValueError("the learning-rate schedule needs max_epochs or max_steps")
        return max(int(total), 1)

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        optimizer = torch.optim.SGD(self.parameter_groups(), lr=hp.lr, momentum=hp.momentum)
        total = self.total_steps()
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: lr_factor(
                step,
                total,
                schedule=hp.schedule,
                warmup=hp.warmup,
                milestones=tuple(hp.milestones),
                gamma=hp.gamma,
            ),
        )
        # TensorBoard: lr (one group), or lr/decay and lr/no_decay
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "name": "lr"},
        }
