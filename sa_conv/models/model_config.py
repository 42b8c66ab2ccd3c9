"""What every model's config is (torch-free): the protocol the run config, the LightningModule and the
registry hold a model's options by, whatever its family."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["ModelConfig"]


@runtime_checkable
class ModelConfig(Protocol):
    """A model's config: a frozen dataclass of options (each declared with ``option(default, help)``, a
    flag of ``experiments.run``) that checks them on construction and says how many classes the model
    tells apart; everything else about the model is its registry entry's (``ModelEntry``)."""

    @property
    def num_classes(self) -> int: ...
