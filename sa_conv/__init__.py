"""sa_conv: self-attention and convolution on images (Cordonnier, Loukas & Jaggi, ICLR 2020).

The package's names load on first use (PEP 562): ``import sa_conv`` imports no torch, so a command can
check its arguments before the heavy imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sa_conv.utils.lazy import lazy_names
from sa_conv.utils.version import __version__

if TYPE_CHECKING:
    from sa_conv.models import create_model
    from sa_conv.models.weights import load_pretrained
    from sa_conv.nn.attention import MultiHeadSelfAttention2d
    from sa_conv.nn.encodings import GaussianEncoding, LearnedRelativeEncoding, QuadraticEncoding

__all__ = [
    "GaussianEncoding",
    "LearnedRelativeEncoding",
    "MultiHeadSelfAttention2d",
    "QuadraticEncoding",
    "__version__",
    "create_model",
    "load_pretrained",
]

_HOMES = {  # each public name and the module that defines it
    "create_model": "sa_conv.models",
    "load_pretrained": "sa_conv.models.weights",
    "MultiHeadSelfAttention2d": "sa_conv.nn.attention",
    "GaussianEncoding": "sa_conv.nn.encodings",
    "LearnedRelativeEncoding": "sa_conv.nn.encodings",
    "QuadraticEncoding": "sa_conv.nn.encodings",
}


__getattr__ = lazy_names("sa_conv", _HOMES)
