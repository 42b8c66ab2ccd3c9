"""A trained model as every command reads it, from a checkpoint, a weights file or a shipped model's name:
one reader (``load_trained``), every migration of older files in it, a typed record out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from sa_conv.analysis.snapshots import LocalitySnapshot, read_history
from sa_conv.models.hyper_parameters import HyperParameters
from sa_conv.models.manifest_entry import ManifestEntry
from sa_conv.models.weights import manifest, read_weights, shipped_file, tensors_of
from sa_conv.training.epochs import EpochRecord, read_epochs
from sa_conv.utils.config import config_from_dict
from sa_conv.utils.quote import quoted
from sa_conv.utils.safe_load import CheckpointError, read_checkpoint
from sa_conv.utils.schedule import OptimConfig, lr_factor

__all__ = ["TrainedModel", "load_trained"]


@dataclass(frozen=True)
class TrainedModel:
    """A trained model: where it was read from, its module's hyper-parameters (migrated: ``model``,
    ``model_config``, ``optim``) and weights, its run config, step and locality history, the length of
    its learning-rate schedule, the data it trained on (folder and source, fingerprint), and for a shipped
    model its manifest entry and weights file; a training checkpoint also its epoch records.

    Extending it: a new field is optional (a default of None), filled by ``load_trained`` where a file
    holds it, so that every older file still reads."""

    source: str
    hyper_parameters: HyperParameters
    state_dict: dict[str, Tensor]
    run_config: dict[str, object] | None = None
    step: int | None = None
    history: list[LocalitySnapshot] | None = None
    epochs: list[EpochRecord] | None = None
    schedule_steps: int | None = None
    data_source: dict[str, object] | None = None  # the data module's hyper-parameters: data_dir, source, ...
    data_fingerprint: dict[str, object] | None = None
    shipped: ManifestEntry | None = None
    weights_file: str | None = None

    @property
    def model(self) -> str:
        """The model's registry name."""
        return self.hyper_parameters.model

    def config(self) -> dict[str, object]:
        """The run config; ``CheckpointError`` for a file that holds none (not written by experiments.run)."""
        if self.run_config is None:
            raise CheckpointError(f"{self.source} holds no run config (not written by experiments.run)")
        return self.run_config

    def lr_schedule(self, total_steps: int | None = None) -> Callable[[int], float] | None:
        """The learning rate at each step of the run; records written before they kept the schedule's length
        need ``total_steps`` (a finished run's step count), else None."""
        total = self.schedule_steps or total_steps
        optim = self.hyper_parameters.optim
        if total is None or not optim:
            return None
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in optim.items()}
        config = config_from_dict(OptimConfig, values, what=f"{self.source}: the optimizer config")
        return lambda step: config.lr * lr_factor(step, total, config)


def load_trained(spec: str | Path) -> TrainedModel:
    """The trained model a checkpoint, a weights file or a shipped model's name holds; no code runs.
    ``CheckpointError`` says what is wrong."""
    path = Path(spec)
    shipped = None
    if path.suffix == ".safetensors":
        if not path.is_file():
            raise CheckpointError(f"weights file {path} does not exist")
        raw = read_weights(path)
    elif not path.exists() and path.suffix != ".ckpt" and "/" in str(spec):
        raw, shipped = read_weights(shipped_file(str(spec))), manifest()[str(spec)]
    else:
        raw = read_checkpoint(path)
    return _record(str(spec), raw, shipped)


def _record(source: str, raw: dict[str, object], shipped: ManifestEntry | None) -> TrainedModel:
    """The record of a checkpoint or a weights file as read (``read_checkpoint``, ``read_weights``)."""
    if not isinstance(raw.get("hyper_parameters"), dict) or not isinstance(raw.get("state_dict"), dict):
        raise CheckpointError(f"{source} holds no model (hyper-parameters and weights)")
    callbacks = _object(raw.get("callbacks"))
    history = next(
        (_object(v).get("history") for k, v in callbacks.items() if k.startswith("AttentionFigures")), None
    )
    step = raw.get("global_step")
    if step is not None and (type(step) is not int or step < 0):
        raise CheckpointError(f"{source}: its global_step {quoted(step)} is not a count")
    epochs = _object(callbacks.get("TrainingProgress")).get("history")
    total = _object(raw.get("schedule")).get("total_steps")
    if total is not None and (type(total) is not int or not 0 < total <= 10**12):
        raise CheckpointError(f"{source}: its schedule's total_steps {quoted(total)} is not a step count")
    weights_file = raw.get("weights_file")
    fingerprint = _object(raw.get("CIFAR10DataModule")).get("fingerprint")
    return TrainedModel(
        source=source,
        hyper_parameters=HyperParameters.read(raw["hyper_parameters"], source),
        state_dict=tensors_of(raw["state_dict"], source),
        run_config=_object(raw.get("run_config")) or None,
        step=step,
        history=None if history is None else read_history(history, str(weights_file or source)),
        epochs=None if epochs is None else _epochs(epochs, source),
        schedule_steps=total,
        data_source=_object(raw.get("datamodule_hyper_parameters")) or None,
        data_fingerprint=_object(fingerprint) or None,
        shipped=shipped,
        weights_file=weights_file if isinstance(weights_file, str) else None,
    )


def _object(value: object) -> dict[str, object]:
    """A record's object (string keys), or an empty one where it holds something else or nothing."""
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _epochs(data: object, source: str) -> list[EpochRecord]:
    """A checkpoint's epoch records, read by their reader; ``CheckpointError`` naming ``source``."""
    try:
        return read_epochs(data, source)
    except ValueError as err:
        raise CheckpointError(str(err)) from None
