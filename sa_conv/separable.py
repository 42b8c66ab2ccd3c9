"""Separable positional attention fused with the output projection, lean in memory.

When a head's logit is a row term plus a column term, its softmax over the (ky, kx) key grid is the
outer product of a row softmax ``R_h (H, H)`` and a column softmax ``C_h (W, W)``:
``P_h[(i, j), (k, l)] = R_h[i, k] C_h[j, l]``. Head h's output ``Z_h = P_h X`` then costs two small
matrix products, O(N (H + W) D), and the layer's output is ``y = sum_h Z_h W_h^T + b`` with ``W_h``
head h's ``(out, D)`` block of the projection.

Autograd would keep every ``Z_h`` (the ``(B, N, heads * D)`` concatenation) for the projection's
backward. ``Z_h`` is cheap to recompute, so this Function keeps only ``x`` and recomputes ``Z_h``
head by head in backward: activation memory O(B N D) instead of O(B N heads D), the same large
matrix products as autograd.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

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


class _SeparableAttentionProjection(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, row: Tensor, col: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        # x (B, H, W, D), row (heads, H, H), col (heads, W, W), weight (O, heads * D), bias (O,)
        x = x.contiguous()
        b, h, w, d = x.shape
        heads, out = row.shape[0], weight.shape[0]
        device = x.device.type
        autocast = torch.is_autocast_enabled(device)
        y = None
        for head in range(heads):
            _, z = _mix(x, row[head], col[head])  # (B, H, W, D)
            z, w_h = z.reshape(b * h * w, d), weight[:, head * d : (head + 1) * d]  # (B*N, D), (O, D)
            if autocast:  # products in the autocast dtype, the sum over heads in float32
                part = (z @ w_h.T).float()
                y = part if y is None else y + part
            elif y is None:
                y = z @ w_h.T if bias is None else torch.addmm(bias, z, w_h.T)  # (B*N, O)
            else:
                y.addmm_(z, w_h.T)
        if autocast and bias is not None:
            y = y + bias
        ctx.autocast = (autocast, torch.get_autocast_dtype(device), device)
        ctx.save_for_backward(x, row, col, weight)
        ctx.has_bias = bias is not None
        return y.reshape(b, h, w, out)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, row, col, weight = ctx.saved_tensors
        enabled, dtype, device = ctx.autocast
        b, h, w, d = x.shape
        heads, out = row.shape[0], weight.shape[0]
        g = grad.contiguous().reshape(b * h * w, out)  # (B*N, O)
        gx = torch.zeros_like(x, memory_format=torch.contiguous_format)
        grow, gcol = torch.empty_like(row), torch.empty_like(col)
        gweight = torch.empty_like(weight)
        with torch.autocast(device, dtype=dtype, enabled=enabled):
            for head in range(heads):
                w_h = weight[:, head * d : (head + 1) * d]  # (O, D)
                t, z = _mix(x, row[head], col[head])  # recomputed, (B, H, W, D) each
                gweight[:, head * d : (head + 1) * d] = g.T @ z.reshape(b * h * w, d)  # (O, D)
                gz = (g @ w_h).reshape(b, h, w * d)  # (B, H, W*D)
                # z = R t: dR = sum_b gz_b t_b^T, dt = R^T gz
                grow[head] = torch.bmm(gz, t.reshape(b, h, w * d).transpose(1, 2)).sum(0)
                gt = torch.bmm(row[head].T.expand(b, h, h), gz).reshape(b * h, w, d)  # (B*H, W, D)
                # t = C x (per row): dC = sum_{b,i} gt x^T, dx = C^T gt
                gcol[head] = torch.bmm(gt, x.reshape(b * h, w, d).transpose(1, 2)).sum(0)
                gx_rows = gx.view(b * h, w, d)
                if enabled:
                    gx_rows += torch.bmm(col[head].T.expand(b * h, w, w), gt)
                else:
                    gx_rows.baddbmm_(col[head].T.expand(b * h, w, w), gt)
        gbias = g.sum(0) if ctx.has_bias else None
        return gx, grow, gcol, gweight, gbias


def separable_attention_projection(
    x: Tensor, row: Tensor, col: Tensor, weight: Tensor, bias: Tensor | None
) -> Tensor:
    """``y = sum_h (R_h x C_h^T) W_h^T + b``: separable attention of every head, then the projection.

    ``x (B, H, W, D)``, row softmax ``row (heads, H, H)``, column softmax ``col (heads, W, W)``,
    projection ``weight (O, heads * D)`` and ``bias (O,)``; returns ``(B, H, W, O)``.
    """
    return _SeparableAttentionProjection.apply(x, row, col, weight, bias)
