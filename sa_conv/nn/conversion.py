"""Convolution <-> attention. Theorem 1: any Conv1d/Conv2d as one MHSA layer with quadratic encoding
(``conv_to_attention``, a whole network at once with ``convert_network``); the converse for a trained
layer of Gaussian heads (``attention_to_conv``: each head one tap at its rounded centre, with
``conv_likeness`` saying how well that holds); and Chang et al.'s reading: relative-position attention
without content as a lightweight / dynamic convolution (``local_attention_as_conv``).

One head per kernel tap: head h = (ky, kx) attends (alpha large) to the pixel at shift
``Delta_h = (ky * dy - cy, kx * dx - cx)`` from its query, its block of the output projection is the
kernel slice ``W[:, :, ky, kx]``, and the conv bias is the projection bias. Padding: pad the input
exactly as the conv does (any padding mode), attend on the padded grid, and read the output at the
query pixels ``o * stride + (cy, cx)`` (crop and subsample). Groups: block-diagonal kernel slices. A
1D conv is the same layer on a grid of height 1.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sa_conv.nn.attention import Impl, MultiHeadSelfAttention2d
from sa_conv.nn.encodings import CompositeRelativeEncoding, QuadraticEncoding, interior_queries
from sa_conv.nn.lightconv import DynamicConv2d, LightweightConv2d

__all__ = [
    "ConvAsAttention",
    "ConvInPlaceOfAttention",
    "HeadsAsConv",
    "attention_to_conv",
    "conv_likeness",
    "conv_to_attention",
    "convert_network",
    "dense_kernel",
    "gaussian_layer",
    "local_attention_as_conv",
]


def dense_kernel(conv: nn.Conv1d | nn.Conv2d) -> Tensor:
    """The conv's kernel as ``(out, in, Kh, Kw)`` with groups made block-diagonal (Kh = 1 in 1D)."""
    weight = conv.weight if conv.weight.ndim == 4 else conv.weight.unsqueeze(2)  # (O, I/g, Kh, Kw)
    if conv.groups == 1:
        return weight
    out_g, in_g = conv.out_channels // conv.groups, conv.in_channels // conv.groups
    blocks = [
        F.pad(weight[g * out_g : (g + 1) * out_g], (0, 0, 0, 0, g * in_g, conv.in_channels - (g + 1) * in_g))
        for g in range(conv.groups)
    ]
    return torch.cat(blocks, dim=0)  # (O, I, Kh, Kw)


class ConvAsAttention(nn.Module):
    """A convolution computed by the library's attention layer; same input and output as the conv."""

    def __init__(
        self,
        attention: MultiHeadSelfAttention2d,
        *,
        dims: int,
        in_channels: int,
        padding: tuple[int, ...],
        padding_mode: str,
        stride: tuple[int, int],
        offset: tuple[int, int],
        reach: tuple[int, int],
    ) -> None:
        super().__init__()
        self.attention = attention
        self.dims, self.in_channels = dims, in_channels
        self.padding = padding  # F.pad order, last dim first
        self.padding_mode = "constant" if padding_mode == "zeros" else padding_mode
        self.stride, self.offset, self.reach = stride, offset, reach

    @property
    def centres(self) -> Tensor:
        """The heads' attention centres ``(heads, 2)`` as (dy, dx): the kernel taps' shifts."""
        encoding = self.attention.encoding
        assert isinstance(encoding, QuadraticEncoding), "conv_to_attention builds a quadratic encoding"
        return encoding.centres.detach()

    def forward(self, x: Tensor) -> Tensor:
        """``(N, C, L)`` or ``(N, C, H, W)`` -> the conv's output, through self-attention."""
        if x.ndim != self.dims + 2 or x.shape[1] != self.in_channels:
            shape = "(N, C, L)" if self.dims == 1 else "(N, C, H, W)"
            raise ValueError(f"x must be {shape} with C={self.in_channels}, got shape {tuple(x.shape)}")
        if any(self.padding):
            x = F.pad(x, self.padding, mode=self.padding_mode)
        if self.dims == 1:
            x = x.unsqueeze(2)  # (N, C, 1, L): a grid of height 1
        y = self.attention(x.permute(0, 2, 3, 1))  # (N, Hp, Wp, out)
        (sy, sx), (cy, cx), (ry, rx) = self.stride, self.offset, self.reach
        hp, wp = y.shape[1:3]
        if hp <= ry or wp <= rx:
            raise ValueError(f"input too small for the kernel: padded size {(hp, wp)[2 - self.dims :]}")
        y = y[:, cy : hp - ry + cy : sy, cx : wp - rx + cx : sx]  # queries o * stride + offset
        y = y.permute(0, 3, 1, 2)  # (N, out, Ho, Wo)
        return y.squeeze(2) if self.dims == 1 else y


