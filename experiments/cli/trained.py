"""A trained model for a command: read once (a checkpoint, a weights file or a shipped model's name),
rebuilt as its LightningModule, and, for a command that reads its attention, refused in one line when it
has none."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from experiments.cli.guard import UserError

if TYPE_CHECKING:
    from sa_conv.training.module import ImageClassifier
    from sa_conv.training.trained import TrainedModel

__all__ = ["trained_model"]


def trained_model(
    spec: str | Path, *, needs_attention: str | None = None
) -> tuple[TrainedModel, ImageClassifier]:
    """The record of ``spec`` (``load_trained``: its weights, run config, locality history) and the module
    it rebuilds. ``needs_attention``: what the command reads of the attention (``"attention maps to
    draw"``), said in the ``UserError`` for a model without attention (``SPEC is a resnet18 checkpoint:
    it has no attention maps to draw``)."""
    from sa_conv.training.checkpoints import module_from_checkpoint
    from sa_conv.training.trained import load_trained

    record = load_trained(spec)
    module = module_from_checkpoint(record)
    if needs_attention is not None and not module.backbone.has_attention:
        raise UserError(f"{spec} is a {record.model} checkpoint: it has no {needs_attention}")
    return record, module
