"""Separable positional attention fused with the output projection, lean in memory.

When a head's logit is a row term plus a column term, its softmax over the (ky, kx) key grid is the
outer product of a row softmax ``R_h (H, H)`` and a column softmax ``C_h (W, W)``:
``P_h[(i, j), (k, l)] = R_h[i, k] C_h[j, l]``. Head h's output ``Z_h = P_h X`` then costs two small
matrix products, O(N (H + W) D), and the layer's output is ``y = [Z_1 .. Z_heads] W^T + b``.

The kernel works on ``x`` laid out columns first, ``(W, H * B * D)``: there, mixing the columns is one
matrix product ``C_h @ x`` and mixing the rows one batch of W products over contiguous ``(H, B * D)``
blocks, with nothing transposed in between (the batch-major layout needed B * H products of 16 x 16
matrices per head, and copies between them). Each head's output is projected as soon as it is made,
so no ``(B, N, heads * D)`` concatenation exists; backward recomputes the mixings head by head from
``x``: saved activation memory O(B N D), transient memory O(B N D) per head.

Under autocast every product runs in the autocast dtype (inputs cast once, accumulation inside the
matrix products in float32, as ``nn.Linear`` does) and the sums over heads are kept in float32; the
softmax factors arrive in float32 and are rounded once. Gradients of ``row``, ``col`` and ``weight``
come back in their own dtype.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from sa_conv.nn.autocast import autocast_dtype

__all__ = ["separable_attention_projection"]


def _columns_first(x: Tensor) -> Tensor:
    """``x (B, H, W, D)`` -> ``(W, H * B * D)``, ordered ``[j, i, b, d]``."""
    b, h, w, d = x.shape
    return x.permute(2, 1, 0, 3).reshape(w, h * b * d)


def _mix(xt: Tensor, row: Tensor, col: Tensor) -> tuple[Tensor, Tensor]:
    """One head on columns-first ``xt (W, H * B * D)``: ``t = C xt`` mixes the columns, ``z = R t`` the
    rows. Returns ``t (W, H * B * D)`` ordered ``[l, i, b, d]`` and ``z (W, H, B * D)``, ``[l, k, b, d]``."""
    w, h = xt.shape[0], row.shape[0]
    t = col @ xt  # (W, H*B*D)
    z = torch.bmm(row.expand(w, h, h), t.view(w, h, -1))  # (W, H, B*D)
    return t, z


def _add_product(acc: Tensor, a: Tensor, b: Tensor) -> None:
    """``acc += a @ b``, in place where the dtypes allow (a float32 sum of bf16 products otherwise)."""
    if acc.dtype == a.dtype:
        acc.addmm_(a, b)
    else:
        acc += a @ b


class _SeparableAttentionProjection(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, row: Tensor, col: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        # x (B, H, W, D), row (heads, H, H), col (heads, W, W), weight (O, heads * D), bias (O,)
        dtype = autocast_dtype(x.device, x.dtype)
        b, h, w, d = x.shape
        heads, out = row.shape[0], weight.shape[0]
        xt = _columns_first(x.to(dtype))  # (W, H*B*D)
        rc, cc, wc = (t.to(dtype).contiguous() for t in (row, col, weight))
        acc = torch.promote_types(dtype, torch.float32)  # the sum over heads
        y = torch.zeros(w * h * b, out, dtype=acc, device=x.device)  # (W*H*B, O): rows [l, k, b]
        if bias is not None:
            y += bias.to(dtype)
        for head in range(heads):
            _, z = _mix(xt, rc[head], cc[head])  # (W, H, B*D)
            _add_product(y, z.view(-1, d), wc[:, head * d : (head + 1) * d].T)
        ctx.dtype = dtype
        ctx.save_for_backward(x, row, col, weight)
        ctx.has_bias = bias is not None
        return y.to(dtype).view(w, h, b, out).permute(2, 1, 0, 3).contiguous()  # (B, H, W, O)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, row, col, weight = ctx.saved_tensors
        dtype = ctx.dtype
        b, h, w, d = x.shape
        heads, out = row.shape[0], weight.shape[0]
        xt = _columns_first(x.to(dtype))  # (W, H*B*D)
        rc, cc, wc = (t.to(dtype).contiguous() for t in (row, col, weight))
        g = grad.permute(2, 1, 0, 3).reshape(w * h * b, out).to(dtype)  # (W*H*B, O): rows [l, k, b]
        gweight = torch.empty_like(weight)
        grow, gcol = torch.empty_like(row), torch.empty_like(col)
        gxt = torch.zeros(w, h * b * d, dtype=torch.promote_types(x.dtype, dtype), device=x.device)
        for head in range(heads):
            cols = slice(head * d, (head + 1) * d)
            t, z = _mix(xt, rc[head], cc[head])  # recomputed: (W, H*B*D), (W, H, B*D)
            gweight[:, cols] = g.T @ z.view(-1, d)  # (O, D)
            gz = (g @ wc[:, cols]).view(w, h, b * d)  # (W, H, B*D)
            # z = R t (per column l): dR = sum_l gz_l t_l^T, dt = R^T gz
            grow[head] = torch.bmm(gz, t.view(w, h, b * d).transpose(1, 2)).sum(0, dtype=torch.float32)
            gt = torch.bmm(rc[head].T.expand(w, h, h), gz).view(w, h * b * d)  # (W, H*B*D)
            # t = C xt: dC = gt xt^T, dxt = C^T gt
            gcol[head] = gt @ xt.T
            _add_product(gxt, cc[head].T, gt)
        gbias = g.sum(0, dtype=torch.float32).to(weight.dtype) if ctx.has_bias else None
        gx = gxt.view(w, h, b, d).permute(2, 1, 0, 3).to(x.dtype).contiguous()  # (B, H, W, D)
        return gx, grow, gcol, gweight, gbias


def separable_attention_projection(
    x: Tensor, row: Tensor, col: Tensor, weight: Tensor, bias: Tensor | None
) -> Tensor:
    """``y = sum_h (R_h x C_h^T) W_h^T + b``: separable attention of every head, then the projection.

    ``x (B, H, W, D)``, row softmax ``row (heads, H, H)``, column softmax ``col (heads, W, W)``,
    projection ``weight (O, heads * D)`` and ``bias (O,)``; returns ``(B, H, W, O)``.
    """
    return _SeparableAttentionProjection.apply(x, row, col, weight, bias)
