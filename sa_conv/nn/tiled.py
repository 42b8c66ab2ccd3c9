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

Relative tables (composite attention's query and key terms, ``ShiftTables``): the term
``q_h[q] . w[index[q, k]]`` reads one of S table rows per (query, key). The reference gathers an
``(N, N, D)`` table and contracts it with every query; here each image's queries meet the S rows once,
``(N, heads, S)``, one product, and the logits gather their entries from it; backward adds the logits'
gradient into the same entries and makes the queries' and the table's gradients by two more products.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from sa_conv.nn.autocast import autocast_dtype, no_autocast

__all__ = ["ShiftTables", "tiled_content_attention"]


@dataclass(frozen=True)
class ShiftTables:
    """Logit terms read from tables of relative shifts (composite attention's query and key terms):
    ``scale * q_h[q] . query[index[q, k]]`` and ``scale * k_h[k] . key[index[k, q]]``."""

    index: Tensor  # (N, N) long: the table row of the shift from query q to key k
    query: Tensor | None  # (S, D): the query term's table, or None
    key: Tensor | None  # (S, D): the key term's table, or None
    scale: float


class _TiledContentAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        x: Tensor,
        bias: Tensor | None,
        scale: float,
        keep: bool,
        index: Tensor | None,
        query_table: Tensor | None,
        key_table: Tensor | None,
        table_scale: float,
    ) -> Tensor:
        # q, k (B, N, heads, D) in the logit dtype; x (B, N, D); bias (1|B, heads, N, N) or None;
        # index (N, N) and the tables (S, D) of the shift terms, or None
        b, n, heads, d = q.shape
        dtype = autocast_dtype(x.device, x.dtype)  # the mixing's product dtype
        xc = x.to(dtype)
        probs = q.new_empty(b if keep else 1, heads, n, n)  # (B|1, heads, N, N): kept for backward
        out = torch.empty(b, n, heads, d, dtype=dtype, device=x.device)  # (B, N, heads, D)
        tile = _Tiles(q, heads, n, d, dtype)  # one image's buffers, reused: no allocation per image
        mixed = torch.empty(heads * n, d, dtype=dtype, device=x.device)  # one image's heads, stacked
        shifts = _Shifts(index, query_table, key_table, table_scale, q)
        with no_autocast(x.device):  # every dtype is chosen here
            for i in range(b):
                p, logits = probs[i if keep else 0], tile.logits  # (heads, N, N)
                qi, kti = q[i].transpose(0, 1), k[i].permute(1, 2, 0)  # (heads, N, D), (heads, D, N)
                if shifts.any:  # the shift terms, then the bias, then the content product added
                    shifts.logits(q[i], k[i], out=logits)
                    if bias is not None:
                        logits.add_(bias[i if bias.shape[0] > 1 else 0])
                    logits.baddbmm_(qi, kti, alpha=scale)
                elif bias is None:
                    torch.baddbmm(logits, qi, kti, beta=0, alpha=scale, out=logits)
                else:
                    torch.baddbmm(bias[i if bias.shape[0] > 1 else 0], qi, kti, alpha=scale, out=logits)
                torch.softmax(logits, -1, out=p)
                # every head mixes the same tokens: one product for all of them, (heads * N, D)
                torch.mm(tile.cast(p).view(heads * n, n), xc[i], out=mixed)
                out[i].copy_(mixed.view(heads, n, d).transpose(0, 1))
        ctx.scale, ctx.dtype, ctx.shifts = scale, dtype, shifts
        ctx.bias_shape = None if bias is None else bias.shape
        ctx.save_for_backward(q, k, x, probs if keep else None)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable  # its products write into buffers: no double backward
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        q, k, x, probs = ctx.saved_tensors
        scale, dtype, shifts = ctx.scale, ctx.dtype, ctx.shifts
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
        shifts.start_backward()
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
            if shifts.any:
                shifts.backward(gl, q[i], k[i], gq[i], gk[i])
        gq_table, gk_table = shifts.table_grads()
        return (
            gq.transpose(1, 2),  # (B, N, heads, D)
            gk.transpose(1, 2),
            gx.to(x.dtype),
            gbias,
            None,
            None,
            None,
            gq_table,
            gk_table,
            None,
        )


