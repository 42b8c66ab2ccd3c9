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
from torch import Tensor, nn

from sa_conv.lit import ImageClassifier
from sa_conv.metrics import SHARP_MASS, gaussian_alpha, interior_queries, locality, peak_shift
from sa_conv.viz import attention_grid, centre_plot, layer_heads, locality_over_training, locality_summary

__all__ = [
    "AttentionFigures",
    "TrainingProgress",
    "attention_maps_of",
    "figures_of",
    "figures_of_maps",
    "layer_summary",
    "locality_queries",
    "locality_snapshot",
]


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    return str(datetime.timedelta(seconds=round(seconds)))


class TrainingProgress(pl.Callback):
    """Training images per second (across resumes), the projected time of the whole run, and one
    record per epoch (train loss and accuracy, evaluation accuracy, learning rate, images/s).

    Kept beside Lightning's ``ThroughputMonitor`` (which logs a sliding window to the logger): this
    keeps the run's overall rate for ``metrics.json`` and the ETA. ``lines=True`` also prints each
    epoch's record as one plain line (for logs that are not a terminal: nohup, SLURM).
    """

    def __init__(self, *, lines: bool, slow_warning: float = 86400.0, slow_hint: str = "") -> None:
        self.lines, self.slow_warning, self.slow_hint = lines, slow_warning, slow_hint
        self.images, self.steps, self.seconds = 0, 0, 0.0
        self.history: list[dict[str, float]] = []
        self._timed_here = 0  # steps timed by this process (the projection waits for a warm one)
        self._start = self._epoch_start = self._eval_start = self._eval_seconds = 0.0

    @property
    def images_per_second(self) -> float:
        """Training images per second so far (0 before any step)."""
        return self.images / self.seconds if self.seconds else 0.0

    def _say(self, trainer: pl.Trainer, message: str) -> None:
        bar = trainer.progress_bar_callback
        (bar.print if bar is not None and trainer.is_global_zero else rank_zero_only(print))(message)

    def _remaining_seconds(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> float:
        total = (
            pl_module.total_steps()
            if isinstance(pl_module, ImageClassifier)
            else trainer.estimated_stepping_batches
        )
        per_step = self.seconds / max(self.steps, 1)
        evals = sum(h.get("eval_seconds", 0.0) for h in self.history) / max(len(self.history), 1)
        epochs_left = max((trainer.max_epochs or 0) - trainer.current_epoch - 1, 0)
        return max(total - trainer.global_step, 0) * per_step + epochs_left * evals

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_start = time.perf_counter()  # a run resumed mid-epoch starts its epoch here

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_start = time.perf_counter()
        self._eval_seconds = 0.0

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval_start = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._eval_seconds += time.perf_counter() - self._eval_start

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        elapsed = time.perf_counter() - self._start
        self._timed_here += 1
        if self._timed_here == 1:
            return  # the first step of a process pays for warm-up; it would skew the projection
        self.seconds += elapsed
        self.steps += 1
        self.images += len(batch[1]) * trainer.world_size
        if self._timed_here == 3:
            remaining = self._remaining_seconds(trainer, pl_module)
            self._say(
                trainer,
                f"speed: {self.images_per_second:.1f} training images/s; projected time to the end of "
                f"the run: {_duration(remaining)} (ETA {_eta(remaining)})",
            )
            if remaining > self.slow_warning:
                self._say(
                    trainer, f"warning: this run needs about {_duration(remaining)} here. {self.slow_hint}"
                )

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
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
            parts += [f"{self.images_per_second:.1f} images/s", f"ETA {_duration(remaining)}"]
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


def _eta(seconds: float) -> str:
    return (datetime.datetime.now() + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M")


# ---------------------------------------------------------------------- the attention record


def _side(backbone: nn.Module) -> int:
    return backbone.config.grid


def locality_queries(side: int) -> Tensor:
    """The queries every locality number averages over: those at least a quarter of the grid from a border."""
    return interior_queries(side, side, side // 4)


def attention_maps_of(backbone: nn.Module, images: Tensor) -> list[Tensor]:
    """Per layer ``(B|1, heads, N, N)`` attention probabilities in eval mode; the backbone's mode is kept."""
    was_training = backbone.training
    backbone.eval()
    maps = backbone.attention_maps(images)  # no_grad inside
    backbone.train(was_training)
    return maps


def locality_snapshot(backbone: nn.Module, images: Tensor, step: int) -> dict[str, Any]:
    """The locality of every layer now: per head mean distance and peak mass (interior queries), and
    for Gaussian heads their centres and inverse covariances. Plain lists (checkpoint- and JSON-ready)."""
    maps = attention_maps_of(backbone, images)  # per layer (B|1, heads, N, N)
    side = _side(backbone)
    queries = locality_queries(side)
    layers = []
    encodings = backbone.encodings()
    for probs, encoding in zip(maps, encodings, strict=True):
        m = locality(probs, side, side, queries=queries)
        shift, _ = peak_shift(probs, side, side, queries=queries)
        layer: dict[str, Any] = {
            "mean_distance": m.mean_distance.tolist(),
            "peak_mass": m.peak_mass.tolist(),
            "peak_shift": shift.tolist(),  # each head's most frequent most-attended shift (dy, dx)
        }
        gaussians = encoding.head_gaussians() if encoding is not None else None
        if gaussians is not None:
            layer["centres"] = gaussians[0].float().cpu().tolist()
            layer["inverse_covariance"] = gaussians[1].float().cpu().tolist()
        layers.append(layer)
    return {"step": step, "layers": layers}


def layer_summary(snapshot: dict[str, Any]) -> list[dict[str, float]]:
    """Per layer: mean attention distance, number of sharp heads (>= 0.5 of their mass on one pixel),
    the number of distinct taps among them (their peak shifts; rounded centres in records that predate
    them), the heads' mean mass on one pixel (conv-likeness), and for Gaussian heads the median alpha."""
    out = []
    for layer in snapshot["layers"]:
        sharp = torch.tensor(layer["peak_mass"]) >= SHARP_MASS
        row = {
            "mean_distance": sum(layer["mean_distance"]) / len(layer["mean_distance"]),
            "sharp_heads": int(sharp.sum()),
            "heads": len(layer["peak_mass"]),
            "conv_likeness": sum(layer["peak_mass"]) / len(layer["peak_mass"]),
        }
        shifts = layer.get("peak_shift")
        if shifts is None and "centres" in layer:
            shifts = torch.tensor(layer["centres"]).round().tolist()
        if shifts is not None:
            taps = torch.tensor(shifts, dtype=torch.float64).reshape(-1, 2)[sharp]
            row["sharp_distinct_taps"] = len(torch.unique(taps, dim=0)) if len(taps) else 0
        if "inverse_covariance" in layer:
            row["median_alpha"] = float(gaussian_alpha(torch.tensor(layer["inverse_covariance"])).median())
        out.append(row)
    return out


def _history_tensors(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Snapshots -> ``(T, layers)`` series and ``(T, layers, heads, ...)`` centre arrays, when consistent."""
    heads = [[len(layer["peak_mass"]) for layer in s["layers"]] for s in history]
    out: dict[str, Any] = {"steps": [s["step"] for s in history]}
    summaries = [layer_summary(s) for s in history]
    out["mean_distance"] = torch.tensor([[r["mean_distance"] for r in s] for s in summaries])
    out["sharp_fraction"] = torch.tensor([[r["sharp_heads"] / r["heads"] for r in s] for s in summaries])
    out["conv_likeness"] = torch.tensor([[r["conv_likeness"] for r in s] for s in summaries])
    gaussian = all("median_alpha" in r for s in summaries for r in s)
    out["median_alpha"] = (
        torch.tensor([[r["median_alpha"] for r in s] for s in summaries]) if gaussian else None
    )
    same_heads = all(h == heads[0] and len(set(h)) == 1 for h in heads)
    if gaussian and same_heads:
        out["centres"] = torch.tensor([[layer["centres"] for layer in s["layers"]] for s in history])
        out["inverse_covariance"] = torch.tensor(
            [[layer["inverse_covariance"] for layer in s["layers"]] for s in history]
        )
    return out


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
        datamodule = getattr(trainer, "datamodule", None)
        dataset = getattr(datamodule, "val_set", None) or getattr(datamodule, "test_set", None)
        if dataset is None or not len(dataset):
            return torch.zeros(1, 3, 32, 32, device=pl_module.device)
        n = self.images if pl_module.backbone.input_dependent else 1  # positional attention: any image
        return datamodule.normalize(dataset.images[:n].to(pl_module.device))

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
        for tag, value in figures_of(pl_module.backbone, images, query=self.query, history=self.history):
            if isinstance(value, Figure):
                writer.add_figure(tag, value, global_step=step, close=True)
            else:
                writer.add_scalar(tag, value, global_step=step)
        writer.flush()

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict["history"])


def figures_of(
    backbone: nn.Module,
    images: Tensor,
    *,
    query: tuple[int, int] | None = None,
    history: list[dict[str, Any]] | None = None,
    name: str = "",
) -> list[tuple[str, Figure | float]]:
    """Every attention figure and locality scalar of an SA backbone, as ``(tag, value)`` pairs.

    The centre plot and the locality-over-training plot are drawn from ``history`` (the run's own
    snapshots) and need at least one (two) of them.
    """
    maps = attention_maps_of(backbone, images)
    return figures_of_maps(maps, _side(backbone), query=query, history=history, name=name)


def figures_of_maps(
    maps: list[Tensor],
    side: int,
    *,
    query: tuple[int, int] | None = None,
    history: list[dict[str, Any]] | None = None,
    name: str = "",
) -> list[tuple[str, Figure | float]]:
    """``figures_of`` from attention maps already computed: per layer ``(B|1, heads, N, N)``, N = side^2."""
    query = query or (side // 2, side // 2)
    prefix = f"{name}: " if name else ""
    averaged = f", mean of {maps[0].shape[0]} images" if maps[0].shape[0] > 1 else ""
    out: list[tuple[str, Figure | float]] = []
    for i, m in enumerate(maps):
        title = f"{prefix}layer {i + 1}, query {query}{averaged}"
        out.append((f"attention/layer{i + 1}", layer_heads(m, side, side, query, title=title)))
    out.append(
        ("attention/grid", attention_grid(maps, side, side, query, title=f"{prefix}query {query}{averaged}"))
    )
    if maps[0].shape[0] > 1:  # content attention: one image too
        single = [m[:1] for m in maps]
        title = f"{prefix}query {query}, one image"
        out.append(("attention/grid_single_image", attention_grid(single, side, side, query, title=title)))
    queries = locality_queries(side)
    metrics = [locality(m, side, side, queries=queries) for m in maps]
    for i, metric in enumerate(metrics):
        out.append((f"locality/layer{i + 1}/mean_distance", float(metric.mean_distance.mean())))
        out.append((f"locality/layer{i + 1}/radius90", float(metric.radius90.mean())))
        out.append((f"locality/layer{i + 1}/entropy", float(metric.entropy.mean())))
        out.append((f"locality/layer{i + 1}/sharp_fraction", float(metric.sharp.float().mean())))
    if len({m.shape[1] for m in maps}) == 1:
        distances = torch.stack([m.mean_distance for m in metrics])
        sharp = torch.stack([m.sharp for m in metrics])
        out.append(("attention/locality", locality_summary(distances, sharp=sharp, title=name or None)))
    if history:
        series = _history_tensors(history)
        if "centres" in series:
            centres = centre_plot(
                series["centres"],
                inverse_covariance=series["inverse_covariance"],
                steps=series["steps"],
                title=name or None,
            )
            out.append(("attention/centres", centres))
        if len(history) >= 2:
            figure = locality_over_training(
                series["steps"],
                series["mean_distance"],
                series["sharp_fraction"],
                conv_likeness=series["conv_likeness"],
                median_alpha=series["median_alpha"],
                title=f"{prefix}locality over training",
            )
            out.append(("attention/locality_over_training", figure))
    return out
