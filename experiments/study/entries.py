"""The studies: which models each scale trains, with which seeds and overrides of the scale's preset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from experiments.presets import preset
from sa_conv.training.config import RunConfig

__all__ = ["PAPER_TABLE", "STUDIES", "Entry", "entry_config"]


@dataclass(frozen=True)
class Entry:
    """One model of a study: its name in the table, the model, overrides of the scale's preset, seeds."""

    name: str
    model: str
    seeds: tuple[int, ...] = (0,)
    overrides: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def entry_config(entry: Entry, scale: str, seed: int) -> RunConfig:
    """The run config of one entry and seed."""
    return preset(entry.model, scale).replace(seed=seed, **entry.overrides)


STUDIES: dict[str, tuple[Entry, ...]] = {
    "tiny": (
        Entry("resnet18", "resnet18", (0, 1)),
        Entry("quadratic", "quadratic", (0, 1)),
        Entry("quadratic-16heads", "quadratic", (0,), {"model_config": {"heads": 16}}),
        Entry("gaussian", "gaussian", (0, 1)),
        Entry("learned", "learned", (0, 1)),
        Entry("learned-content", "learned-content", (0,)),
        Entry("composite", "composite", (0,)),
        Entry("mixed", "mixed", (0,)),
    ),
    "small": (
        Entry("quadratic", "quadratic", (0, 1)),
        Entry("learned", "learned", (0, 1)),
        Entry("resnet18", "resnet18", (0,)),
        Entry("gaussian", "gaussian", (0,)),
        Entry("learned-content", "learned-content", (0,)),
        # the precision contract's bf16 against float32 on the phenomenon (docs/performance.md)
        Entry("quadratic-bf16", "quadratic", (0, 1), {"precision": "bf16-mixed"}),
        # does the grid form with more training? A fresh 60-epoch schedule (docs/results.md)
        Entry("quadratic-60ep", "quadratic", (0, 1), {"epochs": 60}),
    ),
    "small6": (
        Entry("quadratic", "quadratic", (0, 1)),
        Entry("quadratic-16heads", "quadratic", (0, 1), {"model_config": {"heads": 16}}),
        Entry("learned", "learned", (0,)),
        # float32 as its 15-epoch counterpart (so the two differ in the schedule only) on any machine
        Entry("quadratic-45ep", "quadratic", (0,), {"epochs": 45, "precision": "32-true"}),
    ),
    "paper": tuple(Entry(m, m) for m in ("resnet18", "quadratic", "gaussian", "learned", "learned-content")),
}
PAPER_TABLE = {  # the paper's Table 1: accuracy (%), parameters (M)
    "resnet18": (93.8, 11.2),
    "quadratic": (93.8, 12.1),
    "learned": (91.8, 12.3),
    "learned-content": (87.1, 29.5),
}
