"""Tiny runs: the flags of a tiny model and of its quick runs, and a run trained through
``experiments.run``'s error guard."""

from __future__ import annotations

from pathlib import Path

from experiments import run
from experiments.cli import main_guard


def tiny(*, layers: int = 1, heads: int = 4, epochs: int | None = 1) -> list[str]:
    """The flags (after the model's name) of a tiny model: ``layers`` layers 16 wide of ``heads`` heads,
    trained ``epochs`` epochs (None: the preset's)."""
    flags = ["--scale", "tiny", "--layers", str(layers), "--hidden", "16", "--heads", str(heads)]
    return flags if epochs is None else [*flags, "--epochs", str(epochs)]


TINY = tiny()  # one layer, one epoch
QUIET = ["--figures-every", "none", "--snapshot-minutes", "0"]  # no figures, no timed snapshots
# one step on 64 synthetic images, no explorer page
QUICK = [*TINY, "--synthetic", "--synthetic-size", "64", "--limit-train-batches", "1", "--no-explore"]
# 410 synthetic training images in batches of 41: 10 steps per epoch; attention dropout on (its RNG)
BATCHES_OF_41 = [*tiny(epochs=None), "--attn-dropout", "0.1", "--batch-size", "41"]
TEN_STEPS = [*BATCHES_OF_41, "--synthetic", *QUIET]


def train(out: Path, model: str, *flags: str) -> Path:
    """Train ``model`` with ``flags`` into ``out`` (asserting the command succeeds); the run's folder."""
    assert main_guard(run.main)([model, *flags, "--output-dir", str(out)]) == 0
    return out / model / "version_0"
