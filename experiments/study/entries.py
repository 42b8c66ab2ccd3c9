"""The studies: which models each scale trains, with which seeds and overrides of the scale's preset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sa_conv.training.config import RunConfig
from sa_conv.training.presets import preset
from sa_conv.utils.precisions import BF16, FLOAT32

__all__ = ["PAPER_TABLE", "STUDIES", "Entry", "entry_config"]


@dataclass(frozen=True)
class Entry:
    """One model of a study: its name in the table, the model, overrides of the scale's preset, seeds."""

    name: str
    model: str
    seeds: tuple[int, ...] = (0,)
    overrides: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    seed_overrides: dict[int, dict[str, Any]] = field(default_factory=dict)  # one seed's, over ``overrides``

    def __post_init__(self) -> None:
        if stray := sorted(set(self.seed_overrides) - set(self.seeds)):
            raise ValueError(f"entry {self.name}: overrides for seeds {stray}, which it does not train")

    def run_name(self, seed: int) -> str:
        """One seed's run: ``<name>-seed<k>``, its folder, weights, carried checkpoint and figures."""
        return f"{self.name}-seed{seed}"

    def overrides_for(self, seed: int) -> dict[str, Any]:
        """The overrides of the scale's preset for one seed: the entry's, then that seed's own."""
        return {**self.overrides, **self.seed_overrides.get(seed, {})}


def entry_config(entry: Entry, scale: str, seed: int) -> RunConfig:
    """The run config of one entry and seed."""
    return preset(entry.model, scale).replace(seed=seed, **entry.overrides_for(seed))


# The CPU studies name each run's precision, the one its committed row was trained in, so that a re-run
# reproduces it on any CPU (``auto`` would pick bf16 on one with native bf16, float32 elsewhere).
_F32 = {"precision": FLOAT32}
_BF16 = {"precision": BF16}


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
        Entry("quadratic", "quadratic", (0, 1), _F32),
        Entry("learned", "learned", (0, 1), _F32),
        Entry("resnet18", "resnet18", (0, 1), _F32),
        Entry("gaussian", "gaussian", (0, 1), _F32),
        Entry("learned-content", "learned-content", (0, 1), _F32),
        # the bench: the related papers' systems on the same recipe (docs/results.md)
        Entry("mixed", "mixed", (0, 1), _F32),
        Entry("composite", "composite", (0, 1), _F32),
        Entry("absolute-content", "absolute-content", (0, 1), _F32),  # the related papers' baseline
        # the precision contract's bf16 against float32 on the phenomenon (docs/performance.md)
        Entry("quadratic-bf16", "quadratic", (0, 1), _BF16),
        # does the grid form with more training? A fresh 60-epoch schedule (docs/results.md)
        Entry("quadratic-60ep", "quadratic", (0, 1), {"epochs": 60, **_F32}),
        # what keeps the heads in place? Each factor against the quadratic control (docs/results.md)
        Entry("quadratic-frozen-spreads", "quadratic", (0, 1), {"optim": {"freeze_spreads": 3}, **_F32}),
        Entry("quadratic-attn-dropout", "quadratic", (0, 1), {"model_config": {"attn_dropout": 0.1}, **_F32}),
        Entry("quadratic-width128", "quadratic", (0,), {"model_config": {"hidden": 128, "ffn": 256}, **_F32}),
    ),
    "small6": (
        Entry("quadratic", "quadratic", (0, 1), _F32),
        # seed 1 trained where bf16 is native, under ``auto`` (docs/results.md: the seeds differ in precision)
        Entry(
            "quadratic-16heads",
            "quadratic",
            (0, 1),
            {"model_config": {"heads": 16}, **_F32},
            seed_overrides={1: _BF16},
        ),
        Entry("learned", "learned", (0,), _F32),
        # float32 as its 15-epoch counterpart, so the two differ in the schedule only
        Entry("quadratic-45ep", "quadratic", (0,), {"epochs": 45, **_F32}),
    ),
    "paper": tuple(Entry(m, m) for m in ("resnet18", "quadratic", "gaussian", "learned", "learned-content")),
}
PAPER_TABLE = {  # the paper's Table 1: accuracy (%), parameters (M)
    "resnet18": (93.8, 11.2),
    "quadratic": (93.8, 12.1),
    "learned": (91.8, 12.3),
    "learned-content": (87.1, 29.5),
}
