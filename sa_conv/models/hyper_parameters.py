"""What rebuilds a trained model (a module's hyper-parameters, as checkpoints and weights files hold them):
one record, one reader that migrates every older layout and checks the types."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sa_conv.utils.errors import CheckpointError
from sa_conv.utils.json_values import json_kind
from sa_conv.utils.quote import quoted

__all__ = ["HyperParameters"]

# what checkpoints written before OptimConfig held: its fields flat among the hyper-parameters
_LEGACY_OPTIM = ("lr", "momentum", "weight_decay", "schedule", "warmup", "milestones", "gamma")


@dataclass(frozen=True)
class HyperParameters:
    """A trained module's model name, its model config and optimizer config (plain data, as written) and
    the name its validation metrics carry.

    Extending it: a new field takes a default, filled by ``read`` where a file holds it, so that every
    older file still reads; keys a version does not know are refused by the module that takes them."""

    model: str
    model_config: dict[str, object] = field(default_factory=dict)
    optim: dict[str, object] = field(default_factory=dict)
    val_name: str = "val"
    extra: dict[str, object] = field(default_factory=dict)  # keys of another layout, passed on as they came

    @classmethod
    def read(cls, data: object, source: str) -> HyperParameters:
        """The hyper-parameters of a file's record, migrated (records written before ``OptimConfig`` held
        its fields flat among them); ``CheckpointError`` naming ``source`` for a wrong type."""
        if not isinstance(data, Mapping):
            raise CheckpointError(f"{source}: its hyper-parameters are {json_kind(data)}, not an object")
        values = {str(k): v for k, v in data.items()}
        if "optim" not in values:
            values["optim"] = {k: values.pop(k) for k in _LEGACY_OPTIM if k in values}
            values.pop("num_classes", None)  # the model config's own
        model, val_name = values.pop("model", None), values.pop("val_name", "val")
        model_config, optim = values.pop("model_config", None) or {}, values.pop("optim", None) or {}
        if not isinstance(model, str):
            raise CheckpointError(f"{source}: its hyper-parameters name no model (a string)")
        for name, value in (("model_config", model_config), ("optim", optim)):
            if not isinstance(value, Mapping):
                raise CheckpointError(f"{source}: its {name} is {json_kind(value)}, not an object")
        if not isinstance(val_name, str):
            raise CheckpointError(f"{source}: its val_name {quoted(val_name)} is not a string")
        return cls(
            model=model,
            model_config={str(k): v for k, v in model_config.items()},
            optim={str(k): v for k, v in optim.items()},
            val_name=val_name,
            extra=values,
        )

    def to_dict(self) -> dict[str, object]:
        """The plain data a checkpoint holds (``read`` of it gives this record back)."""
        return {
            "model": self.model,
            "model_config": self.model_config,
            "optim": self.optim,
            "val_name": self.val_name,
            **self.extra,
        }
