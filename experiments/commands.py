"""The suite's commands, by name: the one place a command is registered. Each is a module with
``main(argv) -> int`` that checks its arguments before its heavy imports; ``python -m experiments`` lists
them, ``python -m experiments NAME ...`` runs one (as ``python -m experiments.NAME ...`` does)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["COMMANDS", "Command"]


@dataclass(frozen=True)
class Command:
    """A command: the module whose ``main(argv)`` it runs, and what it does, in one line."""

    module: str
    summary: str

    def main(self) -> Callable[[list[str] | None], int | None]:
        """The command's ``main``, its module imported now (its arguments are checked before torch)."""
        main: Callable[[list[str] | None], int | None] = importlib.import_module(self.module).main
        return main


COMMANDS: dict[str, Command] = {
    "run": Command("experiments.run", "trains a model: TensorBoard logs with attention figures, checkpoints"),
    "evaluate": Command("experiments.evaluate", "accuracy of a checkpoint on the data it was trained on"),
    "figures": Command("experiments.figures", "every attention figure of a checkpoint as PNG"),
    "explore": Command("experiments.explore", "the attention explorer: one offline HTML page"),
    "convert": Command("experiments.convert", "Theorem 1: a convolution as attention, and back"),
    "prune": Command("experiments.prune", "the paper's degenerate-head pruning, evaluated and fine-tuned"),
    "equivalence": Command("experiments.equivalence", "relative-position attention = lightweight conv"),
    "study": Command("experiments.study", "every model of a scale on the same data and budget"),
    "benchmark": Command("experiments.benchmark", "speed and memory of every fast path and training step"),
    "models": Command("experiments.models", "the registry's models, their parameters and FLOPs"),
    "gallery": Command("experiments.gallery", "an explorer page per shipped model and an index"),
}
