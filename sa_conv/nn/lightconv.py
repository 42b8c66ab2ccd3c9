"""Lightweight and dynamic convolutions (Wu et al., ICLR 2019) in 2D, written as convolutions.

Both take ``(B, C, H, W)`` and use K x K taps whose weights are softmax-normalized over the taps and
shared by a group of ``C / heads`` channels (one group per head). ``LightweightConv2d`` learns one
kernel per head; ``DynamicConv2d`` predicts it at every pixel from that pixel's features.

With ``renormalize=True`` the output at a pixel is divided by the kernel mass that falls inside the
image, i.e. the kernel is re-normalized over the in-image taps, exactly like a softmax restricted to
the keys that exist. That is what makes local attention equal these convolutions at the border too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DynamicConv2d", "LightweightConv2d"]


class _HeadConv(nn.Module):
    """What both convolutions share: K x K taps, one kernel per head of ``channels / heads`` channels."""

    def __init__(self, channels: int, heads: int, kernel_size: int, renormalize: bool) -> None:
        super().__init__()
        if heads <= 0 or channels % heads:
            raise ValueError(f"channels={channels} must be a positive multiple of heads={heads}")
        if kernel_size <= 0 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd and positive, got {kernel_size}")
        self.channels, self.heads, self.kernel_size, self.renormalize = (
            channels,
            heads,
            kernel_size,
            renormalize,
        )


class LightweightConv2d(_HeadConv):
    """Depthwise K x K convolution with a softmax-normalized kernel per head of ``C / heads`` channels."""

    def __init__(self, channels: int, heads: int, kernel_size: int = 3, *, renormalize: bool = False) -> None:
        super().__init__(channels, heads, kernel_size, renormalize)
        self.weight = nn.Parameter(torch.randn(heads, kernel_size, kernel_size) * 0.02)  # kernel logits

    def kernel(self) -> Tensor:
        """Softmax-normalized kernels ``(heads, K, K)``."""
        return self.weight.flatten(1).softmax(-1).view_as(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, C, H, W)``."""
        pad = self.kernel_size // 2
        per_channel = self.kernel().repeat_interleave(self.channels // self.heads, dim=0)  # (C, K, K)
        weight = per_channel.unsqueeze(1).to(x.dtype)  # (C, 1, K, K): depthwise
        y = F.conv2d(x, weight, padding=pad, groups=self.channels)
        if self.renormalize:  # divide by the kernel mass over the taps that are inside the image
            ones = torch.ones(1, self.channels, *x.shape[-2:], device=x.device, dtype=x.dtype)
            y = y / F.conv2d(ones, weight, padding=pad, groups=self.channels)
        return y


class DynamicConv2d(_HeadConv):
    """K x K convolution whose per-head kernel is predicted from each pixel: softmax(Linear(features)).

    ``forward(x, context=None)``: the kernel at a pixel comes from ``context`` at that pixel
    (``(B, in_features, H, W)``, default ``x``) and is applied to ``x``'s K x K neighbourhood.
    """

    def __init__(
        self,
        channels: int,
        heads: int,
        kernel_size: int = 3,
        *,
        in_features: int | None = None,
        renormalize: bool = False,
    ) -> None:
        super().__init__(channels, heads, kernel_size, renormalize)
        self.predictor = nn.Linear(in_features or channels, heads * kernel_size * kernel_size)

    def kernel(self, context: Tensor) -> Tensor:
        """Kernels ``(B, heads, K*K, H, W)`` predicted from ``context`` ``(B, F, H, W)``."""
        b, _, h, w = context.shape
        logits = self.predictor(context.permute(0, 2, 3, 1))  # (B, H, W, heads * K*K)
        logits = logits.view(b, h, w, self.heads, self.kernel_size**2).permute(0, 3, 4, 1, 2)
        return logits.softmax(dim=2)  # softmax over the taps

    def forward(self, x: Tensor, context: Tensor | None = None) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, C, H, W)``."""
        b, c, h, w = x.shape
        k, pad = self.kernel_size, self.kernel_size // 2
        kernel = self.kernel(x if context is None else context).to(x.dtype)  # (B, heads, K*K, H, W)
        patches = F.unfold(x, k, padding=pad).view(b, self.heads, c // self.heads, k * k, h, w)
        y = torch.einsum("bngtyx,bntyx->bngyx", patches, kernel)  # (B, heads, C/heads, H, W)
        if self.renormalize:
            ones = F.unfold(torch.ones(1, 1, h, w, device=x.device, dtype=x.dtype), k, padding=pad)
            inside = ones.view(1, 1, k * k, h, w)
            y = y / (kernel * inside).sum(2).unsqueeze(2)
        return y.reshape(b, c, h, w)
