"""Lightning callbacks: training throughput, attention figures and locality metrics in TensorBoard."""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl
import torch
from matplotlib.figure import Figure
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only
from torch import Tensor, nn

from sa_conv.encodings import GaussianEncoding, QuadraticEncoding
from sa_conv.metrics import locality
from sa_conv.viz import attention_grid, centre_trajectories, locality_summary

__all__ = [
    "AttentionFigures",
    "EpochHistory",
    "TrainingThroughput",
    "attention_centres",
    "figures_of",
    "inverse_covariances",
]


class EpochHistory(pl.Callback):
    """Validation accuracy and wall time of every epoch (for ``metrics.json``)."""

    def __init__(self) -> None:
        self.history: list[dict[str, float]] = []
        self._start = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or "val/acc" not in trainer.callback_metrics:
            return
        self.history.append(
            {
                "epoch": trainer.current_epoch + 1,
                "step": trainer.global_step,
                "val_acc": float(trainer.callback_metrics["val/acc"]),
                "epoch_seconds": time.perf_counter() - self._start,
            }
        )

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict["history"])


class TrainingThroughput(pl.Callback):
    """Images per second of the training steps (forward, backward, optimizer), logged per epoch."""

    def __init__(self) -> None:
        self.images = 0
        self.seconds = 0.0
        self._start = 0.0

    @property
    def images_per_second(self) -> float:
        """Training images per second so far (0 before any step)."""
        return self.images / self.seconds if self.seconds else 0.0

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.seconds += time.perf_counter() - self._start
        self.images += len(batch[1]) * trainer.world_size

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.seconds:
            pl_module.log("perf/train_images_per_s", self.images_per_second, rank_zero_only=True)

    def state_dict(self) -> dict[str, Any]:
        return {"images": self.images, "seconds": self.seconds}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.images, self.seconds = state_dict["images"], state_dict["seconds"]


def _encodings_of(model: nn.Module, kind: type | tuple[type, ...]) -> list | None:
    """Every layer's positional encoding if all of them are of ``kind``, else None."""
    layers = getattr(model, "attention_layers", lambda: [])()
    encodings = [getattr(layer, "encoding", None) for layer in layers]
    return encodings if encodings and all(isinstance(e, kind) for e in encodings) else None


def attention_centres(model: nn.Module) -> Tensor | None:
    """Centres ``(layers, heads, 2)`` of a quadratic/Gaussian SA model, else None."""
    encodings = _encodings_of(model, (QuadraticEncoding, GaussianEncoding))
    return None if encodings is None else torch.stack([e.centres.detach().float().cpu() for e in encodings])


def inverse_covariances(model: nn.Module) -> Tensor | None:
    """Inverse covariances ``(layers, heads, 2, 2)`` of a generalized Gaussian SA model, else None."""
    encodings = _encodings_of(model, GaussianEncoding)
    if encodings is None:
        return None
    return torch.stack([e.inverse_covariance.detach().float().cpu() for e in encodings])


