"""Model registry: ``create_model(name, **overrides)`` builds every model of the suite."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from sa_conv.models.base import Backbone
from sa_conv.models.resnet import ResNet18, ResNetConfig
from sa_conv.models.sa_classifier import SAClassifier, SAConfig
from sa_conv.utils.config import coerce, field_types
from sa_conv.utils.quote import quoted

__all__ = [
    "MODELS",
    "Backbone",
    "ModelEntry",
    "ResNet18",
    "ResNetConfig",
    "SAClassifier",
    "SAConfig",
    "create_model",
    "model_config",
]


class ModelEntry(NamedTuple):
    """One model of the registry: its config family, the defaults that make it this model, its class."""

    family: type
    defaults: dict[str, Any]
    build: Callable[[Any], Backbone]


MODELS: dict[str, ModelEntry] = {
    "resnet18": ModelEntry(ResNetConfig, {}, ResNet18),
    "quadratic": ModelEntry(SAConfig, {"encoding": "quadratic"}, SAClassifier),
    "gaussian": ModelEntry(SAConfig, {"encoding": "gaussian"}, SAClassifier),
    "learned": ModelEntry(SAConfig, {"encoding": "learned"}, SAClassifier),
    "learned-content": ModelEntry(SAConfig, {"encoding": "learned", "content": True}, SAClassifier),
    # the baseline of both related papers (a ViT-style model): content attention with learned absolute
    # positions added to the tokens (as ConvBERT's inputs), initialized and trained as learned-content
    "absolute-content": ModelEntry(
        SAConfig, {"encoding": "none", "content": True, "absolute_position": True}, SAClassifier
    ),
    # related systems on the same bench, initialized as their own code (BERT's N(0, 0.02))
    "composite": ModelEntry(
        SAConfig, {"encoding": "composite", "content": True, "init": "bert"}, SAClassifier
    ),
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
        SAClassifier,
    ),
}


def model_config(name: str, **overrides: Any) -> Any:
    """The config object of model ``name`` with ``overrides`` applied (paper defaults otherwise)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {quoted(name)}; valid models: {', '.join(MODELS)}")
    family, defaults, _ = MODELS[name]
    types = field_types(family)
    unknown = sorted(set(overrides) - set(types))
    if unknown:
        raise ValueError(
            f"model {quoted(name)} has no option {', '.join(unknown)}; options: {', '.join(sorted(types))}"
        )
    typed = {k: coerce(v, types[k], k) for k, v in overrides.items()}  # plain data (YAML lists) typed
    return family(**{**defaults, **typed})


def create_model(name: str, **overrides: Any) -> Backbone:
    """Build model ``name`` (one of ``MODELS``); defaults are the paper's, ``overrides`` resize it."""
    config = model_config(name, **overrides)  # an unknown name or option: one clear error
    return MODELS[name].build(config)
