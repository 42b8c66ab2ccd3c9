"""Lightning callbacks: training throughput (and, with the figures issue, attention figures)."""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl

__all__ = ["TrainingThroughput"]


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