class AttentionFigures(pl.Callback):
    """Logs attention grids, centre trajectories and locality metrics to TensorBoard.

    Every ``every_n_epochs`` validation epochs and at the end of training: ``attention/layer{i}`` (one
    layer's heads), ``attention/grid`` (layers x heads), ``attention/centres`` (quadratic and Gaussian
    models) and ``attention/locality``, plus scalars ``locality/layer{i}/{metric}``. Probabilities of
    content models are averaged over ``images`` validation images. Rank zero only; does nothing
    without a TensorBoard logger or for a model without attention maps.
    """

    def __init__(
        self, *, every_n_epochs: int = 5, query: tuple[int, int] | None = None, images: int = 16
    ) -> None:
        self.every_n_epochs, self.query, self.images = every_n_epochs, query, images
        self.history: list[Tensor] = []  # centres (layers, heads, 2) per snapshot
        self.steps: list[int] = []

    def _writer(self, trainer: pl.Trainer) -> Any | None:
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                return logger.experiment
        return None

    def _record_centres(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        centres = attention_centres(getattr(pl_module, "backbone", pl_module))
        if centres is not None and (not self.steps or self.steps[-1] != trainer.global_step):
            self.history.append(centres)
            self.steps.append(trainer.global_step)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record_centres(trainer, pl_module)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record_centres(trainer, pl_module)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        self.log_figures(trainer, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record_centres(trainer, pl_module)
        self.log_figures(trainer, pl_module)

    @rank_zero_only
    def log_figures(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Render and log every figure now (rank zero)."""
        writer = self._writer(trainer)
        backbone = getattr(pl_module, "backbone", pl_module)
        if writer is None or not hasattr(backbone, "attention_maps"):
            return
        images = self._images(trainer, pl_module)
        step = trainer.global_step
        for tag, value in figures_of(
            backbone, images, query=self.query, history=self.history, steps=self.steps
        ):
            if isinstance(value, Figure):
                writer.add_figure(tag, value, global_step=step, close=True)
            else:
                writer.add_scalar(tag, value, global_step=step)
        writer.flush()

    def _images(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Tensor:
        datamodule = getattr(trainer, "datamodule", None)
        dataset = getattr(datamodule, "val_set", None)
        if dataset is None or not len(dataset):
            return torch.zeros(1, 3, 32, 32, device=pl_module.device)
        return datamodule.normalize(dataset.images[: self.images].to(pl_module.device))

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history, "steps": self.steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history, self.steps = list(state_dict["history"]), list(state_dict["steps"])


def figures_of(
    backbone: nn.Module,
    images: Tensor,
    *,
    query: tuple[int, int] | None = None,
    history: list[Tensor] | None = None,
    steps: list[int] | None = None,
    name: str = "",
) -> list[tuple[str, Figure | float]]:
    """Every attention figure and locality scalar of an SA backbone, as ``(tag, value)`` pairs."""
    was_training = backbone.training
    backbone.eval()
    maps = backbone.attention_maps(images)  # per layer (B|1, heads, N, N)
    backbone.train(was_training)
    side = backbone.config.grid
    query = query or (side // 2, side // 2)
    title = f"{name + ': ' if name else ''}query {query}" + (
        f", mean of {len(images)} images" if maps[0].shape[0] > 1 else ""
    )
    out: list[tuple[str, Figure | float]] = []
    for i, m in enumerate(maps):
        out.append(
            (f"attention/layer{i + 1}", attention_grid([m], side, side, query, title=f"layer {i + 1}"))
        )
    out.append(("attention/grid", attention_grid(maps, side, side, query, title=title)))
    if maps[0].shape[0] > 1:  # content attention: one image too
        single = [m[:1] for m in maps]
        out.append(
            (
                "attention/grid_single_image",
                attention_grid(
                    single, side, side, query, title=f"{name + ': ' if name else ''}query {query}, one image"
                ),
            )
        )
    metrics = [locality(m, side, side) for m in maps]
    for i, metric in enumerate(metrics):
        out.append((f"locality/layer{i + 1}/mean_distance", float(metric.mean_distance.mean())))
        out.append((f"locality/layer{i + 1}/radius90", float(metric.radius90.mean())))
        out.append((f"locality/layer{i + 1}/entropy", float(metric.entropy.mean())))
        out.append((f"locality/layer{i + 1}/localized_fraction", float(metric.localized.float().mean())))
    distances = torch.stack([m.mean_distance for m in metrics])
    localized = torch.stack([m.localized for m in metrics])
    out.append(("attention/locality", locality_summary(distances, localized=localized, title=name or None)))
    if history:
        inv = inverse_covariances(backbone)
        out.append(
            (
                "attention/centres",
                centre_trajectories(
                    torch.stack(history), steps=steps, inverse_covariance=inv, title=name or None
                ),
            )
        )
    return out
