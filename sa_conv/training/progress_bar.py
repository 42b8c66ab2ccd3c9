"""The run's progress bar: Lightning's, naming the epoch of the run's total (``Epoch 3/15``), right after a
resume too, and ending its line before anything else is written."""

from __future__ import annotations

import pytorch_lightning as pl
from pytorch_lightning.callbacks import TQDMProgressBar
from pytorch_lightning.callbacks.progress.tqdm_progress import convert_inf

__all__ = ["RunProgressBar"]


class RunProgressBar(TQDMProgressBar):
    """Lightning's TQDM bar with the epoch of the run's total. A run resumed mid-epoch starts no epoch in
    Lightning (no ``on_train_epoch_start``): its bar would show neither the epoch nor the batches of it,
    nor a time left; here the first batch after the resume sets them, counting from the resumed batch.
    A stop or an error closes the bars, so the line that follows starts a line of its own."""

    def __init__(self) -> None:
        super().__init__()
        self._epoch_shown: int | None = None  # the epoch the training bar describes

    def _describe(self, trainer: pl.Trainer) -> None:
        total = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        self.train_progress_bar.set_description(f"Epoch {trainer.current_epoch + 1}{total}")
        self._epoch_shown = trainer.current_epoch

    def on_train_epoch_start(self, trainer: pl.Trainer, *args: object) -> None:
        super().on_train_epoch_start(trainer, *args)
        self._describe(trainer)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        if self._epoch_shown != trainer.current_epoch:  # resumed mid-epoch
            bar = self.train_progress_bar
            bar.reset(total=convert_inf(self.total_train_batches))
            bar.initial = bar.n = batch_idx  # the time left counts from here
            self._describe(trainer)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        for name in ("train_progress_bar", "val_progress_bar", "test_progress_bar"):
            try:
                getattr(self, name).close()  # tqdm ends the bar's line
            except TypeError:  # Lightning's property: that stage's bar was never made
                continue
