"""sa_conv: self-attention and convolution on images (Cordonnier, Loukas & Jaggi, ICLR 2020)."""

__version__ = "0.1.0"

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
