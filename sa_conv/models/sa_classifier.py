"""The paper's fully attentional CIFAR classifier: pixel concatenation, post-LN BERT blocks, mean pool."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sa_conv.attention import Impl, MultiHeadSelfAttention2d
from sa_conv.encodings import (
    CompositeRelativeEncoding,
    GaussianEncoding,
    LearnedRelativeEncoding,
    PositionalEncoding,
    QuadraticEncoding,
)
from sa_conv.mixed import MixedAttention2d

__all__ = ["SABlock", "SAClassifier", "SAConfig"]

EncodingName = Literal["quadratic", "gaussian", "learned", "composite", "none"]
AttentionName = Literal["mhsa", "mixed"]


@dataclass(frozen=True, kw_only=True)
class SAConfig:
    """One configuration of the SA classifier; defaults are the paper's (Table 2)."""

    encoding: EncodingName = "quadratic"
    content: bool = False
    attention: AttentionName = "mhsa"  # "mixed": ConvBERT's attention + span-based conv heads
    window: int = 7  # composite: relative shifts clipped (or masked) to [-window, window]^2
    window_mask: bool = False  # composite: mask shifts beyond the window instead of clipping
    head_ratio: int = 2  # mixed: heads / head_ratio attention heads and as many conv heads
    conv_kernel: int = 3  # mixed: K of the K x K span-based dynamic convolution
    layers: int = 6
    heads: int = 9
    hidden: int = 400
    ffn: int = 512
    pool: int = 2  # pixel concatenation: pool x pool pixels -> one token
    image_size: int = 32
    in_channels: int = 3
    num_classes: int = 10
    dropout: float = 0.1  # hidden-state dropout
    attn_dropout: float = 0.1  # dropout on attention probabilities
    layer_norm_eps: float = 1e-12
    init_std: float = 0.02  # BERT initializer range
    impl: Impl = "auto"

    def __post_init__(self) -> None:
        for name in ("layers", "heads", "hidden", "ffn", "pool", "image_size", "num_classes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.encoding not in ("quadratic", "gaussian", "learned", "composite", "none"):
            raise ValueError(
                f"encoding must be quadratic, gaussian, learned, composite or none, got {self.encoding!r}"
            )
        if self.attention not in ("mhsa", "mixed"):
            raise ValueError(f"attention must be mhsa or mixed, got {self.attention!r}")
        if self.encoding == "none" and not self.content:
            raise ValueError("encoding='none' needs content=True")
        if self.attention == "mixed" and (self.heads % self.head_ratio or self.hidden % self.heads):
            raise ValueError(
                f"mixed attention needs heads divisible by head_ratio={self.head_ratio} and hidden by heads, "
                f"got heads={self.heads}, hidden={self.hidden}"
            )
        if self.image_size % self.pool:
            raise ValueError(f"image_size={self.image_size} is not divisible by pool={self.pool}")

    @property
    def grid(self) -> int:
        """Side of the token grid."""
        return self.image_size // self.pool

    def to_dict(self) -> dict:
        """Plain dict (for hyper-parameters and JSON)."""
        return asdict(self)


def make_encoding(config: SAConfig) -> PositionalEncoding | None:
    """The positional encoding of one layer, or None for content-only attention."""
    if config.encoding == "quadratic":
        return QuadraticEncoding(config.heads)
    if config.encoding == "gaussian":
        return GaussianEncoding(config.heads)
    if config.encoding == "learned":
        return LearnedRelativeEncoding(config.heads, config.hidden, max_size=config.grid)
    if config.encoding == "composite":
        return CompositeRelativeEncoding(
            config.heads, config.hidden, window=config.window, mask=config.window_mask
        )
    return None


class SABlock(nn.Module):
    """Post-LayerNorm BERT block: attention sublayer, then the feed-forward sublayer."""

    def __init__(self, config: SAConfig) -> None:
        super().__init__()
        d = config.hidden
        self.attention: MultiHeadSelfAttention2d | MixedAttention2d
        if config.attention == "mixed":
            self.attention = MixedAttention2d(
                d,
                config.heads,
                head_ratio=config.head_ratio,
                kernel_size=config.conv_kernel,
                attn_dropout=config.attn_dropout,
            )
        else:
            self.attention = MultiHeadSelfAttention2d(
                d,
                config.heads,
                encoding=make_encoding(config),
                content=config.content,
                attn_dropout=config.attn_dropout,
                impl=config.impl,
            )
        self.attn_dense = nn.Linear(self.attention.out_dim, d)  # BertSelfOutput.dense
        self.attn_norm = nn.LayerNorm(d, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(d, config.ffn)
        self.fc2 = nn.Linear(config.ffn, d)
        self.ffn_norm = nn.LayerNorm(d, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, return_attention: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """``x`` ``(B, H, W, D)`` -> ``(B, H, W, D)`` [, attention probabilities]."""
        out = self.attention(x, return_attention=return_attention)
        a, probs = out if return_attention else (out, None)
        x = self.attn_norm(x + self.dropout(self.attn_dense(a)))  # (B, H, W, D)
        f = self.fc2(F.gelu(self.fc1(x)))  # erf-GELU, (B, H, W, D)
        x = self.ffn_norm(x + self.dropout(f))
        return (x, probs) if return_attention else x


class SAClassifier(nn.Module):
    """Images ``(B, 3, 32, 32)`` -> logits ``(B, classes)`` through a stack of 2D SA blocks."""

    def __init__(self, config: SAConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Linear(config.in_channels * config.pool**2, config.hidden)
        self.blocks = nn.ModuleList(SABlock(config) for _ in range(config.layers))
        self.head = nn.Linear(config.hidden, config.num_classes)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=self.config.init_std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def tokens(self, images: Tensor) -> Tensor:
        """2x2 pixel concatenation (invertible pooling) and embedding: ``(B, h, w, hidden)``."""
        c, s = self.config.in_channels, self.config.image_size
        if images.ndim != 4 or images.shape[1] != c or images.shape[-2:] != (s, s):
            raise ValueError(f"images must be (B, {c}, {s}, {s}), got shape {tuple(images.shape)}")
        x = F.pixel_unshuffle(images, self.config.pool)  # (B, C * p * p, h, w)
        return self.embed(x.permute(0, 2, 3, 1))  # (B, h, w, hidden)

    def forward(self, images: Tensor) -> Tensor:
        x = self.tokens(images)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=(1, 2)))  # (B, classes)

    @torch.no_grad()
    def attention_maps(self, images: Tensor) -> list[Tensor]:
        """Attention probabilities of every layer, ``(B|1, heads, N, N)`` each, as the layer returns them."""
        maps = []
        x = self.tokens(images)
        for block in self.blocks:
            x, probs = block(x, return_attention=True)
            maps.append(probs)
        return maps

    def attention_layers(self) -> list[MultiHeadSelfAttention2d | MixedAttention2d]:
        """The attention layer of every block, in order."""
        return [block.attention for block in self.blocks]
