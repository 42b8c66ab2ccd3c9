"""The LightningModule: any ``create_model`` backbone, cross-entropy, accuracy per stage, SGD + schedule."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.utilities.types import OptimizerLRSchedulerConfig
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from sa_conv.models import MODELS, Backbone, ModelConfig
from sa_conv.models import model_config as config_of
from sa_conv.utils.config import config_from_dict, config_to_dict
from sa_conv.utils.schedule import OptimConfig, lr_factor, schedule_length
from sa_conv.utils.version import __version__

__all__ = ["FirstNonFinite", "ImageClassifier", "weight_decay_groups"]


FINITE_CHECK_EVERY = 50  # training steps between two checks of the loss (each one a host sync)


class FirstNonFinite:
    """The step and value of the first non-finite training loss of this rank, kept on the device: the
    training step adds no host sync; ``check`` (a sync) raises once there is one.

    Not a buffer of the module: DDP would copy rank 0's over the others' at every forward.
    """

    def __init__(self) -> None:
        self._record: Tensor | None = None  # (step, loss); step -1: none yet

    def update(self, step: int, loss: Tensor) -> None:
        """Record ``loss`` of ``step`` if it is the first non-finite one."""
        if self._record is None or self._record.device != loss.device:
            self._record = torch.tensor([-1.0, 0.0], device=loss.device)
        first = (self._record[0] < 0) & ~torch.isfinite(loss.detach())
        now = torch.stack([torch.full_like(self._record[0], step), loss.detach().float()])
        self._record.copy_(torch.where(first, now, self._record))

    def check(self) -> None:
        """``FloatingPointError`` naming the step where the training loss first became NaN or inf."""
        if self._record is None:
            return
        step, value = self._record.tolist()
        if step >= 0:
            raise FloatingPointError(f"training loss became {value} at step {int(step)}")


def weight_decay_groups(backbone: Backbone, weight_decay: float) -> list[dict[str, Any]]:
    """Two parameter groups: everything with ``weight_decay``, and the backbone's ``no_weight_decay()``
    without (none where it exempts nothing); in torch's type of parameter groups."""
    exempt = backbone.no_weight_decay()
    params = [(n, p) for n, p in backbone.named_parameters() if p.requires_grad]
    decay = [p for n, p in params if n not in exempt]
    no_decay = [p for n, p in params if n in exempt]
    groups: list[dict[str, Any]] = [{"params": decay, "weight_decay": weight_decay, "name": "decay"}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0, "name": "no_decay"})
    return groups


