"""Content attention one image at a time, so that its ``(heads, N, N)`` tile stays in cache.

Dense content attention makes three ``(B, heads, N, N)`` tensors (logits, probabilities, their gradient)
and passes over each several times: at the ``small`` scale every one is 236 MB, far beyond a CPU's
caches, so the dense path spends its time streaming memory. This kernel walks the batch one image at a
time: the image's logits ``scale q k^T + bias`` are one fused product, the softmax is written straight
into the probabilities kept for backward, and the mixing with the values is one product of every head's
probabilities, stacked, with the same ``(N, D)`` tokens (the values are the tokens themselves), copied
into the heads' side-by-side layout that the output projection takes.
Backward walks the batch again: the probabilities' gradient, the softmax backward, and the four
gradients of the image, each tile read while it is still in cache; the gradients of the queries and keys
are made head-major, ``(B, heads, N, D)``, so that every product writes a contiguous block (a product
into a strided block runs one small product per head). Same products and FLOPs as the dense
path; no attention dropout (a dropped tensor would have to be kept per image: the dense path does that).

Precision: the logits, the softmax and its backward are in float32 (float64 for float64 inputs), as in
the dense path under any autocast; the mixing with the values and its gradients run in the product
dtype (autocast's when it is on), as ``probabilities @ values`` does under autocast.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from sa_conv.nn.autocast import autocast_dtype, no_autocast

__all__ = ["tiled_content_attention"]


class _TiledContentAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, q: Tensor, k: Tensor, x: Tensor, bias: Tensor | None, scale: float, keep: bool
    ) -> Tensor:
        # q, k (B, N, heads, D) in the logit dtype; x (B, N, D); bias (1|B, heads, N, N) or None
        b, n, heads, d = q.shape
        dtype = autocast_dtype(x.device, x.dtype)  # the mixing's product dtype
        xc = x.to(dtype)
        probs = q.new_empty(b if keep else 1, heads, n, n)  # (B|1, heads, N, N): kept for backward
        out = torch.empty(b, n, heads, d, dtype=dtype, device=x.device)  # (B, N, heads, D)
        tile = _Tiles(q, heads, n, d, dtype)  # one image's buffers, reused: no allocation per image
        mixed = torch.empty(heads * n, d, dtype=dtype, device=x.device)  # one image's heads, stacked
        with no_autocast(x.device):  # every dtype is chosen here
            for i in range(b):
                p, logits = probs[i if keep else 0], tile.logits  # (heads, N, N)
                qi, kti = q[i].transpose(0, 1), k[i].permute(1, 2, 0)  # (heads, N, D), (heads, D, N)
                if bias is None:
                    torch.baddbmm(logits, qi, kti, beta=0, alpha=scale, out=logits)
                else:
                    torch.baddbmm(bias[i if bias.shape[0] > 1 else 0], qi, kti, alpha=scale, out=logits)
                torch.softmax(logits, -1, out=p)
                # every head mixes the same tokens: one product for all of them, (heads * N, D)
                torch.mm(tile.cast(p).view(heads * n, n), xc[i], out=mixed)
                out[i].copy_(mixed.view(heads, n, d).transpose(0, 1))
        ctx.scale, ctx.dtype = scale, dtype
        ctx.bias_shape = None if bias is None else bias.shape
        ctx.save_for_backward(q, k, x, probs if keep else None)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable  # its products write into buffers: no double backward
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        q, k, x, probs = ctx.saved_tensors
        scale, dtype = ctx.scale, ctx.dtype
        b, n, heads, d = q.shape
        xc = x.to(dtype)  # (B, N, D)
        gq = q.new_empty(b, heads, n, d)  # (B, heads, N, D): head-major, each image's block contiguous
        gk = k.new_empty(b, heads, n, d)
        gx = torch.empty(x.shape, dtype=dtype, device=x.device)  # (B, N, D)
        shared = ctx.bias_shape is not None and ctx.bias_shape[0] == 1
        wants_bias = ctx.bias_shape is not None and ctx.needs_input_grad[3]
        gbias = None  # (1|B, heads, N, N): summed over the batch when shared
        if wants_bias:
            gbias = q.new_zeros(ctx.bias_shape) if shared else q.new_empty(ctx.bias_shape)
        tile = _Tiles(q, heads, n, d, dtype)
        rows = q.new_empty(heads, n, 1)  # sum over keys of p * gp
        heads_grad = torch.empty(heads, n, d, dtype=dtype, device=q.device)  # one image's output gradient
        for i in range(b):
            p = probs[i]  # (heads, N, N)
            gi = heads_grad.copy_(grad[i].transpose(0, 1)).view(heads * n, d)  # (heads * N, D)
            torch.mm(tile.cast(p).view(heads * n, n).T, gi, out=gx[i])  # (N, D): sum over heads
            gp = tile.uncast(torch.mm(gi, xc[i].T, out=tile.product.view(heads * n, n)))  # d loss / d p
            # softmax backward: d logits = p * (gp - sum_keys(p * gp))
            torch.sum(torch.mul(p, gp, out=tile.logits), -1, keepdim=True, out=rows)
            gl = gp.sub_(rows).mul_(p)  # (heads, N, N)
            if gbias is not None and shared:
                gbias[0] += gl
            elif gbias is not None:
                gbias[i] = gl
            qi, ki = q[i].transpose(0, 1), k[i].transpose(0, 1)  # (heads, N, D)
            torch.baddbmm(qi, gl, ki, beta=0, alpha=scale, out=gq[i])
            torch.baddbmm(ki, gl.transpose(1, 2), qi, beta=0, alpha=scale, out=gk[i])
        return gq.transpose(1, 2), gk.transpose(1, 2), gx.to(x.dtype), gbias, None, None  # (B, N, heads, D)


class _Tiles:
    """One image's buffers, allocated once per call: fresh large tensors per image would each pay the
    page faults of new memory. ``logits (heads, N, N)`` in the logit dtype, ``product`` in the mixing's
    dtype with ``cast`` and ``uncast`` between the two (no copies when they agree)."""

    def __init__(self, like: Tensor, heads: int, n: int, d: int, dtype: torch.dtype) -> None:
        self.logits = like.new_empty(heads, n, n)
        self.product = like.new_empty(heads, n, n, dtype=dtype)
        self.same = dtype == like.dtype
        self.wide = None if self.same else like.new_empty(heads, n, n)

    def cast(self, t: Tensor) -> Tensor:
        """``t (heads, N, N)`` (logit dtype) in the product dtype."""
        return t if self.same else self.product.copy_(t)

    def uncast(self, t: Tensor) -> Tensor:
        """``t`` (product dtype, in ``product``) as ``(heads, N, N)`` in the logit dtype, in a buffer of
        its own."""
        t = t.view(self.logits.shape)
        return t if self.wide is None else self.wide.copy_(t)


def tiled_content_attention(q: Tensor, k: Tensor, x: Tensor, bias: Tensor | None, scale: float) -> Tensor:
    """``softmax(scale q k^T + bias) x`` for every head, one image at a time.

    ``q, k (B, N, heads, D)`` in the logit dtype (float32 or float64), the values ``x (B, N, D)`` shared by
    the heads, ``bias (1|B, heads, N, N)`` in the logit dtype or None; returns ``(B, N, heads, D)`` (the
    heads side by side, as the output projection takes them) in the product dtype.
    """
    inputs = (q, k, x) if bias is None else (q, k, x, bias)
    keep = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)  # probabilities for backward
    return _TiledContentAttention.apply(q, k, x, bias, scale, keep)
