"""The SA classifier's configuration (``SAConfig``): torch-free, so that command lines and configs read it
before the heavy imports; the model itself is ``sa_conv.models.sa_classifier``."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import Literal

from sa_conv.nn.choices import Impl
from sa_conv.nn.registry import ENCODINGS
from sa_conv.utils.config import is_count, option
from sa_conv.utils.quote import quoted

__all__ = ["SIZE_BOUNDS", "AttentionName", "InitName", "SAConfig"]

AttentionName = Literal["mhsa", "mixed"]
# each size's bound, checked before anything is built (the paper's model: 6 layers, 9 heads, width 400)
SIZE_BOUNDS = {
    "layers": 256,
    "heads": 1024,
    "hidden": 16384,
    "ffn": 65536,
    "pool": 32,
    "image_size": 1024,
    "in_channels": 64,
    "num_classes": 100_000,
    "head_ratio": 1024,
    "conv_kernel": 63,
}
InitName = Literal["paper", "bert"]


@dataclass(frozen=True, kw_only=True)
class SAConfig:
    """One configuration of the SA classifier; defaults are the paper's (Table 2 and its code)."""

    encoding: str = option("quadratic", "a name of sa_conv.nn.registry.ENCODINGS, or 'none' (content only)")
    content: bool = option(False, "add content attention q . k / sqrt(hidden) to the logits")
    attention: AttentionName = option("mhsa", "'mixed': ConvBERT's attention + span-based conv heads")
    window: int = option(7, "composite: relative shifts clipped (or masked) to [-window, window]^2")
    window_mask: bool = option(False, "composite: mask shifts beyond the window instead of clipping")
    key_term: bool = option(
        False, "composite: also the key-dependent term k . w'[-delta] (Chang et al.'s convk)"
    )
    head_ratio: int = option(2, "mixed: heads / head_ratio attention heads and as many conv heads")
    conv_kernel: int = option(3, "mixed: K of the K x K span-based dynamic convolution (ConvBERT: 9 in 1D)")
    layers: int = option(6, "attention blocks")
    heads: int = option(9, "attention heads per layer (each full width)")
    layer_heads: tuple[int, ...] | None = option(None, "heads of each layer, if they differ (pruned models)")
    hidden: int = option(400, "width of the tokens")
    ffn: int = option(512, "width of the feed-forward sublayer")
    pool: int = option(2, "pixel concatenation: pool x pool pixels -> one token")
    image_size: int = option(32, "side of the input images")
    in_channels: int = option(3, "channels of the input images")
    num_classes: int = option(10, "classes of the classifier")
    dropout: float = option(0.1, "hidden-state dropout")
    attn_dropout: float = option(0.1, "dropout on attention probabilities")
    layer_norm_eps: float = option(1e-12, "LayerNorm epsilon (BERT's)")
    init: InitName = option(
        "paper", "paper: PyTorch's defaults, as the paper's BertImage; bert: N(0, init_std)"
    )
    init_std: float = option(0.02, "BERT's initializer range (init='bert')")
    absolute_position: bool = option(
        False, "add a learned absolute position embedding to the tokens (ConvBERT)"
    )
    impl: Impl = option("auto", "the attention computation: auto picks the fastest exact one")

    def __post_init__(self) -> None:
        for name, most in SIZE_BOUNDS.items():  # sizes bounded before anything is built
            value = getattr(self, name)
            if not is_count(value, most):
                raise ValueError(f"{name} must be an integer from 1 to {most:,}, got {quoted(value)}")
        if self.conv_kernel % 2 == 0:
            raise ValueError(f"conv_kernel must be odd, got {self.conv_kernel}")
        if not isinstance(self.window, int) or not 0 <= self.window <= SIZE_BOUNDS["image_size"]:
            raise ValueError(
                f"window must be an integer from 0 to {SIZE_BOUNDS['image_size']}, got {quoted(self.window)}"
            )
        if not 0 < self.init_std <= 10:
            raise ValueError(f"init_std must be in (0, 10], got {quoted(self.init_std)}")
        if self.encoding != "none" and self.encoding not in ENCODINGS:
            raise ValueError(
                f"encoding must be one of {', '.join([*ENCODINGS, 'none'])}, got {quoted(self.encoding)}"
            )
        if self.attention not in ("mhsa", "mixed"):
            raise ValueError(f"attention must be mhsa or mixed, got {quoted(self.attention)}")
        if self.init not in ("paper", "bert"):
            raise ValueError(f"init must be paper or bert, got {quoted(self.init)}")
        if self.encoding == "none" and not self.content and self.attention == "mhsa":
            raise ValueError("encoding='none' needs content=True")
        for name in ("dropout", "attn_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.layer_heads is not None and (
            len(self.layer_heads) != self.layers
            or any(not is_count(h, SIZE_BOUNDS["heads"]) for h in self.layer_heads)
        ):
            raise ValueError(
                f"layer_heads must be {self.layers} positive integers (one per layer), got {self.layer_heads}"
            )
        if self.attention == "mixed" and (self.heads % self.head_ratio or self.hidden % self.heads):
            raise ValueError(
                f"mixed attention needs heads divisible by head_ratio={self.head_ratio} and hidden by heads, "
                f"got heads={self.heads}, hidden={self.hidden}"
            )
        if self.image_size % self.pool:
            raise ValueError(f"image_size={self.image_size} is not divisible by pool={self.pool}")
        self._check_applicable()

    def _check_applicable(self) -> None:
        """An option of another kind of attention, set on this one, is an error (not silently ignored)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        scoped = {
            "window": ("encoding='composite' (the composite model)", self.encoding == "composite"),
            "window_mask": ("encoding='composite' (the composite model)", self.encoding == "composite"),
            "key_term": ("encoding='composite' (the composite model)", self.encoding == "composite"),
            "head_ratio": ("attention='mixed' (the mixed model)", self.attention == "mixed"),
            "conv_kernel": ("attention='mixed' (the mixed model)", self.attention == "mixed"),
            "init_std": ("init='bert'", self.init == "bert"),
        }
        for name, (where, applies) in scoped.items():
            if not applies and getattr(self, name) != defaults[name]:
                raise ValueError(f"{name} is an option of {where} only; this model does not use it")

    @property
    def grid(self) -> int:
        """Side of the token grid."""
        return self.image_size // self.pool

    @property
    def heads_per_layer(self) -> tuple[int, ...]:
        """Attention heads of every layer."""
        return self.layer_heads or (self.heads,) * self.layers

    def to_dict(self) -> dict[str, object]:
        """Plain dict (for hyper-parameters and JSON)."""
        return asdict(self)
