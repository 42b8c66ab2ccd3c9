"""The run config (what decides a run's result) and the run options (how it executes), as YAML.

``RunConfig`` holds one typed object per part: the model's config (``SAConfig`` or ``ResNetConfig``),
the optimizer's (``OptimConfig``, given to the LightningModule) and the data's (``DataConfig``, given
to the DataModule); each part's defaults and checks live in its own dataclass. Every field is a flag
of ``experiments.run``; a run saves its config as ``config.yaml``, which repeats it exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from sa_conv.data.config import DataConfig
from sa_conv.models import MODELS, ModelConfig, model_config
from sa_conv.utils.config import config_from_dict, config_to_dict, field_types, is_count, option
from sa_conv.utils.precisions import AUTO, PRECISIONS, Precision
from sa_conv.utils.quote import quoted
from sa_conv.utils.schedule import OptimConfig
from sa_conv.utils.untrusted import load_yaml

__all__ = [
    "ACCELERATORS",
    "SECTIONS",
    "RunConfig",
    "RunOptions",
    "config_difference",
    "dump_config",
    "load_config",
]

ACCELERATORS = ("auto", "cpu", "gpu", "cuda")
MAX_EPOCHS = 100_000  # the paper trains 300
MAX_STEPS = 10**9  # steps of a run, or between two of its records
MAX_DEVICES = 1024
# the parts of a run config, each its own dataclass (the model's family is the model's)
SECTIONS: dict[str, type] = {"optim": OptimConfig, "data": DataConfig}


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything that decides a run's result, given its data (every field is a flag of experiments.run).

    ``model_config`` may be given as overrides (a mapping) of the model's registry defaults; it is
    resolved on construction, every field written out, so that a saved config repeats the run exactly.
    """

    model: str = field(metadata={"help": "a name of sa_conv.models.MODELS"})
    scale: str = option("custom", "the preset this config started from (a label)")
    model_config: ModelConfig | Mapping[str, object] | None = None
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    epochs: int = option(300, "training epochs")
    limit_train_batches: int | float | None = option(
        None, "Lightning: batches (int) or a fraction (float) of each epoch"
    )
    precision: Precision = option(
        AUTO,
        "auto: bf16-mixed where bf16 is native (CUDA GPU from Ampere; AVX-512 BF16, AMX, Arm BF16 CPU), "
        "else 32-true",
    )
    tf32: bool = option(True, "float32 matrix products on CUDA in TF32 (--no-tf32: strict float32)")
    seed: int = option(0, "weights, data split, augmentation and dropout")

    @property
    def resolved_model_config(self) -> ModelConfig:
        """The model's config, as construction resolved it from the registry's defaults and overrides."""
        if not isinstance(self.model_config, ModelConfig):
            raise TypeError("the model config is resolved on construction")  # unreachable
        return self.model_config

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model {quoted(self.model)}; valid models: {', '.join(MODELS)}")
        family = MODELS[self.model].family
        config = self.model_config
        if not isinstance(config, ModelConfig):
            config = model_config(self.model, **dict(config or {}))
        elif not isinstance(config, family):
            raise ValueError(f"model {self.model} takes a {family.__name__}, got a {type(config).__name__}")
        object.__setattr__(self, "model_config", config)
        for name, cls in SECTIONS.items():
            value = getattr(self, name)
            if not isinstance(value, cls):
                object.__setattr__(self, name, config_from_dict(cls, value, what=f"the {name} config"))
        limit = self.limit_train_batches
        checks = [
            ("epochs", is_count(self.epochs, MAX_EPOCHS), f"an integer from 1 to {MAX_EPOCHS:,}"),
            ("precision", self.precision in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
            ("seed", isinstance(self.seed, int) and 0 <= self.seed < 2**32, "an integer from 0 to 2**32 - 1"),
            (
                "limit_train_batches",
                limit is None or is_count(limit, MAX_STEPS) or (isinstance(limit, float) and 0 < limit <= 1),
                f"a number of batches from 1 to {MAX_STEPS:,} or a fraction in (0, 1]",
            ),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {quoted(getattr(self, name))}")

    def to_dict(self) -> dict[str, object]:
        """Plain data, one mapping per part (what config.yaml and checkpoints hold)."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> RunConfig:
        """The config of plain data (a config.yaml); unknown or misplaced options name themselves.

        Configs written before the optimizer and data parts existed (their options at the top level)
        are read as well.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"the run config must be a mapping of options, got {type(data).__name__}")
        data = dict(data)
        for name, section in SECTIONS.items():
            legacy = {k: data.pop(k) for k in field_types(section) if k in data}
            if legacy:
                section_data = data.get(name) or {}
                data[name] = {**legacy, **(dict(section_data) if isinstance(section_data, Mapping) else {})}
        _check_placement(data)
        return config_from_dict(cls, data, what="the run config")

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes``; a mapping given for a part is merged into it (``{"heads": 16}``)."""
        for name in ("model_config", *SECTIONS):
            if isinstance(changes.get(name), Mapping):
                changes[name] = dataclasses.replace(getattr(self, name), **changes[name])
        return dataclasses.replace(self, **changes)


def _check_placement(data: Mapping[str, object]) -> None:
    """A top-level key that belongs to a part says where it goes."""
    own = set(field_types(RunConfig))
    model = data.get("model")
    family = MODELS[model].family if model in MODELS else None
    for key in data:
        if key in own:
            continue
        if family is not None and key in field_types(family):
            raise ValueError(f"the run config has no option {key}: it belongs under model_config")
        options = ", ".join(sorted(own))
        raise ValueError(f"the run config has no option {key}; options: {options}")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a run executes, without changing its result: hardware, checkpoints, figures, logging."""

    output_dir: Path = field(metadata={"help": "runs go to OUTPUT_DIR/<model>/version_N"})
    accelerator: str = option("auto", "auto, cpu, gpu or cuda")
    devices: int | str = option(1, "devices (DDP when more than one) or auto")
    strategy: str = option("auto", "Lightning's strategy, e.g. ddp")
    compile: bool = option(False, "torch.compile the backbone")
    ddp_timeout: float = option(5.0, "DDP: minutes a rank waits in a collective before it ends (a dead peer)")
    max_time: str | None = option(None, "Lightning: stop after DD:HH:MM:SS")
    fast_dev_run: bool = option(False, "Lightning: one batch of each stage, nothing written")
    checkpoint_every: int | None = option(None, "also a snapshot every N training steps")
    snapshot_minutes: float = option(10.0, "a snapshot every this many minutes of training (0: none)")
    figures_every: int | None = option(5, "attention figures every N epochs (none: no attention record)")
    history_every: int | None = option(None, "locality snapshots every N steps (default: about 40 per run)")
    progress: Literal["auto", "bar", "lines"] = option("auto", "auto: a bar on a terminal, lines in a log")
    explore: bool = option(
        True, "write explorer.html, the attention explorer of the last checkpoint, at the end"
    )
    allow_large: bool = option(
        False, "train a model whose estimated memory exceeds what this machine has available"
    )

    def __post_init__(self) -> None:
        checks = [
            (
                "checkpoint_every",
                self.checkpoint_every is None or is_count(self.checkpoint_every, MAX_STEPS),
                f"an integer from 1 to {MAX_STEPS:,}",
            ),
            ("snapshot_minutes", 0 <= self.snapshot_minutes < math.inf, ">= 0 minutes (0: none)"),
            ("ddp_timeout", 0 < self.ddp_timeout < math.inf, "positive and finite (minutes)"),
            (
                "figures_every",
                self.figures_every is None or is_count(self.figures_every, MAX_EPOCHS),
                f"an integer from 1 to {MAX_EPOCHS:,} or none",
            ),
            (
                "history_every",
                self.history_every is None or is_count(self.history_every, MAX_STEPS),
                f"an integer from 1 to {MAX_STEPS:,}",
            ),
            ("accelerator", self.accelerator in ACCELERATORS, f"one of {', '.join(ACCELERATORS)}"),
            (
                "devices",
                self.devices == "auto" or is_count(self.devices, MAX_DEVICES),
                f"an integer from 1 to {MAX_DEVICES} or auto",
            ),
            (
                "max_time",
                self.max_time is None
                or re.fullmatch(r"\d{1,2}:\d{2}:\d{2}:\d{2}", self.max_time) is not None,
                "DD:HH:MM:SS",
            ),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {quoted(getattr(self, name))}")
        if self.devices != 1 or self.accelerator in (
            "gpu",
            "cuda",
        ):  # the machine asked only where it matters
            from sa_conv.utils.machine import check_devices  # imports torch

            check_devices(self.accelerator, self.devices)


def flat_options(config: Mapping[str, object]) -> dict[str, object]:
    """A config's plain data with its parts' options at the top level (their names are unique)."""
    out = {k: v for k, v in config.items() if k not in ("model_config", *SECTIONS)}
    for part in ("model_config", *SECTIONS):
        options = config.get(part)
        out.update(options if isinstance(options, Mapping) else {})
    return out


def config_difference(stored: Mapping[str, object], wanted: Mapping[str, object]) -> list[str]:
    """``name=stored (now: wanted)`` for every option that differs, each option by its own name.

    ``precision: auto`` in ``wanted`` matches whatever precision the stored run resolved to.
    """
    # a config saved before an option (or a part) existed ran with that option's default
    with contextlib.suppress(ValueError, TypeError):
        stored = RunConfig.from_dict(stored).to_dict()
    a, b = flat_options(stored), flat_options(wanted)
    if b.get("precision") == "auto":
        b["precision"] = a.get("precision")
    return [
        f"{k}={quoted(a.get(k))} (now: {quoted(b.get(k))})"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def dump_config(config: RunConfig) -> str:
    """The config as YAML (what ``load_config`` reads back)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


def load_config(path: Path) -> RunConfig:
    """A RunConfig from a YAML file (a run's config.yaml or one written by --print-config); the file is
    bounded before it is read (``sa_conv.utils.untrusted``)."""
    try:
        if path.is_file() and path.stat().st_size > MAX_CONFIG_BYTES:
            raise ValueError(f"config file {path} takes over {MAX_CONFIG_BYTES:,} bytes: not a run config")
        text = path.read_text()
    except FileNotFoundError:
        raise ValueError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"config file {path} is a directory") from None
    except UnicodeDecodeError:
        raise ValueError(f"config file {path} is not a text (YAML) file") from None
    data = load_yaml(text, f"config file {path}")
    if data is None:
        raise ValueError(f"config file {path} is empty")
    return RunConfig.from_dict(data)


MAX_CONFIG_BYTES = 1 << 20  # a run's config.yaml takes about 2 KB
