"""The models: the registry (``create_model(name, **overrides)`` builds every model of the suite) and each
model's config, torch-free; the models themselves (``Backbone``, ``SAClassifier``, ``ResNet18``) load on
first use (PEP 562)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sa_conv.models.registry import MODELS, ModelConfig, ModelEntry, create_model, model_config
from sa_conv.models.resnet_config import ResNetConfig
from sa_conv.models.sa_config import SAConfig
from sa_conv.utils.lazy import lazy_names

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


__getattr__ = lazy_names("sa_conv.models", _HOMES)
