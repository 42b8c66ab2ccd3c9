"""Where an unfinished run of a study stands at its newest checkpoint: a state of training, not a result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sa_conv.analysis.snapshots import LayerSummary, LocalitySnapshot

__all__ = ["UnfinishedRun"]


@dataclass(frozen=True, kw_only=True)
class UnfinishedRun:
    """An unfinished run: its entry's name and seed, its run config, its step, the epochs done of its
    budget, its last epoch's accuracy on the split each epoch evaluates, and the locality of its last
    snapshot (the step of that snapshot, each layer's summary) with the whole record."""

    name: str
    seed: int
    config: dict[str, object]
    step: int | None
    epochs_completed: int
    epochs: int
    epoch_split: str  # "validation", or "test" under the paper's protocol
    epoch_acc: float | None
    snapshot_step: int | None
    layers: tuple[LayerSummary, ...]
    locality_history: tuple[LocalitySnapshot, ...]