class ImageClassifier(pl.LightningModule):
    """Image classification over a backbone of the model registry; cross-entropy, accuracy per stage,
    SGD with the schedule of ``optim``.

    Args:
        model: a name of ``sa_conv.models.MODELS``.
        model_config: the model's config object (or its plain data, as a checkpoint holds it).
        optim: the optimizer and schedule (or its plain data).
        val_name: the validation loop's metric prefix: ``val`` for a held-out split, ``test`` when it runs
            on the test split every epoch (the paper's protocol).
        epoch_batches: training batches of one epoch per rank, given the world size and Lightning's
            ``limit_train_batches`` (the data module's ``train_batches``): the schedule's length without
            building a loader (``total_steps``); None: Lightning's estimate.

    The hyper-parameters (what a checkpoint needs to rebuild the module) are plain data.
    """

    def __init__(
        self,
        *,
        model: str,
        model_config: ModelConfig | Mapping[str, object] | None = None,
        optim: OptimConfig | Mapping[str, object] | None = None,
        val_name: str = "val",
        epoch_batches: Callable[[int, int | float | None], int] | None = None,
    ) -> None:
        super().__init__()
        family: ModelConfig = (
            model_config
            if isinstance(model_config, ModelConfig)
            else config_of(model, **dict(model_config or {}))
        )
        settings: OptimConfig = (
            optim
            if isinstance(optim, OptimConfig)
            else config_from_dict(OptimConfig, dict(optim or {}), what="the optimizer config")
        )
        self.model_config, self.optim, self.val_name = family, settings, val_name
        self.epoch_batches = epoch_batches  # not a hyper-parameter: the data's, given by the run
        self.save_hyperparameters(
            {
                "model": model,
                "model_config": config_to_dict(family),
                "optim": config_to_dict(settings),
                "val_name": val_name,
            }
        )
        self.backbone: Backbone = MODELS[model].build(family)
        classes = family.num_classes
        # the training metric skips its input checks: they read values back to the host every step
        self.train_acc = MulticlassAccuracy(classes, average="micro", validate_args=False)
        self.val_acc = MulticlassAccuracy(classes, average="micro")
        self.test_acc = MulticlassAccuracy(classes, average="micro")
        self.total_steps_planned: int | None = None  # the schedule's length, once the optimizer is set up
        self.nonfinite = FirstNonFinite()

    def forward(self, images: Tensor) -> Tensor:
        return self.backbone(images)

    def on_save_checkpoint(self, checkpoint: dict[str, object]) -> None:
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
        self.nonfinite.update(self.global_step, loss)
        if (self.global_step + 1) % FINITE_CHECK_EVERY == 0:
            self.check_finite()
        return loss

    def on_train_batch_start(self, batch: object, batch_idx: int) -> None:
        """The encodings' spreads keep their initial value in the first ``optim.freeze_spreads`` epochs
        (no gradient: SGD leaves them, momentum and all), then train as usual; set at every step, so a
        resume in either phase continues it."""
        frozen = self.current_epoch < self.optim.freeze_spreads
        for encoding in self.backbone.encodings():
            if encoding is not None and encoding.spread_parameter is not None:
                getattr(encoding, encoding.spread_parameter).requires_grad_(not frozen)

    def check_finite(self) -> None:
        """``FloatingPointError`` naming the step where the training loss first became NaN or inf
        (a host sync: every ``FINITE_CHECK_EVERY`` steps, at epoch ends and before any checkpoint)."""
        self.nonfinite.check()

    def on_train_epoch_end(self) -> None:
        self.check_finite()

    def on_train_end(self) -> None:
        self.check_finite()

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "val", self.val_name)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "test", "test")

    def parameter_groups(self) -> list[dict[str, Any]]:
        """Two groups: everything with weight decay, and the backbone's ``no_weight_decay()`` without."""
        return weight_decay_groups(self.backbone, self.optim.weight_decay)

    def total_steps(self) -> int:
        """Optimizer steps of the whole fit (the schedule's length).

        The same number as ``trainer.estimated_stepping_batches``, which we call only without
        ``epoch_batches``: it builds the fit loop's training loader before a resumed checkpoint's loader
        position is restored, and that loader then restarts its epoch from the first batch. The data
        module counts its batches without building a loader.
        """
        trainer = self.trainer
        if self.epoch_batches is None:
            return int(trainer.estimated_stepping_batches)
        return schedule_length(
            self.epoch_batches(trainer.world_size, trainer.limit_train_batches),
            max_epochs=trainer.max_epochs,
            max_steps=trainer.max_steps,
            accumulate=trainer.accumulate_grad_batches,
        )

    def lr_schedule(self) -> Callable[[int], float] | None:
        """The learning rate at each step, once the schedule's length is known (None before)."""
        optim, total = self.optim, self.total_steps_planned
        if total is None:
            return None
        return lambda step: optim.lr * lr_factor(step, total, optim)

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        optim = self.optim
        optimizer = torch.optim.SGD(self.parameter_groups(), lr=optim.lr, momentum=optim.momentum)
        total = self.total_steps_planned = self.total_steps()
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, total, optim))
        # TensorBoard: lr (one group), or lr/decay and lr/no_decay
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "name": "lr"},
        }
