"""ConvBERT's mixed attention (Jiang et al., NeurIPS 2020) on 2D token grids.

The heads are split: ``heads / head_ratio`` ordinary self-attention heads and as many span-based
dynamic convolution heads, each of width ``dim / heads``; their outputs are concatenated.

Span-based dynamic convolution: a K x K depthwise-separable convolution over the input gives
span-aware keys ``Ks``; the kernel of every pixel is ``softmax over the K*K taps of Linear(Ks * Q)``
(one kernel per conv head, shared by its channels); it is applied to separately projected values over
the pixel's K x K neighbourhood (``DynamicConv2d`` with the kernel predicted from ``Ks * Q``).

Kernel: ConvBERT's 1D kernel is 9 tokens wide; the 2D default here is 3 x 3, the same 9 taps
(``SAConfig.conv_kernel`` sets K). Init as ConvBERT's code: BERT's N(0, 0.02) for every linear layer
(applied by the model) and for the key convolutions' weights, their bias zeros.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from sa_conv.nn.lightconv import DynamicConv2d

__all__ = ["MixedAttention2d"]


class MixedAttention2d(nn.Module):
    """Self-attention heads and span-based dynamic convolution heads side by side, on ``(B, H, W, dim)``."""

    def __init__(
        self,
        dim: int,
        heads: int,
        *,
        head_ratio: int = 2,
        kernel_size: int = 3,
        attn_dropout: float = 0.0,
        init_std: float | None = 0.02,
    ) -> None:
        super().__init__()
        if heads <= 0 or head_ratio <= 0 or heads % head_ratio or dim % heads:
            raise ValueError(
                f"mixed attention needs heads divisible by head_ratio and dim by heads, got dim={dim}, "
                f"heads={heads}, head_ratio={head_ratio}"
            )
        self.dim, self.heads = dim, heads
        self.n = heads // head_ratio  # attention heads, and as many conv heads
        self.head_size = dim // heads
        width = self.n * self.head_size
        self.out_dim = 2 * width
        self.query = nn.Linear(dim, width)
        self.key = nn.Linear(dim, width)
        self.value = nn.Linear(dim, width)
        self.attn_dropout = nn.Dropout(attn_dropout)
        # span-aware keys: depthwise K x K then pointwise, one bias (ConvBERT's SeparableConv)
        self.key_depthwise = nn.Conv2d(
            dim, dim, kernel_size, padding=kernel_size // 2, groups=dim, bias=False
        )
        self.key_pointwise = nn.Conv2d(dim, width, 1)
        if init_std is not None:  # ConvBERT's SeparableConv1D init: weights N(0, 0.02^2), the bias zeros
            with torch.no_grad():
                self.key_depthwise.weight.normal_(0.0, init_std)
                self.key_pointwise.weight.normal_(0.0, init_std)
                if self.key_pointwise.bias is not None:  # it has one (bias=True)
                    self.key_pointwise.bias.zero_()
        # values of the conv heads and their dynamic kernels, predicted from Ks * Q
        self.conv_value = nn.Linear(dim, width)
        self.conv = DynamicConv2d(width, self.n, kernel_size)

    encoding = None  # no relative positional encoding (ConvBERT adds absolute positions to the tokens)

    @property
    def input_dependent(self) -> bool:
        """The attention heads are content-based: their probabilities depend on the input."""
        return True

    def _heads(self, t: Tensor) -> Tensor:
        b, h, w, _ = t.shape
        return t.reshape(b, h * w, self.n, self.head_size).transpose(1, 2)  # (B, n, N, hs)

    def probabilities(self, x: Tensor) -> Tensor:
        """Attention probabilities of the self-attention heads ``(B, n, N, N)``."""
        return self._probabilities(self.query(x), x)

    def _probabilities(self, query: Tensor, x: Tensor) -> Tensor:
        q, k = self._heads(query), self._heads(self.key(x))
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.head_size)  # (B, n, N, N)
        return logits.to(torch.promote_types(logits.dtype, torch.float32)).softmax(-1)  # float32 softmax

    def span_kernel_context(self, x: Tensor, query: Tensor | None = None) -> Tensor:
        """``Ks * Q`` in ``(B, width, H, W)``: what the dynamic kernels are predicted from."""
        query = self.query(x) if query is None else query  # (B, H, W, width)
        ks = self.key_pointwise(self.key_depthwise(x.permute(0, 3, 1, 2)))  # (B, width, H, W)
        return ks * query.permute(0, 3, 1, 2)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, H, W, dim)`` -> ``(B, H, W, out_dim)``."""
        if x.ndim != 4 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be (B, H, W, {self.dim}), got shape {tuple(x.shape)}")
        b, h, w, _ = x.shape
        query = self.query(x)  # (B, H, W, width): the attention heads' queries and the kernels' context
        probs = self._probabilities(query, x)  # (B, n, N, N)
        attended = self.attn_dropout(probs) @ self._heads(self.value(x))  # (B, n, N, hs)
        attended = attended.transpose(1, 2).reshape(b, h, w, -1)  # (B, H, W, width)
        values = self.conv_value(x).permute(0, 3, 1, 2)  # (B, width, H, W)
        convolved = self.conv(values, context=self.span_kernel_context(x, query)).permute(0, 2, 3, 1)
        return torch.cat([attended, convolved], dim=-1)  # (B, H, W, 2 * width)