def conv_to_attention(
    conv: nn.Conv1d | nn.Conv2d,
    *,
    alpha: float = 46.0,
    max_heads: int | None = None,
    impl: Impl = "auto",
) -> ConvAsAttention:
    """Build the multi-head self-attention layer that computes ``conv`` (Theorem 1)."""
    if type(conv) not in (nn.Conv1d, nn.Conv2d):
        raise TypeError(f"conv_to_attention takes nn.Conv1d or nn.Conv2d, got {type(conv).__name__}")
    if not conv.weight.is_floating_point():
        raise TypeError(f"conv weights must be floating point, got {conv.weight.dtype}")
    if not 0 < alpha < math.inf:
        raise ValueError(f"alpha must be positive and finite, got {alpha}")
    dims = 1 if isinstance(conv, nn.Conv1d) else 2
    pad1 = (1,) * (2 - dims)  # the unit height axis of a 1D conv
    kh, kw = pad1 + tuple(conv.kernel_size)
    sy, sx = pad1 + tuple(conv.stride)
    dy, dx = pad1 + tuple(conv.dilation)
    for name, values in (("kernel_size", (kh, kw)), ("stride", (sy, sx)), ("dilation", (dy, dx))):
        if min(values) < 1:
            raise ValueError(f"the conv's {name} must be >= 1, got {getattr(conv, name)}")
    heads = kh * kw
    if max_heads is not None and heads > max_heads:
        raise ValueError(f"kernel {kh}x{kw} needs {heads} heads, more than max_heads={max_heads}")

    reach_y, reach_x = dy * (kh - 1), dx * (kw - 1)  # kernel extent - 1
    cy, cx = reach_y // 2, reach_x // 2  # query offset inside the receptive field
    ky, kx = torch.meshgrid(torch.arange(kh), torch.arange(kw), indexing="ij")
    centres = torch.stack([ky.flatten() * dy - cy, kx.flatten() * dx - cx], dim=-1).float()  # (heads, 2)

    encoding = QuadraticEncoding(heads).set_(centres, alpha)
    attention = MultiHeadSelfAttention2d(
        conv.in_channels,
        heads,
        encoding=encoding,
        out_dim=conv.out_channels,
        bias=conv.bias is not None,
        impl=impl,
    ).to(device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        kernel = dense_kernel(conv)  # (O, I, Kh, Kw)
        # head h = (ky, kx) reads block [h * I, (h + 1) * I) of the projection's input
        attention.proj.weight.copy_(
            kernel.permute(0, 2, 3, 1).reshape(conv.out_channels, heads * conv.in_channels)
        )
        if conv.bias is not None:
            attention.proj.bias.copy_(conv.bias)
    return ConvAsAttention(
        attention,
        dims=dims,
        in_channels=conv.in_channels,
        # the conv's own F.pad amounts (what its forward pads with; torch keeps them in a private field
        # only, computed from padding, kernel and dilation, the string forms included)
        padding=tuple(conv._reversed_padding_repeated_twice),
        padding_mode=conv.padding_mode,
        stride=(sy, sx),
        offset=(cy, cx),
        reach=(reach_y, reach_x),
    )


def convert_network(model: nn.Module, *, alpha: float = 46.0, impl: Impl = "auto") -> tuple[nn.Module, int]:
    """A copy of ``model`` with every ``nn.Conv1d`` / ``nn.Conv2d`` replaced by its attention twin, and the
    number of convolutions replaced."""
    twin = copy.deepcopy(model)
    names = [name for name, module in twin.named_modules() if type(module) in (nn.Conv1d, nn.Conv2d)]
    for name in names:
        parent_name, _, attr = name.rpartition(".")
        parent = twin.get_submodule(parent_name) if parent_name else twin
        setattr(parent, attr, conv_to_attention(getattr(parent, attr), alpha=alpha, impl=impl))
    return twin, len(names)


def gaussian_layer(layer: nn.Module) -> MultiHeadSelfAttention2d:
    """``layer`` as an attention layer of Gaussian heads without content (what ``attention_to_conv`` and
    ``conv_likeness`` take); ``ValueError`` naming what it is otherwise (mixed, content, other encodings)."""
    if not isinstance(layer, MultiHeadSelfAttention2d):
        raise ValueError(
            f"attention_to_conv needs Gaussian heads without content, got {type(layer).__name__}"
        )
    _gaussian_heads(layer)
    return layer


def _gaussian_heads(layer: MultiHeadSelfAttention2d) -> Tensor:
    """The centres ``(heads, 2)`` of a positional layer of Gaussian heads (quadratic or generalized)."""
    encoding = layer.encoding  # None for content-only attention
    gaussians = encoding.head_gaussians() if encoding is not None else None
    if gaussians is None or layer.input_dependent:
        kind = type(encoding).__name__ if encoding is not None else type(layer).__name__
        raise ValueError(f"attention_to_conv needs Gaussian heads without content, got {kind}")
    return gaussians[0]


def attention_to_conv(layer: MultiHeadSelfAttention2d) -> nn.Conv2d:
    """The convolution a layer of Gaussian heads computes when every head is sharp: head h is one tap at
    its centre rounded to the nearest shift, its kernel slice the head's ``(out, dim)`` block of the output
    projection (heads sharing a shift add up), the bias the projection's. Zero padding keeps the grid size.

    Replicate padding: at the border, a sharp head's mass falls on the in-image pixel nearest its target,
    the replicated edge pixel. So the conversion is exact (everywhere) where every head puts all its mass
    on one pixel (``conv_to_attention``'s layers, alpha >= 25); ``conv_likeness`` measures how far a
    trained layer is from that.
    """
    taps = _gaussian_heads(layer).round().long().cpu()  # (heads, 2) as (dy, dx)
    ry, rx = (int(v) for v in taps.abs().amax(0))
    proj = layer.proj
    kernel = (2 * ry + 1, 2 * rx + 1)
    conv = nn.Conv2d(
        layer.dim,
        layer.out_dim,
        kernel,
        padding=(ry, rx),
        padding_mode="replicate",
        bias=proj.bias is not None,
    )
    conv = conv.to(proj.weight.device, proj.weight.dtype)
    with torch.no_grad():
        weight = torch.zeros_like(conv.weight)  # (O, D, Ky, Kx)
        d = layer.dim
        for h, (dy, dx) in enumerate(taps.tolist()):
            weight[:, :, ry + dy, rx + dx] += proj.weight[:, h * d : (h + 1) * d]
        conv.weight.copy_(weight)
        if proj.bias is not None and conv.bias is not None:
            conv.bias.copy_(proj.bias)
    return conv


@torch.no_grad()
def conv_likeness(layer: MultiHeadSelfAttention2d, height: int, width: int) -> Tensor:
    """How much each head is one tap of a convolution: its mass on its single most attended pixel,
    averaged over the queries whose every head's tap lies inside the grid. ``(heads,)``, in (0, 1]."""
    taps = _gaussian_heads(layer).round().abs().amax().item()
    margin = min(int(taps), (min(height, width) - 1) // 2)
    x = torch.zeros(
        1, height, width, layer.dim, device=layer.proj.weight.device, dtype=layer.proj.weight.dtype
    )
    probs = layer.probabilities(x)[0]  # (heads, N, N): input-independent
    queries = interior_queries(height, width, margin).to(probs.device)
    return probs[:, queries].amax(-1).double().mean(-1).float()  # (heads,)


class ConvInPlaceOfAttention(nn.Module):
    """A convolution standing in for an attention layer of an SA model: channels-last in and out."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.conv, self.out_dim = conv, conv.out_channels

    input_dependent = False
    encoding = None

    def forward(self, x: Tensor) -> Tensor:
        """``(B, H, W, dim)`` -> ``(B, H, W, out)``."""
        return self.conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)

    def probabilities(self, x: Tensor) -> Tensor:
        """A convolution attends to nothing: no probabilities to give."""
        raise ValueError("a convolution has no attention probabilities")


class HeadsAsConv(nn.Module):
    """A local attention layer's convolution twin: tile the input once per head (full-width heads),
    convolve (one kernel per head), then the attention layer's own output projection."""

    def __init__(self, conv: LightweightConv2d | DynamicConv2d, proj: nn.Linear, heads: int) -> None:
        super().__init__()
        self.conv, self.proj, self.heads = conv, proj, heads

    def forward(self, x: Tensor) -> Tensor:
        """``(B, H, W, D)`` -> ``(B, H, W, out)``, like the attention layer."""
        chw = x.permute(0, 3, 1, 2)  # (B, D, H, W)
        tiled = chw.repeat(1, self.heads, 1, 1)  # (B, heads * D, H, W): head h reads all D channels
        # a dynamic conv predicts each pixel's kernels from the pixel's own (untiled) features
        y = self.conv(tiled, context=chw) if isinstance(self.conv, DynamicConv2d) else self.conv(tiled)
        return self.proj(y.permute(0, 2, 3, 1))  # (B, H, W, out)


def local_attention_as_conv(
    layer: MultiHeadSelfAttention2d, *, size: tuple[int, int] | None = None, renormalize: bool = True
) -> HeadsAsConv:
    """The convolution that a composite attention layer without content attention computes (Chang et al.).

    Masked to a K x K window (``mask=True``): kernel K = 2 window + 1. Clipped (``mask=False``): every key
    of an ``size = (H, W)`` grid is attended, shifts beyond the window taking the edge entry, so the kernel
    covers the whole grid (K = 2 max(H, W) - 1) with the edge entries repeated outward.
    Bias term only: ``LightweightConv2d`` with kernel ``softmax(b_h[clip(t)])``. With the query term:
    ``DynamicConv2d`` whose kernel logits are ``b_h[clip(t)] + q_h(x) . w[clip(t)] / sqrt(D)`` (affine in
    ``x``). Exact everywhere with ``renormalize=True``; without it, only where the window lies inside
    the image. Content attention (``q . k``) or a key term has no such convolution: the logit then
    depends on the key pixel's features, a convolution's weights only on the shift (and the query pixel).
    """
    enc = layer.encoding
    if not isinstance(enc, CompositeRelativeEncoding):
        raise ValueError("local_attention_as_conv needs a CompositeRelativeEncoding")
    if layer.content or enc.key_dependent:
        raise ValueError(
            "no convolution computes attention with content or a key term: "
            "the logit depends on the key's features"
        )
    if not enc.mask and size is None:
        raise ValueError("a clipped (mask=False) composite layer attends to the whole grid: pass size=(H, W)")
    heads, d, w = layer.heads, layer.dim, enc.window
    k = 2 * w + 1 if enc.mask or size is None else 2 * max(size) - 1  # (size is given unless masked)
    r = k // 2
    taps = torch.arange(-r, r + 1).clamp(-w, w) + w  # tap offset -> clipped table row / column
    index = (taps[:, None] * (2 * w + 1) + taps[None, :]).flatten()  # (K*K,) row-major like unfold
    bias = enc.bias.flatten(1)[:, index] if enc.bias is not None else None  # (heads, K*K)
    conv: LightweightConv2d | DynamicConv2d
    if enc.rel is None:
        assert bias is not None, "a composite encoding without query terms has a positional table"
        conv = LightweightConv2d(heads * d, heads, k, renormalize=renormalize)
        with torch.no_grad():
            conv.weight.copy_(bias.view(heads, k, k))
    else:
        conv = DynamicConv2d(heads * d, heads, k, in_features=d, renormalize=renormalize)
        query = layer.query
        assert query is not None and query.bias is not None, "a query-dependent layer has its queries"
        wq = query.weight.view(heads, d, d)  # (heads, D_q, D_in)
        bq = query.bias.view(heads, d)  # (heads, D_q)
        rel = enc.rel.flatten(0, 1)[index]  # (K*K, D_q): w[clip(t)]
        with torch.no_grad():
            # predictor[h, t] = w_t^T W_q_h / sqrt(D), bias w_t . b_q_h / sqrt(D) (+ b_h[t])
            conv.predictor.weight.copy_(
                torch.einsum("tq,hqi->hti", rel, wq).reshape(heads * k * k, d) / math.sqrt(d)
            )
            predictor_bias = (bq @ rel.T) / math.sqrt(d)  # (heads, K*K)
            if bias is not None:
                predictor_bias = predictor_bias + bias
            conv.predictor.bias.copy_(predictor_bias.reshape(heads * k * k))
    return HeadsAsConv(conv, layer.proj, heads).to(layer.proj.weight.device)
