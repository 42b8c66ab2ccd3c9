"""The model registry: each model's name, its config family, the defaults that make it this model, and the
module and class that build it, imported only when a model is built (the registry and the configs import
without torch: command lines check their arguments first)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sa_conv.models.resnet_config import ResNetConfig
from sa_conv.models.sa_config import SAConfig
from sa_conv.utils.config import coerce, field_types
from sa_conv.utils.quote import quoted

if TYPE_CHECKING:
    from sa_conv.models.base import Backbone

__all__ = ["MODELS", "ModelConfig", "ModelEntry", "create_model", "model_config"]

ModelConfig = SAConfig | ResNetConfig  # the config families of the registry's models


@dataclass(frozen=True)
class ModelEntry:
    """One model of the registry: its config family, the defaults that make it this model, and the class
    that builds it as ``"module:Class"`` (imported on the first build)."""

    family: type
    defaults: dict[str, Any] = field(default_factory=dict)
    builder: str = "sa_conv.models.sa_classifier:SAClassifier"

    def build(self, config: Any) -> Backbone:
        """The model of ``config`` (an instance of ``family``)."""
        module, name = self.builder.split(":")
        cls: Any = getattr(importlib.import_module(module), name)
        built: Backbone = cls(config)
        return built


_RESNET = "sa_conv.models.resnet:ResNet18"

MODELS: dict[str, ModelEntry] = {
    "resnet18": ModelEntry(ResNetConfig, {}, _RESNET),
    "quadratic": ModelEntry(SAConfig, {"encoding": "quadratic"}),
    "gaussian": ModelEntry(SAConfig, {"encoding": "gaussian"}),
    "learned": ModelEntry(SAConfig, {"encoding": "learned"}),
    "learned-content": ModelEntry(SAConfig, {"encoding": "learned", "content": True}),
    # the baseline of both related papers (a ViT-style model): content attention with learned absolute
    # positions added to the tokens (as ConvBERT's inputs), initialized and trained as learned-content
    "absolute-content": ModelEntry(
        SAConfig, {"encoding": "none", "content": True, "absolute_position": True}
    ),
    # related systems on the same bench, initialized as their own code (BERT's N(0, 0.02))
    "composite": ModelEntry(SAConfig, {"encoding": "composite", "content": True, "init": "bert"}),
    "mixed": ModelEntry(
        SAConfig,
        {
            "encoding": "none",
            "content": True,
            "attention": "mixed",
            "heads": 8,
            "init": "bert",
            "absolute_position": True,  # ConvBERT adds learned absolute position embeddings to its inputs
        },
    ),
}


def model_config(name: str, **overrides: Any) -> Any:
    """The config object of model ``name`` with ``overrides`` applied (paper defaults otherwise)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {quoted(name)}; valid models: {', '.join(MODELS)}")
    entry = MODELS[name]
    types = field_types(entry.family)
    unknown = sorted(set(overrides) - set(types))
    if unknown:
        shown = ", ".join(u[:30] for u in unknown[:3]) + (" and more" if len(unknown) > 3 else "")
        raise ValueError(f"model {quoted(name)} has no option {shown}; options: {', '.join(sorted(types))}")
    typed = {k: coerce(v, types[k], k) for k, v in overrides.items()}  # plain data (YAML lists) typed
    return entry.family(**{**entry.defaults, **typed})


def create_model(name: str, **overrides: Any) -> Backbone:
    """Build model ``name`` (one of ``MODELS``); defaults are the paper's, ``overrides`` resize it."""
    config = model_config(name, **overrides)  # an unknown name or option: one clear error
    return MODELS[name].build(config)
