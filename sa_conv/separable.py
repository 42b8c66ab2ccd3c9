"""Separable positional attention fused with the output projection, lean in memory.

When a head's logit is a row term plus a column term, its softmax over the (ky, kx) key grid is the
outer product of a row softmax ``R_h (H, H)`` and a column softmax ``C_h (W, W)``:
``P_h[(i, j), (k, l)] = R_h[i, k] C_h[j, l]``. Head h's output ``Z_h = P_h X`` then costs two small
matrix products, O(N (H + W) D), and the layer's output is ``y = [Z_1 .. Z_heads] W^T + b``.

Autograd would keep the ``(B, N, heads * D)`` concatenation of the ``Z_h`` for the projection's
backward. It is cheap to recompute, so this Function keeps only ``x`` and recomputes it in backward:
saved activation memory O(B N D) instead of O(B N heads D). Each pass builds the concatenation once
as a transient buffer, so that the projection and its two gradients are one large matrix product each.

Under autocast every product runs in the autocast dtype (inputs cast once, accumulation inside the
matrix products in float32, as ``nn.Linear`` does); the softmax factors arrive in float32 and are
rounded once. Gradients of ``row``, ``col`` and ``weight`` come back in their own dtype.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from sa_conv.autocast import autocast_dtype

__all__ = ["separable_attention_projection"]


def _mix(x: Tensor, row: Tensor, col: Tensor) -> tuple[Tensor, Tensor]:
    """``t = C x`` along columns and ``z = R t`` along rows of ``x (B, H, W, D)``; returns (t, z).

    Written as batched matmuls over (B*H) and B with the small factor broadcast, so that no large
    tensor is ever transposed (``torch.matmul`` of a 2D by a 4D tensor would copy ``x`` twice).
    """
    b, h, w, d = x.shape
    t = torch.bmm(col.expand(b * h, w, w), x.reshape(b * h, w, d))  # (B*H, W, D): columns mixed
    z = torch.bmm(row.expand(b, h, h), t.reshape(b, h, w * d))  # (B, H, W*D): rows mixed
    return t.reshape(b, h, w, d), z.reshape(b, h, w, d)


def _heads(x: Tensor, row: Tensor, col: Tensor) -> tuple[Tensor, list[Tensor]]:
    """Every head's output concatenated ``(B*N, heads * D)``, and each head's ``t = C_h x``."""
    b, h, w, d = x.shape
    heads = row.shape[0]
    cat = x.new_empty(b * h * w, heads, d)  # (B*N, heads, D)
    ts = []
    for head in range(heads):
        t, z = _mix(x, row[head], col[head])  # (B, H, W, D) each
        cat[:, head] = z.reshape(b * h * w, d)
        ts.append(t)
    return cat.reshape(b * h * w, heads * d), ts


class _SeparableAttentionProjection(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, row: Tensor, col: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        # x (B, H, W, D), row (heads, H, H), col (heads, W, W), weight (O, heads * D), bias (O,)
        dtype = autocast_dtype(x.device, x.dtype)
        b, h, w, _ = x.shape
        xc, rc, cc, wc = (t.to(dtype).contiguous() for t in (x, row, col, weight))
        cat, _ = _heads(xc, rc, cc)  # (B*N, heads * D)
        y = cat @ wc.T if bias is None else torch.addmm(bias.to(dtype), cat, wc.T)  # (B*N, O)
        ctx.dtype = dtype
        ctx.save_for_backward(x, row, col, weight)
        ctx.has_bias = bias is not None
        return y.reshape(b, h, w, weight.shape[0])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, row, col, weight = ctx.saved_tensors
        dtype = ctx.dtype
        b, h, w, d = x.shape
        heads, out = row.shape[0], weight.shape[0]
        xc, rc, cc, wc = (t.to(dtype).contiguous() for t in (x, row, col, weight))
        g = grad.reshape(b * h * w, out).to(dtype)  # (B*N, O)
        cat, ts = _heads(xc, rc, cc)  # recomputed: (B*N, heads * D) and per head (B, H, W, D)
        gweight = (g.T @ cat).to(weight.dtype)  # (O, heads * D)
        del cat
        gcat = (g @ wc).reshape(b, h, w, heads, d)  # (B, H, W, heads, D)
        gx = torch.zeros(b * h, w, d, dtype=torch.promote_types(x.dtype, dtype), device=x.device)
        grow, gcol = torch.empty_like(row), torch.empty_like(col)
        for head in range(heads):
            gz = gcat[:, :, :, head].reshape(b, h, w * d)  # (B, H, W*D)
            t = ts[head].reshape(b, h, w * d)
            # z = R t: dR = sum_b gz_b t_b^T, dt = R^T gz
            grow[head] = torch.bmm(gz, t.transpose(1, 2)).sum(0, dtype=torch.float32)
            gt = torch.bmm(rc[head].T.expand(b, h, h), gz).reshape(b * h, w, d)  # (B*H, W, D)
            # t = C x (per row): dC = sum_{b,i} gt x^T, dx = C^T gt
            gcol[head] = torch.bmm(gt, xc.reshape(b * h, w, d).transpose(1, 2)).sum(0, dtype=torch.float32)
            gx += torch.bmm(cc[head].T.expand(b * h, w, w), gt)
        gbias = g.sum(0, dtype=torch.float32).to(weight.dtype) if ctx.has_bias else None
        return gx.reshape(b, h, w, d).to(x.dtype), grow, gcol, gweight, gbias


def separable_attention_projection(
    x: Tensor, row: Tensor, col: Tensor, weight: Tensor, bias: Tensor | None
) -> Tensor:
    """``y = sum_h (R_h x C_h^T) W_h^T + b``: separable attention of every head, then the projection.

    ``x (B, H, W, D)``, row softmax ``row (heads, H, H)``, column softmax ``col (heads, W, W)``,
    projection ``weight (O, heads * D)`` and ``bias (O,)``; returns ``(B, H, W, O)``.
    """
    return _SeparableAttentionProjection.apply(x, row, col, weight, bias)
