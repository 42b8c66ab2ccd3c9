"""Lightning callbacks: training progress (rate, ETA, per-epoch record) and the attention record
(locality snapshots over training, figures in TensorBoard). Thin: each wires Lightning's hooks to a plain
part (``sa_conv.utils.pace.Pace``, ``sa_conv.analysis.maps``), and is given at construction what it
needs of the run (counts, the schedule, the images), never asking the module or the data what they are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeGuard

import pytorch_lightning as pl
import torch
from matplotlib.figure import Figure
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only
from torch import Tensor

from sa_conv.analysis.dynamics import CentreGradients
from sa_conv.analysis.maps import figures_of, locality_snapshot
from sa_conv.analysis.snapshots import LocalitySnapshot, history_json, read_history
from sa_conv.models import Backbone
from sa_conv.training.epochs import EpochRecord, epochs_json, read_epochs
from sa_conv.utils.errors import CheckpointError
from sa_conv.utils.pace import Pace, duration, eta

__all__ = ["AttentionFigures", "TrainingProgress"]


class TrainingProgress(pl.Callback):
    """Training images per second (across resumes), the projected time of the whole run, and one
    record per epoch (train loss and accuracy, evaluation accuracy, learning rate, images/s).

    The timing is ``pace``'s (``sa_conv.utils.pace.Pace``: steady state, the warm-up and evaluations
    left out). The record's images/s is of the whole run; the printed speed and the projection are of
    this process, once it has timed a step. ``total_steps``: the schedule's length (default: Lightning's
    estimate). ``lines=True`` also prints each epoch's record as one plain line (for logs that are not a
    terminal: nohup, SLURM).
    """

    def __init__(
        self,
        *,
        lines: bool,
        pace: Pace | None = None,
        total_steps: Callable[[], int] | None = None,
        slow_warning: float = 86400.0,
        slow_hint: str = "",
        log_every: int = 50,
    ) -> None:
        self.lines, self.slow_warning, self.slow_hint = lines, slow_warning, slow_hint
        self.log_every = log_every  # steps between two per-step scalars in the logger (each a host sync)
        self.pace = pace or Pace()
        self.total_steps = total_steps
        self.warned = False  # the slow-run warning is said once
        self.history: list[EpochRecord] = []

    @property
    def images_per_second(self) -> float:
        """Training images per second of the whole run so far (0 before any step)."""
        return self.pace.images_per_second

    @property
    def seconds(self) -> float:
        """Seconds of the whole run's timed training steps."""
        return self.pace.seconds

    def say(self, trainer: pl.Trainer, message: str) -> None:
        """Print a line above the progress bar (rank zero)."""
        bar = trainer.progress_bar_callback
        (bar.print if bar is not None and trainer.is_global_zero else rank_zero_only(print))(message)

    def slow_line(self, remaining: float) -> str | None:
        """The slow-run warning, once, when ``remaining`` seconds are over ``slow_warning`` (else None)."""
        if remaining <= self.slow_warning or self.warned:
            return None
        self.warned = True
        return f"warning: this run needs about {duration(remaining)} here. {self.slow_hint}"

    def projected(self, seconds: float, flop_rate: float) -> None:
        """Print the run's projection from its counted FLOPs at ``flop_rate`` (before fitting: no progress
        bar yet), and the slow-run warning where it applies."""
        lines = [
            f"projected from the counted FLOPs at this machine's matrix-product rate ({flop_rate / 1e9:.1f} "
            f"GFLOP/s): at least {duration(seconds)} to the end of the run, evaluation included "
            f"(ETA {eta(seconds)}); the measured speed follows after the first steps",
            self.slow_line(seconds),
        ]
        print("\n".join(line for line in lines if line is not None), flush=True)

    def remaining_seconds(self, trainer: pl.Trainer) -> float:
        """Seconds to the end of the run, evaluation included."""
        total = self.total_steps() if self.total_steps is not None else trainer.estimated_stepping_batches
        measured = [h.eval_seconds for h in self.history if h.eval_seconds]
        epochs_left = (trainer.max_epochs or 0) - len(self.history)
        steps_left = int(total) - trainer.global_step
        return self.pace.remaining_seconds(steps_left=steps_left, epochs_left=epochs_left, measured=measured)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.pace.start_training()
        self.say(trainer, "training: the measured speed and projected duration follow after the first steps")

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.pace.start_epoch()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.pace.start_eval()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.pace.end_eval(counted=not trainer.sanity_checking)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        self.pace.start_batch()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: object,
        batch: tuple[Tensor, Tensor],
        batch_idx: int,
    ) -> None:
        self.pace.end_batch(len(batch[1]) * trainer.world_size)  # the labels (B,)
        if self.pace.timed_here == 3:  # two steps timed after the warm-up
            remaining = self.remaining_seconds(trainer)
            self.say(
                trainer,
                f"speed: {self.pace.current_images_per_second:.1f} training images/s; projected time to the "
                f"end of the run, evaluation included: {duration(remaining)} (ETA {eta(remaining)})",
            )
            slow = self.slow_line(remaining)
            if slow is not None:
                self.say(trainer, slow)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.images_per_second:
            pl_module.log("train/images_per_s", self.images_per_second, rank_zero_only=True)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        row = self.record(trainer, metrics)
        self.history.append(row)
        if self.lines and trainer.is_global_zero:
            print(self.line(trainer, row), flush=True)

    def record(self, trainer: pl.Trainer, metrics: dict[str, float]) -> EpochRecord:
        """The epoch's record: its step, time, speed, training and evaluation metrics, learning rate."""
        evaluated = _eval_name(metrics)
        return EpochRecord(
            epoch=trainer.current_epoch + 1,
            step=trainer.global_step,
            epoch_seconds=self.pace.epoch_seconds(),
            eval_seconds=self.pace.eval_seconds,
            images_per_s=self.images_per_second,
            train_loss=metrics.get("train/loss"),
            train_acc=metrics.get("train/acc"),
            val_acc=metrics.get("val/acc") if evaluated == "val/acc" else None,
            test_acc=metrics.get("test/acc") if evaluated == "test/acc" else None,
            lr=trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None,
        )

    def line(self, trainer: pl.Trainer, row: EpochRecord) -> str:
        """The epoch's record as one plain line, with the speed and the time left."""
        parts = [f"epoch {row.epoch}/{trainer.max_epochs}", f"step {row.step}"]
        if row.train_loss is not None:
            train_acc = row.train_acc if row.train_acc is not None else float("nan")
            parts.append(f"train loss {row.train_loss:.4f} acc {train_acc:.4f}")
        for split, acc in (("val", row.val_acc), ("test", row.test_acc)):
            if acc is not None:
                parts.append(f"{split} acc {acc:.4f}")
                break
        remaining = self.remaining_seconds(trainer)
        parts += [f"{self.pace.current_images_per_second:.1f} images/s", f"ETA {duration(remaining)}"]
        return " | ".join(parts)

    def state_dict(self) -> dict[str, object]:
        pace = self.pace
        history = epochs_json(self.history)
        return {"images": pace.images, "steps": pace.steps, "seconds": pace.seconds, "history": history}

    def load_state_dict(self, state_dict: dict[str, object]) -> None:
        images, steps, seconds = (state_dict.get(k) for k in ("images", "steps", "seconds"))
        if not (_count(images) and _count(steps) and isinstance(seconds, int | float)):
            raise CheckpointError("the checkpoint's TrainingProgress holds no image, step and second totals")
        self.pace.resume(images, steps, float(seconds))
        self.history = read_epochs(state_dict["history"], "the checkpoint's TrainingProgress")


