"""The LightningModule: any ``create_model`` backbone, cross-entropy, accuracy per stage, SGD + schedule."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from sa_conv import __version__, models
from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.models import ResNetConfig, SAConfig
from sa_conv.utils.config import config_from_dict, config_to_dict
from sa_conv.utils.safe_load import CheckpointError, read_checkpoint
from sa_conv.utils.schedule import OptimConfig, lr_factor

__all__ = ["ImageClassifier"]


def _load_error(err: BaseException) -> str:
    """The gist of a ``load_state_dict`` error in one line: its first specific complaint, and how many."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):  # "Error(s) in loading state_dict for ...:" then details
        detail = lines[1].rstrip(".")
        more = f" (and {len(lines) - 2} more)" if len(lines) > 2 else ""
        return (detail[:240] + "...") if len(detail) > 240 else detail + more
    return lines[0] if lines else type(err).__name__


FINITE_CHECK_EVERY = 50  # training steps between two checks of the loss (each one a host sync)

# what checkpoints written before OptimConfig held: its fields flat among the hyper-parameters
_LEGACY_OPTIM = ("lr", "momentum", "weight_decay", "schedule", "warmup", "milestones", "gamma")


class ImageClassifier(pl.LightningModule):
    """Image classification over a backbone of the model registry; cross-entropy, accuracy per stage,
    SGD with the schedule of ``optim``.

    Args:
        model: a name of ``sa_conv.models.MODELS``.
        model_config: the model's config object (or its plain data, as a checkpoint holds it).
        optim: the optimizer and schedule (or its plain data).
        val_name: the validation loop's metric prefix: ``val`` for a held-out split, ``test`` when it runs
            on the test split every epoch (the paper's protocol).

    The hyper-parameters (what a checkpoint needs to rebuild the module) are plain data.
    """

    def __init__(
        self,
        *,
        model: str,
        model_config: SAConfig | ResNetConfig | Mapping[str, Any] | None = None,
        optim: OptimConfig | Mapping[str, Any] | None = None,
        val_name: str = "val",
    ) -> None:
        super().__init__()
        if not isinstance(model_config, SAConfig | ResNetConfig):
            model_config = models.model_config(model, **dict(model_config or {}))
        if not isinstance(optim, OptimConfig):
            optim = config_from_dict(OptimConfig, dict(optim or {}), what="the optimizer config")
        self.model_config, self.optim = model_config, optim
        self.save_hyperparameters(
            {
                "model": model,
                "model_config": config_to_dict(model_config),
                "optim": config_to_dict(optim),
                "val_name": val_name,
            }
        )
        self.backbone = models.MODELS[model].build(model_config)
        classes = model_config.num_classes
        # the training metric skips its input checks: they read values back to the host every step
        self.train_acc = MulticlassAccuracy(classes, average="micro", validate_args=False)
        self.val_acc = MulticlassAccuracy(classes, average="micro")
        self.test_acc = MulticlassAccuracy(classes, average="micro")
        self.total_steps_planned: int | None = None  # the schedule's length, once the optimizer is set up
        # (step, loss) of the first non-finite training loss of this rank; step -1: none yet (not a buffer:
        # DDP would copy rank 0's over the others' at every forward)
        self._nonfinite: Tensor | None = None

    def forward(self, images: Tensor) -> Tensor:
        return self.backbone(images)

    @classmethod
    def from_checkpoint(cls, checkpoint: str | Path | dict[str, Any]) -> ImageClassifier:
        """Rebuild the module from a checkpoint path, or from its already-read ``read_checkpoint`` dict."""
        ckpt = checkpoint if isinstance(checkpoint, dict) else read_checkpoint(checkpoint)
        hparams = dict(ckpt["hyper_parameters"])
        if "optim" not in hparams:  # written before OptimConfig: the optimizer's fields were flat
            hparams["optim"] = {k: hparams.pop(k) for k in _LEGACY_OPTIM if k in hparams}
            hparams.pop("num_classes", None)  # the model config's own
        try:
            module = cls(**hparams)
            module.load_state_dict(ckpt["state_dict"])
        except (ValueError, TypeError, RuntimeError) as err:
            raise CheckpointError(
                f"the checkpoint does not match its model {hparams['model']!r}: {_load_error(err)}"
            ) from None
        bad = [
            name for name, t in ckpt["state_dict"].items() if t.is_floating_point() and not t.isfinite().all()
        ]
        if bad:
            raise CheckpointError(
                f"the checkpoint's weights hold NaN or infinity ({len(bad)} tensors, first {bad[0]}): "
                "a diverged run; use an earlier checkpoint"
            )
        return module

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.check_finite()  # a state after a NaN loss is never saved: the last good checkpoint stays
        checkpoint["sa_conv_version"] = __version__
        if self.total_steps_planned is not None:  # the schedule's length: figures draw the learning rate
            checkpoint["schedule"] = {"total_steps": self.total_steps_planned}

    def _step(self, batch: tuple[Tensor, Tensor], stage: str, name: str) -> Tensor:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        metric = {"train": self.train_acc, "val": self.val_acc, "test": self.test_acc}[stage]
        metric(logits, labels)
        train = stage == "train"
        # train/loss: the epoch mean, with the per-step curve beside it as train/loss_step
        self.log(f"{name}/loss", loss, on_step=False, on_epoch=True, sync_dist=not train)
        if train:
            self.log("train/loss_step", loss, on_step=True, on_epoch=False)
        self.log(f"{name}/acc", metric, on_step=False, on_epoch=True, prog_bar=stage != "test")
        return loss

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss = self._step(batch, "train", "train")
        # the first non-finite loss and its step, kept on the device: no host sync in the step
        if self._nonfinite is None or self._nonfinite.device != loss.device:
            self._nonfinite = torch.tensor([-1.0, 0.0], device=loss.device)
        first = (self._nonfinite[0] < 0) & ~torch.isfinite(loss.detach())
        record = torch.stack([torch.full_like(self._nonfinite[0], self.global_step), loss.detach().float()])
        self._nonfinite.copy_(torch.where(first, record, self._nonfinite))
        if (self.global_step + 1) % FINITE_CHECK_EVERY == 0:
            self.check_finite()
        return loss

    def check_finite(self) -> None:
        """``FloatingPointError`` naming the step where the training loss first became NaN or inf
        (a host sync: every ``FINITE_CHECK_EVERY`` steps, at epoch ends and before any checkpoint)."""
        if self._nonfinite is None:
            return
        step, value = self._nonfinite.tolist()
        if step >= 0:
            raise FloatingPointError(f"training loss became {value} at step {int(step)}")

    def on_train_epoch_end(self) -> None:
        self.check_finite()

    def on_train_end(self) -> None:
        self.check_finite()

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
        groups = [{"params": decay, "weight_decay": self.optim.weight_decay, "name": "decay"}]
        if no_decay:
            groups.append({"params": no_decay, "weight_decay": 0.0, "name": "no_decay"})
        return groups

    def total_steps(self) -> int:
        """Optimizer steps of the whole fit (the schedule's length).

        The same number as ``trainer.estimated_stepping_batches``, which we do not call: it builds the
        fit loop's training loader before a resumed checkpoint's loader position is restored, and that
        loader then restarts its epoch from the first batch. Our data module counts its batches without
        building a loader.
        """
        trainer = self.trainer
        datamodule = trainer.datamodule
        if not isinstance(datamodule, CIFAR10DataModule):
            return int(trainer.estimated_stepping_batches)
        batches = datamodule.train_batches(trainer.world_size, trainer.limit_train_batches)
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
        optim = self.optim
        optimizer = torch.optim.SGD(self.parameter_groups(), lr=optim.lr, momentum=optim.momentum)
        total = self.total_steps_planned = self.total_steps()
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, total, optim))
        # TensorBoard: lr (one group), or lr/decay and lr/no_decay
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "name": "lr"},
        }
