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
from sa_conv.models import create_model

__all__ = ["CheckpointError", "ImageClassifier", "Schedule", "lr_factor", "read_checkpoint"]


class CheckpointError(RuntimeError):
    """A file is not a readable sa-conv checkpoint."""


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


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by ``ImageClassifier``; ``CheckpointError`` names what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # pickle, zip and EOF errors all mean the same to the user
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(err).__name__})") from None
    hparams = ckpt.get("hyper_parameters") if isinstance(ckpt, dict) else None
    if not hparams or "model" not in hparams or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} is not an sa-conv checkpoint (no model hyper-parameters)")
    version = ckpt.get("sa_conv_version")
    if version != __version__:
        raise CheckpointError(f"{path} was written by sa-conv {version}, this is sa-conv {__version__}")
    return ckpt


class ImageClassifier(pl.LightningModule):
    """Image classification over a backbone from the model registry (rebuilt from the checkpoint)."""

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

    def _step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        if stage == "train" and not torch.isfinite(loss):
            raise FloatingPointError(f"training loss became {loss.item()} at step {self.global_step}")
        metric = getattr(self, f"{stage}_acc")
        metric(logits, labels)
        on_step = stage == "train"
        self.log(
            f"{stage}/loss", loss, on_step=on_step, on_epoch=True, prog_bar=on_step, sync_dist=not on_step
        )
        self.log(f"{stage}/acc", metric, on_step=False, on_epoch=True, prog_bar=stage != "test")
        return loss

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "test")

    def parameter_groups(self) -> list[dict[str, Any]]:
        """Two groups: everything with weight decay, and the backbone's ``no_weight_decay()`` without."""
        exempt = self.backbone.no_weight_decay()
        params = [(n, p) for n, p in self.backbone.named_parameters() if p.requires_grad]
        decay = [p for n, p in params if n not in exempt]
        no_decay = [p for n, p in params if n in exempt]
        groups = [{"params": decay, "weight_decay": self.hparams.weight_decay}]
        if no_decay:
            groups.append({"params": no_decay, "weight_decay": 0.0})
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
            lambda step: lr_factor(step, total, schedule=hp.schedule, warmup=hp.warmup),
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