class _Shifts:
    """The shift terms of one call: each image's queries (keys) meet the table's S rows once,
    ``(N, heads, S)``, and the logits gather their entries through a flat index made once per call."""

    def __init__(
        self, index: Tensor | None, query: Tensor | None, key: Tensor | None, scale: float, like: Tensor
    ) -> None:
        self.any = index is not None and (query is not None or key is not None)
        self.tables = (query, key)
        if not self.any:
            return
        assert index is not None
        _, n, heads, _ = like.shape
        s = max(t.shape[0] for t in self.tables if t is not None)
        self.scale, self.rows = scale, s
        # the tables in the logit dtype, scaled once: (S, D)
        self.scaled = tuple(None if t is None else t.detach().to(like.dtype) * scale for t in self.tables)
        # flat index into (N, heads, S) of entry [h, q, k]: the query term reads row index[q, k] of query q,
        # the key term row index[k, q] of key k; (heads, N, N) each
        tokens = torch.arange(n, device=like.device)
        head = torch.arange(heads, device=like.device).view(heads, 1, 1)
        self.flat = (
            ((tokens.view(1, n, 1) * heads + head) * s + index).flatten(),
            ((tokens.view(1, 1, n) * heads + head) * s + index.T).flatten(),
        )
        self.buffer = like.new_empty(n * heads * s)  # one image's (N, heads, S) entries, or their gradient
        self.gathered: Tensor | None = None  # the key term's entries beside the query term's
        self.grads: tuple[Tensor | None, ...] = (None, None)  # the tables' gradients, made per backward

    def start_backward(self) -> None:
        """The tables' gradients zeroed: each backward pass sums its own."""
        if self.any:
            self.grads = tuple(None if t is None else t.new_zeros(t.shape) for t in self.scaled)

    def logits(self, q: Tensor, k: Tensor, *, out: Tensor) -> None:
        """One image's shift terms into ``out (heads, N, N)``, from its queries and keys ``(N, heads, D)``."""
        first = True
        for tokens, table, flat in zip((q, k), self.scaled, self.flat, strict=True):
            if table is None:
                continue
            entries = torch.mm(tokens.reshape(-1, table.shape[1]), table.T, out=self._entries())
            if first:
                torch.index_select(entries.view(-1), 0, flat, out=out.view(-1))
            else:  # the key term after the query term
                out.view(-1).add_(torch.index_select(entries.view(-1), 0, flat, out=self._gathered()))
            first = False

    def backward(self, gl: Tensor, q: Tensor, k: Tensor, gq: Tensor, gk: Tensor) -> None:
        """One image's logit gradient ``gl (heads, N, N)`` into its queries' and keys' gradients
        ``(heads, N, D)`` and the tables' gradients."""
        for tokens, grad, table, flat, table_grad in zip(
            (q, k), (gq, gk), self.scaled, self.flat, self.grads, strict=True
        ):
            if table is None or table_grad is None:
                continue
            entries = self.buffer.zero_().index_add_(0, flat, gl.reshape(-1)).view(-1, self.rows)
            n, heads, d = tokens.shape
            grad.add_(torch.mm(entries, table).view(n, heads, d).transpose(0, 1))  # (heads, N, D)
            table_grad.addmm_(entries.T, tokens.reshape(-1, d), alpha=self.scale)

    def table_grads(self) -> tuple[Tensor | None, Tensor | None]:
        """The tables' gradients, summed over the images, in the tables' dtypes."""
        if not self.any:
            return None, None
        return tuple(  # type: ignore[return-value]
            None if g is None or t is None else g.to(t.dtype)
            for g, t in zip(self.grads, self.tables, strict=True)
        )

    def _entries(self) -> Tensor:
        return self.buffer.view(-1, self.rows)

    def _gathered(self) -> Tensor:
        if self.gathered is None:
            self.gathered = self.buffer.new_empty(self.flat[0].shape)
        return self.gathered


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


def tiled_content_attention(
    q: Tensor, k: Tensor, x: Tensor, bias: Tensor | None, scale: float, shifts: ShiftTables | None = None
) -> Tensor:
    """``softmax(scale q k^T + bias + shift terms) x`` for every head, one image at a time.

    ``q, k (B, N, heads, D)`` in the logit dtype (float32 or float64), the values ``x (B, N, D)`` shared by
    the heads, ``bias (1|B, heads, N, N)`` in the logit dtype or None, ``shifts`` the relative tables'
    terms or None; returns ``(B, N, heads, D)`` (the heads side by side, as the output projection takes
    them) in the product dtype.
    """
    _check(q, k, x, bias, shifts)
    tables = (None, None, None) if shifts is None else (shifts.index, shifts.query, shifts.key)
    inputs = [t for t in (q, k, x, bias, *tables[1:]) if t is not None]
    keep = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)  # probabilities for backward
    table_scale = 1.0 if shifts is None else shifts.scale
    return _TiledContentAttention.apply(q, k, x, bias, scale, keep, *tables, table_scale)


def _check(q: Tensor, k: Tensor, x: Tensor, bias: Tensor | None, shifts: ShiftTables | None) -> None:
    """The kernel's arguments agree in shape and dtype: one clear error where they do not."""
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must be (B, N, heads, D) alike, got {tuple(q.shape)} and {tuple(k.shape)}")
    b, n, heads, d = q.shape
    if q.dtype not in (torch.float32, torch.float64) or k.dtype != q.dtype:
        raise ValueError(f"q and k must be float32 or float64 alike, got {q.dtype} and {k.dtype}")
    if x.shape != (b, n, d) or not x.is_floating_point():
        raise ValueError(f"x must be floating-point (B, N, D) = {(b, n, d)}, got {x.dtype} {tuple(x.shape)}")
    if bias is not None and (bias.shape not in ((1, heads, n, n), (b, heads, n, n)) or bias.dtype != q.dtype):
        raise ValueError(
            f"bias must be {q.dtype} (1|B, heads, N, N) = (1|{b}, {heads}, {n}, {n}), "
            f"got {bias.dtype} {tuple(bias.shape)}"
        )
    if shifts is None:
        return
    if shifts.index.shape != (n, n) or shifts.index.dtype != torch.long:
        raise ValueError(
            f"the shift index must be int64 (N, N) = ({n}, {n}), got {shifts.index.dtype} "
            f"{tuple(shifts.index.shape)}"
        )
    for name, table in (("query", shifts.query), ("key", shifts.key)):
        if table is not None and (table.ndim != 2 or table.shape[1] != d or not table.is_floating_point()):
            raise ValueError(
                f"the {name} table must be floating-point (S, D) with D = {d}, got "
                f"{table.dtype} {tuple(table.shape)}"
            )
    rows = [t.shape[0] for t in (shifts.query, shifts.key) if t is not None]
    if rows and (shifts.index.min() < 0 or shifts.index.max() >= min(rows)):
        raise ValueError(f"the shift index must lie in [0, {min(rows)}): the tables' rows")
