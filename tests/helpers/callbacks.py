"""Callbacks a test puts into the runs it starts: a step counter that can crash the run or signal it at
a step, and every Trainer of ``sa_conv.training.run`` given one more callback."""

from __future__ import annotations

import os
import signal

import pytest
import pytorch_lightning as pl

import sa_conv.training.run as training


class StepCounter(pl.Callback):
    """Counts the training steps a process runs, and acts at one of them."""

    def __init__(self, at: int | None = None, action=None) -> None:
        self.steps, self.at, self.action = 0, at, action

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.at is not None and trainer.global_step == self.at and self.action == "crash":
            raise RuntimeError("the machine went away")  # a kill: nothing saved at this step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps += 1
        if self.at is not None and trainer.global_step == self.at and isinstance(self.action, signal.Signals):
            os.kill(os.getpid(), self.action)


def with_callback(monkeypatch: pytest.MonkeyPatch, callback: pl.Callback) -> None:
    """Every Trainer that ``sa_conv.training.run`` builds gets ``callback`` too."""

    class Trainer(pl.Trainer):
        def __init__(self, *args, callbacks=(), **kwargs):
            super().__init__(*args, callbacks=[*callbacks, callback], **kwargs)

    monkeypatch.setattr(training.pl, "Trainer", Trainer)
