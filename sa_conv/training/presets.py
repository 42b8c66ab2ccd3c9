"""Named run configurations (instances of ``RunConfig``): the paper's runs and two CPU scales.

- ``paper``: the paper's run.sh (6 layers, 9 heads, hidden 400, batch 100, 300 epochs; ResNet18: lr / 10
  at epochs 80, 150, 250). Hours per epoch on a CPU: a GPU scale.
- ``small``: the CPU scale where the paper's phenomenon shows (trained quadratic heads localize): the
  tiny architecture on every training image for 15 epochs, about 45 minutes per positional model on 2 CPU
  cores. The paper's optimizer, schedule, init and augmentation; attention dropout off (see below).
- ``small6``: the paper's depth at the ``small`` width: 6 layers of width 64 (FFN 128), 9 heads, the
  small recipe (every training image, 15 epochs, attention dropout off). Measured in float32 on 2 Xeon
  cores: about 1.8 hours with 9 heads alone (410-430 s per epoch), about twice that beside another run;
  16 heads about 2.5 hours alone (projected from its step, 1.26x the 9-head one).
- ``tiny``: minutes on 2 CPU cores, a smoke scale: 10,000 images, 3 epochs.

A model's options at each CPU scale and its schedule are its registry entry's (``ModelEntry.scales``,
``schedule``). Both CPU scales turn attention dropout off: a dropped matrix does not factor, so with it
training takes the shared path, 1.7x slower than the separable one at this width (hidden-state dropout
stays 0.1).
"""

from __future__ import annotations

from sa_conv.data.config import DataConfig
from sa_conv.models import MODELS
from sa_conv.training.config import RunConfig
from sa_conv.utils.quote import quoted
from sa_conv.utils.schedule import OptimConfig

__all__ = ["SCALES", "preset"]

SCALES = ("paper", "small", "small6", "tiny")

_EPOCHS = {"paper": 300, "small": 15, "small6": 15, "tiny": 3}
_DATA: dict[str, DataConfig] = {"tiny": DataConfig(train_subset=10_000, val_size=1_000)}


def preset(model: str, scale: str) -> RunConfig:
    """The named preset of ``model`` at ``scale``."""
    if model not in MODELS:
        raise ValueError(f"unknown model {quoted(model)}; valid models: {', '.join(MODELS)}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {quoted(scale)}; valid scales: {', '.join(SCALES)}")
    entry = MODELS[model]  # its options at each CPU scale, its schedule: the model's own
    return RunConfig(
        model=model,
        scale=scale,
        model_config=entry.scales.get(scale, {}),
        optim=OptimConfig(schedule=entry.schedule),
        data=_DATA.get(scale, DataConfig()),
        epochs=_EPOCHS[scale],
    )
