"""The paper's fully attentional CIFAR classifier: pixel concatenation, post-LN BERT blocks, mean pool."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sa_conv.models.base import Backbone
from sa_conv.nn.attention import Impl, MultiHeadSelfAttention2d
from sa_conv.nn.encodings import ENCODINGS, EncodingLayer, PositionalEncoding
from sa_conv.nn.mixed import MixedAttention2d
from sa_conv.utils.config import is_count, option
from sa_conv.utils.quote import quoted

__all__ = ["SABlock", "SAClassifier", "SAConfig"]

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

    encoding: str = option("quadratic", "a name of sa_conv.nn.encodings.ENCODINGS, or 'none' (content only)")
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

    def to_dict(self) -> dict:
        """Plain dict (for hyper-parameters and JSON)."""
        return asdict(self)


def make_encoding(config: SAConfig, heads: int) -> PositionalEncoding | None:
    """The positional encoding of one layer with ``heads`` heads, or None for content-only attention."""
    if config.encoding == "none":
        return None
    layer = EncodingLayer(
        heads=heads,
        dim=config.hidden,
        grid=config.grid,
        init_std=config.init_std if config.init == "bert" else None,
        window=config.window,
        window_mask=config.window_mask,
        key_term=config.key_term,
    )
    return ENCODINGS[config.encoding].build(layer)


class SABlock(nn.Module):
    """Post-LayerNorm BERT block: attention sublayer, then the feed-forward sublayer."""

    def __init__(self, config: SAConfig, heads: int) -> None:
        super().__init__()
        d = config.hidden
        self.attention: MultiHeadSelfAttention2d | MixedAttention2d
        if config.attention == "mixed":
            self.attention = MixedAttention2d(
                d,
                heads,
                head_ratio=config.head_ratio,
                kernel_size=config.conv_kernel,
                attn_dropout=config.attn_dropout,
                init_std=config.init_std if config.init == "bert" else None,
            )
        else:
            self.attention = MultiHeadSelfAttention2d(
                d,
                heads,
                encoding=make_encoding(config, heads),
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

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(B, H, W, D)`` -> ``(B, H, W, D)``."""
        a = self.attention(x)  # (B, H, W, out_dim)
        x = self.attn_norm(x + self.dropout(self.attn_dense(a)))  # (B, H, W, D)
        f = self.fc2(F.gelu(self.fc1(x)))  # erf-GELU, (B, H, W, D)
        return self.ffn_norm(x + self.dropout(f))


class SAClassifier(Backbone):
    """Images ``(B, 3, 32, 32)`` -> logits ``(B, classes)`` through a stack of 2D SA blocks.

    Init ``paper`` (the default) keeps PyTorch's default init of every layer, as the paper's
    ``BertImage`` does (it never applies BERT's init); the encodings init as the paper's code (see
    each class). Init ``bert`` draws every linear weight from N(0, init_std^2) with zero biases (and
    the learned tables from the same), as BERT, ConvBERT and Chang et al.'s code do.
    """

    has_attention = True

    def __init__(self, config: SAConfig) -> None:
        super().__init__()
        self.config = config
        g = config.grid
        self.embed = nn.Linear(config.in_channels * config.pool**2, config.hidden)
        self.position = nn.Parameter(torch.empty(g, g, config.hidden)) if config.absolute_position else None
        self.blocks = nn.ModuleList(SABlock(config, heads) for heads in config.heads_per_layer)
        self.head = nn.Linear(config.hidden, config.num_classes)
        bert = config.init == "bert"
        if bert:
            self.apply(self._bert_init)
        if self.position is not None:  # an nn.Embedding: N(0, 1), or BERT's N(0, init_std^2)
            nn.init.normal_(self.position, std=config.init_std if bert else 1.0)

    def _bert_init(self, module: nn.Module) -> None:
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
        x = self.embed(x.permute(0, 2, 3, 1))  # (B, h, w, hidden)
        return x if self.position is None else x + self.position

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
        for block in self.sa_blocks():
            maps.append(block.attention.probabilities(x))  # what this layer attends to, given its input
            x = block(x)
        return maps

    def sa_blocks(self) -> list[SABlock]:
        """The blocks, in order (``self.blocks`` as the type checker cannot see it: a module list)."""
        return [block for block in self.blocks if isinstance(block, SABlock)]

    def attention_layers(self) -> list[MultiHeadSelfAttention2d | MixedAttention2d]:
        """The attention layer of every block, in order."""
        return [block.attention for block in self.sa_blocks()]

    @property
    def input_dependent(self) -> bool:
        """Whether some layer's attention depends on the image (content, a query term, mixed attention)."""
        return any(layer.input_dependent for layer in self.attention_layers())

    def encodings(self) -> list[PositionalEncoding | None]:
        """The positional encoding of every layer (None for content-only or mixed attention)."""
        return [layer.encoding for layer in self.attention_layers()]

    def no_weight_decay(self) -> set[str]:
        """Names of the parameters the paper's code exempts from weight decay (centres and spreads)."""
        names: set[str] = set()
        for i, encoding in enumerate(self.encodings()):
            if encoding is not None and not encoding.weight_decay:
                prefix = f"blocks.{i}.attention.encoding."
                names.update(prefix + name for name, _ in encoding.named_parameters())
        return names
