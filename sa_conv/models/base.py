"""What every model of the registry declares: images in, logits out, and what it can show."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from torch import Tensor, nn

from sa_conv.nn.encodings import PositionalEncoding

__all__ = ["Backbone"]


class Backbone(nn.Module):
    """Base class of the registry's models. Callers ask ``has_attention`` before asking for attention."""

    #: attention_maps, attention_layers and encodings say what the model attends to
    has_attention: ClassVar[bool] = False
    #: the model's config object (its family's dataclass: ``SAConfig``, ``ResNetConfig``, ...)
    config: Any

    def no_weight_decay(self) -> set[str]:
        """Names of the parameters exempt from weight decay (none by default)."""
        return set()

    @property
    def input_dependent(self) -> bool:
        """Whether some layer's attention depends on the image (False without attention)."""
        return False

    def attention_maps(self, images: Tensor) -> list[Tensor]:
        """Attention probabilities of every layer, ``(B|1, heads, N, N)`` each."""
        raise ValueError(f"{type(self).__name__} has no attention layers")

    def attention_layers(self) -> Sequence[nn.Module]:
        """The attention layer of every block, in order (none by default)."""
        return []

    def encodings(self) -> list[PositionalEncoding | None]:
        """The positional encoding of every attention layer (none by default)."""
        return []
