"""Evaluating a trained module: its accuracy on a split, and which test images it gets right."""

from __future__ import annotations

import contextlib

import pytorch_lightning as pl
import torch

from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.nn.autocast import autocast_available
from sa_conv.training.module import ImageClassifier
from sa_conv.training.precision import mixed_precision
from sa_conv.utils.precisions import BF16, FLOAT32, Precision

__all__ = ["correct_on_test", "evaluate"]


def evaluate(module: ImageClassifier, datamodule: CIFAR10DataModule, split: str = "test") -> float:
    """Accuracy of ``module`` on a split (``test`` or ``val``) of ``datamodule``, on one device."""
    trainer = pl.Trainer(
        accelerator="auto", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    run = trainer.test if split == "test" else trainer.validate
    name = "test" if split == "test" else module.val_name
    return float(run(module, datamodule=datamodule, verbose=False)[0][f"{name}/acc"])


@torch.no_grad()
def correct_on_test(
    backbone: torch.nn.Module,
    datamodule: CIFAR10DataModule,
    precision: Precision = FLOAT32,
    device: torch.device | None = None,
) -> str:
    """Per test image, whether ``backbone`` classifies it right: a string of 0 and 1 in the test split's
    order (what a paired test between two models on the same images needs). ``device``: where to compute
    (default: where the backbone is); the backbone is moved there."""
    was_training = backbone.training
    backbone.eval()
    device = device or next(backbone.parameters()).device
    backbone.to(device)
    images, labels = datamodule.evaluation_images(normalized=False)
    bf16 = precision == BF16 and autocast_available(device)
    correct = []
    size = datamodule.eval_batch_size
    for start in range(0, len(labels), size):
        batch = datamodule.normalize(images[start : start + size].to(device))
        with mixed_precision(device.type) if bf16 else contextlib.nullcontext():
            predicted = backbone(batch).argmax(-1).cpu()
        correct.append(predicted == labels[start : start + size])
    backbone.train(was_training)
    return "".join("1" if ok else "0" for ok in torch.cat(correct).tolist())
