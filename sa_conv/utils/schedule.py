"""The optimizer's settings and the learning-rate schedule: plain arithmetic, below the training module
that steps it and the figures that draw it."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Literal

from sa_conv.utils.config import option
from sa_conv.utils.quote import quoted

__all__ = ["SCHEDULES", "OptimConfig", "Schedule", "lr_factor", "schedule_length"]


Schedule = Literal["warmup-cosine", "multistep"]
MAX_LR = 100.0  # the paper's is 0.1
SCHEDULES: tuple[str, ...] = typing.get_args(Schedule)


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    """The optimizer and its learning-rate schedule; the defaults are the paper's run.sh."""

    lr: float = option(0.1, "SGD learning rate (the peak, after the warm-up)")
    momentum: float = option(0.9, "SGD momentum")
    weight_decay: float = option(1e-4, "weight decay (parameters a model exempts, e.g. centres, get none)")
    schedule: Schedule = option("warmup-cosine", "warmup-cosine, stepped per step; or multistep")
    warmup: float = option(0.05, "warmup-cosine: fraction of the steps with a linear warm-up")
    milestones: tuple[float, ...] = option(
        (80 / 300, 150 / 300, 250 / 300), "multistep: fractions of training where the lr drops"
    )
    gamma: float = option(0.1, "multistep: lr factor at each milestone")
    freeze_spreads: int = option(
        0, "epochs at the start in which the encodings' spreads keep their initial value (lock-in test)"
    )

    def __post_init__(self) -> None:
        checks = [
            ("lr", 0 < self.lr <= MAX_LR, f"in (0, {MAX_LR:g}]"),
            ("momentum", 0 <= self.momentum < 1, "in [0, 1)"),
            ("weight_decay", 0 <= self.weight_decay <= 1, "in [0, 1]"),
            ("schedule", self.schedule in SCHEDULES, " or ".join(SCHEDULES)),
            ("warmup", 0 <= self.warmup < 1, "in [0, 1)"),
            ("milestones", all(0 < m < 1 for m in self.milestones), "fractions of training in (0, 1)"),
            ("milestones", list(self.milestones) == sorted(self.milestones), "in increasing order"),
            ("gamma", 0 < self.gamma <= 1, "in (0, 1]"),
            (
                "freeze_spreads",
                isinstance(self.freeze_spreads, int)
                and not isinstance(self.freeze_spreads, bool)
                and self.freeze_spreads >= 0,
                "a number of epochs >= 0",
            ),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {quoted(getattr(self, name))}")


def lr_factor(step: int, total: int, optim: OptimConfig) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` of ``total``.

    ``warmup-cosine``: linear warm-up over the first ``warmup`` fraction, then cosine to zero (the
    paper's run.sh). ``multistep``: times ``gamma`` at each milestone, given as fractions of training
    (epochs 80, 150, 250 of 300 for the paper's ResNet18).
    """
    total = max(total, 1)
    if optim.schedule == "multistep":
        return optim.gamma ** sum(step >= round(m * total) for m in optim.milestones)
    warm = max(round(optim.warmup * total), 1)
    if step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(total - warm, 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def schedule_length(
    batches_per_epoch: int, *, max_epochs: int | None, max_steps: int = -1, accumulate: int = 1
) -> int:
    """Optimizer steps of a whole fit, as Lightning counts them (``estimated_stepping_batches``): each
    epoch's batches over the gradient accumulation, times the epochs, at most ``max_steps`` (when > 0).
    ``max_epochs`` None or negative: no epoch limit (``max_steps`` must give one)."""
    epochs = max_epochs if max_epochs is not None and max_epochs >= 0 else math.inf
    total = math.ceil(batches_per_epoch / accumulate) * epochs
    if max_steps > 0:
        total = min(total, max_steps)
    if total == math.inf:
        raise ValueError("the learning-rate schedule needs max_epochs or max_steps")
    return max(int(total), 1)
