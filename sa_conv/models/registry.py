"""The model registry: each model's name, its config family, the defaults that make it this model, and the
module and class that build it, imported only when a model is built (the registry and the configs import
without torch: command lines check their arguments first)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sa_conv.models.model_config import ModelConfig
from sa_conv.models.resnet_config import ResNetConfig
from sa_conv.models.sa_config import SAConfig
from sa_conv.utils.config import coerce, field_types
from sa_conv.utils.quote import quoted
from sa_conv.utils.schedule import Schedule

if TYPE_CHECKING:
    from sa_conv.models.base import Backbone

__all__ = ["MODELS", "ModelConfig", "ModelEntry", "create_model", "model_config"]


# a family's analytic FLOP formula: (config, training) -> (forward FLOPs, those of the products whose input
# is the image, FLOPs the backward pass recomputes)
FlopFormula = Callable[[Any, bool], tuple[int, int, int]]

# the CPU scales' model options of the SA family: 2 (small6: 6) layers of width 64, FFN 128, no attention
# dropout (a dropped matrix does not factor: the separable path would be off)
SA_SCALES: dict[str, dict[str, object]] = {
    "small": {"layers": 2, "hidden": 64, "ffn": 128, "attn_dropout": 0.0},
    "small6": {"layers": 6, "hidden": 64, "ffn": 128, "attn_dropout": 0.0},
    "tiny": {"layers": 2, "hidden": 64, "ffn": 128, "attn_dropout": 0.0},
}


@dataclass(frozen=True)
class ModelEntry:
    """One model of the registry: its config family, the defaults that make it this model, the class that
    builds it, its analytic FLOP formula and its activation estimate as ``"module:name"`` (imported when
    first used), its options
    at each CPU scale of the presets, and its learning-rate schedule.

    A new model is one entry: every command, preset, FLOP column and figure asks it (``docs/library.md``)."""

    family: type
    defaults: dict[str, object] = field(default_factory=dict)
    builder: str = "sa_conv.models.sa_classifier:SAClassifier"
    flops: str = "sa_conv.models.flop_formulas:sa_flops"
    activations: str = "sa_conv.models.footprint:sa_activations"
    scales: dict[str, dict[str, object]] = field(default_factory=lambda: SA_SCALES)
    schedule: Schedule = "warmup-cosine"

    def build(self, config: ModelConfig) -> Backbone:
        """The model of ``config`` (an instance of ``family``)."""
        cls: Any = _named(self.builder)
        built: Backbone = cls(config)
        return built

    def activations_estimate(self) -> Callable[[Any], int]:
        """The values one image's training step keeps for backward (``sa_conv.models.footprint``)."""
        estimate: Callable[[Any], int] = _named(self.activations)
        return estimate

    def flops_formula(self) -> FlopFormula:
        """The family's analytic FLOP formula (``sa_conv.analysis.flops.analytic_flops`` calls it)."""
        formula: FlopFormula = _named(self.flops)
        return formula


def _named(target: str) -> Any:
    """The object a ``"module:name"`` string names, its module imported now."""
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


_RESNET = "sa_conv.models.resnet:ResNet18"
# the paper's ResNet18 run used its script's defaults: lr / 10 at epochs 80, 150, 250, no warm-up
_RESNET_ENTRY = ModelEntry(
    ResNetConfig,
    {},
    _RESNET,
    flops="sa_conv.models.flop_formulas:resnet_flops",
    activations="sa_conv.models.footprint:resnet_activations",
    scales={"small": {"width": 16}, "small6": {"width": 16}, "tiny": {"width": 16}},
    schedule="multistep",
)

MODELS: dict[str, ModelEntry] = {
    "resnet18": _RESNET_ENTRY,
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


def model_config(name: str, **overrides: object) -> ModelConfig:
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
    config: ModelConfig = entry.family(**{**entry.defaults, **typed})
    return config


def create_model(name: str, **overrides: object) -> Backbone:
    """Build model ``name`` (one of ``MODELS``); defaults are the paper's, ``overrides`` resize it."""
    config = model_config(name, **overrides)  # an unknown name or option: one clear error
    return MODELS[name].build(config)
