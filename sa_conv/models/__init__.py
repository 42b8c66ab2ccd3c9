"""The models: the registry (``create_model(name, **overrides)`` builds every model of the suite) and each
model's config, torch-free; the models themselves (``Backbone``, ``SAClassifier``, ``ResNet18``) load on
first use (PEP 562)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from sa_conv.models.registry import MODELS, ModelConfig, ModelEntry, create_model, model_config
from sa_conv.models.resnet_config import ResNetConfig
from sa_conv.models.sa_config import SAConfig

if TYPE_CHECKING:
    from sa_conv.models.base import Backbone
    from sa_conv.models.resnet import ResNet18
    from sa_conv.models.sa_classifier import SAClassifier

__all__ = [
    "MODELS",
    "Backbone",
    "ModelConfig",
    "ModelEntry",
    "ResNet18",
    "ResNetConfig",
    "SAClassifier",
    "SAConfig",
    "create_model",
    "model_config",
]

_HOMES = {
    "Backbone": "sa_conv.models.base",
    "ResNet18": "sa_conv.models.resnet",
    "SAClassifier": "sa_conv.models.sa_classifier",
}


def __getattr__(name: str) -> object:
    """A model class, imported from its module on first use."""
    if name not in _HOMES:
        raise AttributeError(f"module 'sa_conv.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
