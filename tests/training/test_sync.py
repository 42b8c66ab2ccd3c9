"""A training step makes no host sync: no value read back to the host (``.item()``, ``.tolist()``,
``bool``/``float``/``int`` of a tensor, ``.cpu()``, ``.numpy()``) and no ``synchronize``, from the
batch's arrival (augmentation, normalization) to the end of the step, with every callback of a run,
on the steps between two logging and checking steps."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from helpers import TINY

import sa_conv.training.run as training
from experiments import run
from experiments.cli import main_guard
from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.training.module import FINITE_CHECK_EVERY

SYNCS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__")
ARGV = ["quadratic", *TINY, "--ffn", "16", "--synthetic", "--synthetic-size", "2000", "--batch-size", "8"]
ARGV += ["--no-explore"]
ARGV += ["--figures-every", "none", "--progress", "bar", "--limit-train-batches", str(FINITE_CHECK_EVERY)]


class Guard(pl.Callback):
    """Arms every host-sync entry point to raise while a training step of ``steps`` runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, steps: range) -> None:
        self.monkeypatch, self.steps, self.checked, self.armed = monkeypatch, steps, 0, False

    def arm(self) -> None:
        def refuse(name: str):
            def fail(*args, **kwargs):
                raise AssertionError(f"host sync in a training step: {name}")

            return fail

        for name in SYNCS:
            self.monkeypatch.setattr(torch.Tensor, name, refuse(f"Tensor.{name}"))
        self.monkeypatch.setattr(torch.cuda, "synchronize", refuse("torch.cuda.synchronize"))
        self.armed = True

    def disarm(self) -> None:
        self.monkeypatch.undo()
        self.armed = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.armed:  # the step that ends here ran armed from its batch's arrival
            self.disarm()
            self.checked += 1


def test_a_training_step_makes_no_host_sync(tmp_path, monkeypatch):
    guard = Guard(
        pytest.MonkeyPatch(), range(2, FINITE_CHECK_EVERY - 2)
    )  # clear of the first and check steps
    transfer = CIFAR10DataModule.on_after_batch_transfer

    def armed_transfer(self, batch, dataloader_idx):  # the batch reaches the device: the step begins
        if self.trainer.training and self.trainer.global_step in guard.steps:
            guard.arm()
        return transfer(self, batch, dataloader_idx)

    class Trainer(pl.Trainer):
        def __init__(self, *args, callbacks=(), **kwargs):
            super().__init__(*args, callbacks=[*callbacks, guard], **{**kwargs, "log_every_n_steps": 100})

    monkeypatch.setattr(CIFAR10DataModule, "on_after_batch_transfer", armed_transfer)
    monkeypatch.setattr(training.pl, "Trainer", Trainer)
    try:
        assert main_guard(run.main)([*ARGV, "--output-dir", str(tmp_path)]) == 0
    finally:
        guard.disarm()
    assert guard.checked == len(guard.steps)