def _eval_name(metrics: dict[str, float]) -> str | None:
    """The evaluation's accuracy among an epoch's metrics: ``val/acc``, or ``test/acc`` (paper protocol)."""
    return next((k for k in ("val/acc", "test/acc") if k in metrics), None)


class AttentionFigures(pl.Callback):
    """The attention record of a run, in TensorBoard.

    Snapshots (``locality_snapshot``) at the start of training, every ``history_every_n_steps``
    steps, at every epoch end and at the end, kept in the checkpoints (``history``); figures
    (``figures_of``) every ``every_n_epochs`` validation epochs and at the end: ``attention/layer{i}``
    (one layer's heads), ``attention/grid`` (layers x heads), ``attention/centres`` (the paper's centre
    plot, Gaussian heads), ``attention/locality`` and ``attention/locality_over_training``, plus scalars
    ``locality/layer{i}/...``. Each snapshot after the first also records, for heads with centres, the
    mean norm of the loss gradient on each centre over the steps since the previous one
    (``centre_grad_norm``, ``sa_conv.analysis.dynamics``). Content attention is averaged over ``images``
    evaluation images. Rank zero only; nothing without a TensorBoard logger.

    Args:
        backbone: the trained model (the module's, trained in place).
        image_source: the first ``n`` evaluation images, normalized (the run's: validation images, test
            images under the paper's protocol); None: one blank image.
        lr_schedule: the learning rate at each step once the schedule is known (the module's
            ``lr_schedule``), drawn beside the locality; None: not drawn.
    """

    def __init__(
        self,
        *,
        backbone: Backbone,
        image_source: Callable[[int], Tensor] | None = None,
        lr_schedule: Callable[[], Callable[[int], float] | None] | None = None,
        every_n_epochs: int = 5,
        history_every_n_steps: int | None = None,
        query: tuple[int, int] | None = None,
        images: int = 16,
    ) -> None:
        if every_n_epochs <= 0 or (history_every_n_steps is not None and history_every_n_steps <= 0):
            raise ValueError("every_n_epochs and history_every_n_steps must be positive")
        self.backbone, self.image_source, self.lr_schedule = backbone, image_source, lr_schedule
        self.every_n_epochs, self.history_every_n_steps = every_n_epochs, history_every_n_steps
        self.query, self.images = query, images
        self.history: list[LocalitySnapshot] = []
        self.gradients = CentreGradients()  # the centres' gradient norms between two snapshots

    def _writer(self, trainer: pl.Trainer) -> Any | None:
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                return logger.experiment
        return None

    def _images(self, pl_module: pl.LightningModule) -> Tensor:
        """Evaluation images on the module's device; one for positional attention (any image does)."""
        if self.image_source is None:
            return torch.zeros(1, 3, 32, 32, device=pl_module.device)
        n = self.images if self.backbone.input_dependent else 1
        return self.image_source(n).to(pl_module.device)

    @rank_zero_only
    def _record(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        step = trainer.global_step
        if self.history and self.history[-1].step == step:
            return
        with torch.no_grad():
            snapshot = locality_snapshot(self.backbone, self._images(pl_module), step)
        norms = self.gradients.take()  # per layer, None without centres or before any step
        padded = [*norms, *[None] * len(snapshot.layers)]
        layers = tuple(
            layer if norm is None else replace(layer, centre_grad_norm=tuple(norm))
            for layer, norm in zip(snapshot.layers, padded, strict=False)
        )
        self.history.append(replace(snapshot, layers=layers))

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.gradients.add(self.backbone.encodings())

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.history:  # a resumed run continues its record as an unbroken run would
            self._record(trainer, pl_module)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        every = self.history_every_n_steps
        if every is not None and trainer.global_step % every == 0:
            self._record(trainer, pl_module)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record(trainer, pl_module)
        if (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            self.log_figures(trainer, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record(trainer, pl_module)
        self.log_figures(trainer, pl_module)

    @rank_zero_only
    def log_figures(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Render and log every figure now (rank zero)."""
        writer = self._writer(trainer)
        if writer is None:
            return
        step = trainer.global_step
        images = self._images(pl_module)
        lr = self.lr_schedule() if self.lr_schedule is not None else None
        figures = figures_of(self.backbone, images, query=self.query, history=self.history, lr=lr)
        for tag, value in figures:
            if isinstance(value, Figure):
                writer.add_figure(tag, value, global_step=step, close=True)
            else:
                writer.add_scalar(tag, value, global_step=step)
        writer.flush()

    def state_dict(self) -> dict[str, object]:
        return {"history": history_json(self.history), "gradients": self.gradients.state_dict()}

    def load_state_dict(self, state_dict: dict[str, object]) -> None:
        self.history = read_history(state_dict["history"], "the checkpoint")
        gradients = state_dict.get("gradients")  # none in checkpoints written before they were recorded
        if isinstance(gradients, dict):
            self.gradients.load_state_dict(gradients)


def _count(value: object) -> TypeGuard[int]:
    """Whether a checkpoint's total is a count (an integer from 0, not a boolean)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
