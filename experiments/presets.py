"""Named run configurations: the paper's settings (``paper``) and a CPU-feasible ``tiny`` scale."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sa_conv.lit import Schedule
from sa_conv.models import MODELS

__all__ = ["SCALES", "RunConfig", "preset"]

SCALES = ("paper", "tiny")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything one training run needs: model, optimization, data."""

    model: str
    scale: str
    model_config: dict[str, Any] = field(default_factory=dict)
    epochs: int = 300
    batch_size: int = 100
    lr: float = 0.1
    weight_decay: float = 1e-4
    schedule: Schedule = "warmup-cosine"
    train_subset: int | None = None  # None: all of train minus the validation split
    val_size: int = 5000
    seed: int = 0

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes``; ``None`` values are ignored (unset command-line options)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


# The tiny scale: 2 SA layers of width 64 (9 heads, FFN 128) or a ResNet18 of width 16, 10k training
# images, 3 epochs: minutes on 2 CPU cores. Attention dropout is off at this scale so training takes
# the exact fast attention path (dropout on the full attention matrix would force the reference).
_TINY_SA = {"layers": 2, "hidden": 64, "ffn": 128, "attn_dropout": 0.0}
_TINY = {
    "epochs": 3,
    "train_subset": 10_000,
    "val_size": 1_000,
    "batch_size": 100,
}


def preset(model: str, scale: str) -> RunConfig:
    """The named preset of ``model`` at ``scale`` (``paper`` reproduces the paper's run.sh)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; valid models: {', '.join(MODELS)}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid scales: {', '.join(SCALES)}")
    resnet = model == "resnet18"
    # The paper's ResNet18 run used its script's defaults: lr / 10 at epochs 80, 150, 250, no warm-up.
    schedule: Schedule = "multistep" if resnet else "warmup-cosine"
    if scale == "paper":
        return RunConfig(model=model, scale=scale, schedule=schedule)
    model_config = {"width": 16} if resnet else dict(_TINY_SA)
    return RunConfig(model=model, scale=scale, schedule=schedule, model_config=model_config, **_TINY)
