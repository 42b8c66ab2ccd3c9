"""Lightning callbacks: training progress (rate, ETA, per-epoch record) and the attention record
(locality snapshots over training, figures in TensorBoard)."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytorch_lightning as pl
import torch
from matplotlib.figure import Figure
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only
from torch import Tensor

from sa_conv.analysis.maps import figures_of, locality_snapshot
from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.training.module import ImageClassifier
from sa_conv.utils.schedule import lr_factor

__all__ = ["AttentionFigures", "TrainingProgress"]


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    return str(datetime.timedelta(seconds=round(seconds)))


class TrainingProgress(pl.Callback):
    """Training images per second (across resumes), the projected time of the whole run, and one
    record per epoch (train loss and accuracy, evaluation accuracy, learning rate, images/s).

    The record's images/s is of the whole run; the printed speed and the projection are of this
    process, once it has timed a step (a resumed run may sit on another machine, or beside other work).

    Steady-state time without a host sync: the wall time between consecutive training batches of an
    epoch (a device's queued work is paid for within a few steps), the first step of a process and the
    evaluation loops left out. ``lines=True`` also prints each epoch's record as one plain line (for
    logs that are not a terminal: nohup, SLURM).
    """

    def __init__(
        self, *, lines: bool, slow_warning: float = 86400.0, slow_hint: str = "", log_every: int = 50
    ) -> None:
        self.lines, self.slow_warning, self.slow_hint = lines, slow_warning, slow_hint
        self.log_every = log_every  # steps between two per-step scalars in the logger (each a host sync)
        self.images, self.steps, self.seconds = 0, 0, 0.0  # the whole run, across resumes
        self._resumed_at = (0, 0, 0.0)  # the totals this process started from: what it timed is the rest
        self.history: list[dict[str, float]] = []
        self._timed_here = 0  # steps timed by this process (the projection waits for a warm one)
        self._last: float | None = None  # the end of the previous batch of this stretch of training
        self._epoch_start = self._eval_start = self._eval_seconds = 0.0

    @property
    def images_per_second(self) -> float:
        """Training images per second of the whole run so far (0 before any step)."""
        return self.images / self.seconds if self.seconds else 0.0

    @property
    def current_images_per_second(self) -> float:
        """Training images per second of this process (the whole run's before it timed a step)."""
        images, _, seconds = self._timed_by_this_process()
        return images / seconds if seconds else self.images_per_second

    def _timed_by_this_process(self) -> tuple[int, int, float]:
        """Images, steps and seconds timed since this process started (or resumed) the run."""
        images, steps, seconds = self._resumed_at
        return self.images - images, self.steps - steps, self.seconds - seconds

    def _say(self, trainer: pl.Trainer, message: str) -> None:
        bar = trainer.progress_bar_callback
        (bar.print if bar is not None and trainer.is_global_zero else rank_zero_only(print))(message)

    def _eval_estimate(self, trainer: pl.Trainer) -> tuple[float, float]:
        """Seconds of one epoch's evaluation and of the final test: measured once there was one, else
        from the training rate (an evaluation image costs about a third of a training image)."""
        measured = [h["eval_seconds"] for h in self.history if h.get("eval_seconds")]
        datamodule = trainer.datamodule
        rate = self.current_images_per_second
        per_image = 1 / (3 * rate) if rate else 0.0
        n_test = len(datamodule.test_set) if isinstance(datamodule, CIFAR10DataModule) else 0
        n_eval = n_test
        if isinstance(datamodule, CIFAR10DataModule) and datamodule.config.protocol == "clean":
            n_eval = len(datamodule.val_set)
        test = n_test * per_image if n_eval != n_test or not measured else 0.0
        return (sum(measured) / len(measured) if measured else n_eval * per_image), test

    def _remaining_seconds(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> float:
        total = (
            pl_module.total_steps()
            if isinstance(pl_module, ImageClassifier)
            else trainer.estimated_stepping_batches
        )
        _, steps, seconds = self._timed_by_this_process()
        if not steps:  # nothing timed here yet: the whole run's pace
            steps, seconds = self.steps, self.seconds
        per_step = seconds / max(steps, 1)
        evals, test = self._eval_estimate(trainer)
        epochs_left = max((trainer.max_epochs or 0) - len(self.history), 0)
        return max(total - trainer.global_step, 0) * per_step + epochs_left * evals + test

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_start = time.perf_counter()  # a run resumed mid-epoch starts its epoch here
        self._say(trainer, "training: the speed and the projected duration follow after the first steps")

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_start = time.perf_counter()
        self._eval_seconds, self._last = 0.0, None

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval_start = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._eval_seconds += time.perf_counter() - self._eval_start
        self._last = None  # the next training batch starts a new stretch

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._last is None:
            self._last = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        elapsed, self._last = now - (self._last or now), now
        self._timed_here += 1
        if self._timed_here == 1:
            return  # the first step of a process pays for warm-up; it would skew the projection
        images = len(batch[1]) * trainer.world_size
        self.seconds += elapsed
        self.steps += 1
        self.images += images
        if self._timed_here == 3:
            remaining = self._remaining_seconds(trainer, pl_module)
            self._say(
                trainer,
                f"speed: {self.current_images_per_second:.1f} training images/s; projected time to the end "
                f"of the run, evaluation included: {_duration(remaining)} (ETA {_eta(remaining)})",
            )
            if remaining > self.slow_warning:
                self._say(
                    trainer, f"warning: this run needs about {_duration(remaining)} here. {self.slow_hint}"
                )

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.images_per_second:
            pl_module.log("train/images_per_s", self.images_per_second, rank_zero_only=True)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        eval_name = next((k for k in ("val/acc", "test/acc") if k in metrics), None)
        row: dict[str, float] = {
            "epoch": trainer.current_epoch + 1,
            "step": trainer.global_step,
            "epoch_seconds": time.perf_counter() - self._epoch_start,
            "eval_seconds": self._eval_seconds,
            "images_per_s": self.images_per_second,
        }
        for key in ("train/loss", "train/acc"):
            if key in metrics:
                row[key.replace("/", "_")] = metrics[key]
        if eval_name is not None:
            row[eval_name.replace("/", "_")] = metrics[eval_name]
        optimizers = trainer.optimizers
        if optimizers:
            row["lr"] = optimizers[0].param_groups[0]["lr"]
        self.history.append(row)
        if self.lines and trainer.is_global_zero:
            parts = [f"epoch {row['epoch']}/{trainer.max_epochs}", f"step {row['step']}"]
            if "train_loss" in row:
                parts.append(
                    f"train loss {row['train_loss']:.4f} acc {row.get('train_acc', float('nan')):.4f}"
                )
            if eval_name is not None:
                parts.append(f"{eval_name.split('/')[0]} acc {metrics[eval_name]:.4f}")
            remaining = self._remaining_seconds(trainer, pl_module)
            parts += [f"{self.current_images_per_second:.1f} images/s", f"ETA {_duration(remaining)}"]
            print(" | ".join(parts), flush=True)

    def state_dict(self) -> dict[str, Any]:
        return {"images": self.images, "steps": self.steps, "seconds": self.seconds, "history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.images, self.steps, self.seconds = (
            state_dict["images"],
            state_dict["steps"],
            state_dict["seconds"],
        )
        self.history = list(state_dict["history"])
        self._resumed_at = (self.images, self.steps, self.seconds)


def _eta(seconds: float) -> str:
    return (datetime.datetime.now() + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M")


class AttentionFigures(pl.Callback):
    """The attention record of a run, in TensorBoard.

    Snapshots (``locality_snapshot``) at the start of training, every ``history_every_n_steps``
    steps, at every epoch end and at the end, kept in the checkpoints (``history``); figures
    (``figures_of``) every ``every_n_epochs`` validation epochs and at the end: ``attention/layer{i}``
    (one layer's heads), ``attention/grid`` (layers x heads), ``attention/centres`` (the paper's centre
    plot, Gaussian heads), ``attention/locality`` and ``attention/locality_over_training``, plus scalars
    ``locality/layer{i}/...``. Content attention is averaged over ``images`` validation images. Rank
    zero only; nothing without a TensorBoard logger.
    """

    def __init__(
        self,
        *,
        every_n_epochs: int = 5,
        history_every_n_steps: int | None = None,
        query: tuple[int, int] | None = None,
        images: int = 16,
    ) -> None:
        if every_n_epochs <= 0 or (history_every_n_steps is not None and history_every_n_steps <= 0):
            raise ValueError("every_n_epochs and history_every_n_steps must be positive")
        self.every_n_epochs, self.history_every_n_steps = every_n_epochs, history_every_n_steps
        self.query, self.images = query, images
        self.history: list[dict[str, Any]] = []

    def _writer(self, trainer: pl.Trainer) -> Any | None:
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                return logger.experiment
        return None

    def _images(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Tensor:
        """Validation images (test images under the paper's protocol); one for positional attention."""
        datamodule = trainer.datamodule
        if not isinstance(datamodule, CIFAR10DataModule):
            return torch.zeros(1, 3, 32, 32, device=pl_module.device)
        n = self.images if pl_module.backbone.input_dependent else 1  # positional attention: any image
        split = "val" if datamodule.val_set is not None and len(datamodule.val_set) else "test"
        images, _ = datamodule.evaluation_images(n, split=split)
        return images.to(pl_module.device)

    @rank_zero_only
    def _record(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        step = trainer.global_step
        if self.history and self.history[-1]["step"] == step:
            return
        with torch.no_grad():
            self.history.append(locality_snapshot(pl_module.backbone, self._images(trainer, pl_module), step))

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record(trainer, pl_module)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
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
        images = self._images(trainer, pl_module)
        lr = None
        if isinstance(pl_module, ImageClassifier) and pl_module.total_steps_planned is not None:
            optim, total = pl_module.optim, pl_module.total_steps_planned
            lr = lambda s: optim.lr * lr_factor(s, total, optim)  # noqa: E731
        figures = figures_of(pl_module.backbone, images, query=self.query, history=self.history, lr=lr)
        for tag, value in figures:
            if isinstance(value, Figure):
                writer.add_figure(tag, value, global_step=step, close=True)
            else:
                writer.add_scalar(tag, value, global_step=step)
        writer.flush()

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict["history"])
