"""The paper's fully attentional CIFAR classifier: pixel concatenation, post-LN BERT blocks, mean pool."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sa_conv.models.base import Backbone
from sa_conv.models.sa_config import SAConfig
from sa_conv.nn.attention import MultiHeadSelfAttention2d
from sa_conv.nn.encodings import ENCODINGS, EncodingLayer, PositionalEncoding
from sa_conv.nn.mixed import MixedAttention2d

__all__ = ["SABlock", "SAClassifier", "SAConfig"]


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
