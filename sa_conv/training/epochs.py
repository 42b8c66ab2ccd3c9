"""The epoch record: one epoch of a run, as the progress callback writes it, the checkpoints and
``metrics.json`` keep it, and the run, its summary and the study read it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

__all__ = ["EpochRecord", "epochs_json", "read_epochs"]

Number = float | int


@dataclass(frozen=True)
class EpochRecord:
    """One epoch: its number (from 1) and last step, its training and evaluation time, the training
    speed, the training loss and accuracy, the evaluated split's accuracy (``val_acc``, or ``test_acc``
    under the paper's protocol) and the learning rate at its end.

    Extending it: a new field is optional with the default None, which ``to_json`` leaves out, so older
    files read (the field None) and write back unchanged; keys this version does not know are kept in
    ``extra`` and written back as they came."""

    epoch: int
    step: int
    epoch_seconds: float | None = None
    eval_seconds: float | None = None
    images_per_s: float | None = None
    train_loss: float | None = None
    train_acc: float | None = None
    val_acc: float | None = None
    test_acc: float | None = None
    lr: float | None = None
    extra: dict[str, Number] = field(default_factory=dict, compare=False)

    @property
    def evaluated_acc(self) -> float | None:
        """The evaluated split's accuracy: validation, or test under the paper's protocol."""
        return self.val_acc if self.val_acc is not None else self.test_acc

    def to_json(self) -> dict[str, Number]:
        """Plain data without the fields that are None (a ``metrics.json`` history entry)."""
        out: dict[str, Number] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and value is not None:
                out[f.name] = value
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: object) -> EpochRecord:
        """A record as ``to_json`` wrote it; ``ValueError`` says what is wrong (numbers only, finite,
        an epoch and a step that count from 0)."""
        if not isinstance(data, dict):
            raise ValueError("an epoch record is not an object")
        for key in ("epoch", "step"):
            value = data.get(key)
            if type(value) is not int or value < 0:
                raise ValueError(f"an epoch record's {key} is not a count")
        for key, value in data.items():
            if type(value) not in (int, float) or not math.isfinite(value):
                raise ValueError(f"an epoch record's {str(key)[:40]!r} is not a finite number")
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            **{k: v for k, v in data.items() if k in known},
            extra={k: v for k, v in data.items() if k not in known},
        )


def epochs_json(records: Sequence[EpochRecord]) -> list[dict[str, Number]]:
    """Records as plain data (what checkpoints and ``metrics.json`` hold)."""
    return [record.to_json() for record in records]


def read_epochs(data: object, source: str) -> list[EpochRecord]:
    """The epoch records a file brought (decoded data); ``ValueError`` naming ``source`` and the entry."""
    if not isinstance(data, list):
        raise ValueError(f"{source}: its epoch history is not a list")
    try:
        return [EpochRecord.from_json(entry) for entry in data]
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
