"""2D multi-head self-attention over a channels-last token grid, with full-width heads (the paper's).

Head h computes ``P_h X`` at full width ``dim``; the heads are concatenated ``(heads * dim)`` and one
``Linear(heads * dim, out_dim)`` maps back. The logit of head h is its positional logit (from a
relative encoding), plus ``q_h . k_h / sqrt(dim)`` when ``content=True``, plus the encoding's query- or
key-dependent terms when it declares them (composite attention).

Precision: every logit term (positional, content, composite) and the softmax are computed in float32
(float64 for a float64 layer) under any autocast, as the paper's float32 code did: a sharp quadratic
head (alpha 46) has logits in the thousands, which bfloat16 cannot resolve. The projections and the
products of the probabilities with the values run in the autocast dtype.

Attention dropout follows the paper's code: for input-independent (positional-only) attention it drops
the batch-free ``(heads, N, N)`` probability tensor once per step, one mask shared by every image of the
batch; input-dependent attention draws one mask per image.

Computations (``impl``):
- ``"reference"``: the literal formula. Materialize the logits, softmax over keys, dropout, weighted
  sum. The oracle for every other path and the benchmark baseline.
- ``"shared"``: positional-only encodings; the probabilities do not depend on the input, so one
  ``(heads, N, N)`` tensor (dropped once, in training) serves the whole batch as one large product.
- ``"separable"``: positional-only encodings whose logit is a row term plus a column term (quadratic,
  learned relative): the softmax factors into a row and a column softmax, applied as two small
  contractions, O(N (H + W)) per channel instead of O(N^2), fused with the projection so that only
  the input is kept for backward (sa_conv.nn.separable). A dropped matrix does not factor: no dropout.
- ``"sdpa"``: input-dependent attention through ``F.scaled_dot_product_attention`` with every
  non-content logit term as a float32 bias and its dropout (one mask per image, as the paper's code
  for content attention); ``auto`` takes it on CUDA; on CPU it measured no faster than the reference.
- ``"tiled"``: content attention one image at a time, its ``(heads, N, N)`` tile kept in cache
  (sa_conv.nn.tiled); the positional logits are a float32 bias, query and key terms are read from
  their tables of shifts (composite) or else made a bias too. No attention dropout.
- ``"auto"`` (default): the fastest exact path: ``separable`` or ``shared`` for positional-only
  attention (``shared`` while dropout is active); for input-dependent attention ``sdpa`` on CUDA,
  ``tiled`` on a CPU for content attention with a batch-free bias and no active dropout (outside
  torch.compile), else ``reference``. The fast paths are exact, not approximations.

The computation is chosen once per call (``resolved_impl``) from a table of methods; ``forward``
returns the output, and ``logits`` / ``probabilities`` say what the heads attend to.
"""

from __future__ import annotations

import math
from functools import partial
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sa_conv.nn.autocast import autocast_enabled, no_autocast
from sa_conv.nn.choices import IMPLS, Impl
from sa_conv.nn.encodings import PositionalEncoding
from sa_conv.nn.separable import separable_attention_projection
from sa_conv.nn.tiled import tiled_content_attention
from sa_conv.utils.quote import quoted

__all__ = ["IMPLS", "Impl", "MultiHeadSelfAttention2d"]

_T = TypeVar("_T")


class MultiHeadSelfAttention2d(nn.Module):
    """Multi-head self-attention on ``(B, H, W, dim)`` token grids with relative positional logits.

    Args:
        dim: channels of the tokens; every head attends over all of them (full-width heads).
        heads: number of heads.
        encoding: the positional logits (``sa_conv.nn.encodings``), with ``heads`` heads; None for
            content-only attention.
        content: add the content logit ``q_h . k_h / sqrt(dim)``.
        out_dim: channels of the output (default ``dim``).
        attn_dropout: dropout on the attention probabilities (the paper: 0.1).
        bias: whether the output projection has a bias.
        impl: the computation (module docstring); ``auto`` picks the fastest exact one per call.
        device, dtype: of the layer's own parameters (the encoding is built by the caller).

    ``forward`` returns the output; ``logits`` and ``probabilities`` give what the heads attend to.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        *,
        encoding: PositionalEncoding | None = None,
        content: bool = False,
        out_dim: int | None = None,
        attn_dropout: float = 0.0,
        bias: bool = True,
        impl: Impl = "auto",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(heads, int) or heads <= 0:
            raise ValueError(f"heads must be a positive integer, got {quoted(heads)}")
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {quoted(dim)}")
        if encoding is None and not content:
            raise ValueError("encoding is None and content is False: the attention has no logits")
        if encoding is not None and encoding.heads != heads:
            raise ValueError(f"encoding has {encoding.heads} heads, the layer has heads={heads}")
        if not 0.0 <= attn_dropout < 1.0:
            raise ValueError(f"attn_dropout must be in [0, 1), got {attn_dropout}")
        self.dim, self.heads = dim, heads
        self.out_dim = dim if out_dim is None else out_dim
        self.encoding = encoding
        self.content = content
        self.query_term = encoding is not None and encoding.query_dependent  # composite q . w[delta]
        self.key_term = encoding is not None and encoding.key_dependent  # composite k . w'[-delta]
        linear = partial(nn.Linear, device=device, dtype=dtype)
        self.query = linear(dim, heads * dim) if content or self.query_term else None
        self.key = linear(dim, heads * dim) if content or self.key_term else None
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.proj = linear(heads * dim, self.out_dim, bias=bias)
        self.impl: Impl = impl

    # ------------------------------------------------------------------ public API

    @property
    def impl(self) -> Impl:
        """The requested computation (``"auto"`` picks one per call)."""
        return self._impl

    @impl.setter
    def impl(self, value: Impl) -> None:
        if value not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {quoted(value)}")
        if value in ("shared", "separable") and self.input_dependent:
            raise ValueError(
                f"impl={quoted(value)} needs input-independent attention (no content, no query term)"
            )
        if value == "separable" and not _given(self.encoding).separable:
            raise ValueError(
                f"impl='separable' needs a separable encoding, got {type(self.encoding).__name__}"
            )
        if value == "sdpa" and not self.input_dependent:
            raise ValueError("impl='sdpa' needs input-dependent attention (content=True or a query term)")
        if value == "tiled" and not self.content:
            raise ValueError("impl='tiled' needs content attention (content=True)")
        self._impl = value

    @property
    def input_dependent(self) -> bool:
        """Whether the attention probabilities depend on the input (content, a query or key term)."""
        return self.content or self.query_term or self.key_term

    def resolved_impl(self, device: torch.device | str = "cpu") -> str:
        """The computation the next forward call on ``device`` will use."""
        if self._impl != "auto":
            return self._impl
        dropout = self.training and self.attn_dropout.p > 0
        if self.input_dependent:  # fused SDPA kernels (dropout and a float bias) on CUDA; no faster on CPU
            kind = torch.device(device).type
            if kind == "cuda":
                return "sdpa"
            # tiled: a CPU's caches (meta: the FLOP count); not traced by torch.compile (a loop per image);
            # not with query or key terms (composite): the kernel reads them from their tables of shifts,
            # exact, but measured no faster than the reference (1.01x the small step, benchmarks/)
            cpu = kind in ("cpu", "meta") and not torch.compiler.is_compiling()
            tiles = self.content and not dropout and self._batch_free_bias
            return "tiled" if cpu and tiles else "reference"
        if dropout:  # the paper's one mask per step on the batch-free probabilities
            return "shared"
        return "separable" if _given(self.encoding).separable else "shared"

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(B, H, W, dim)`` -> ``(B, H, W, out_dim)``."""
        self._check_input(x)
        return _COMPUTATIONS[self.resolved_impl(x.device)](self, x)

    def logits(self, x: Tensor) -> Tensor:
        """Attention logits ``(B, heads, N, N)``, or ``(1, heads, N, N)`` when input-independent."""
        _, h, w, _ = self._check_input(x)
        dtype = _softmax_dtype(x)
        if not self.input_dependent:
            return self._positional(h, w, x.device, dtype).unsqueeze(0)  # (1, heads, N, N)
        q, k = self._queries_keys(x)
        bias = self._bias(q, k, h, w, dtype)  # (1|B, heads, N, N) or None
        if not self.content:
            return _given(bias)
        q, k = _given(q), _given(k)
        with no_autocast(x.device):  # the logits in the softmax dtype
            logits = (q.to(dtype) / math.sqrt(self.dim)) @ k.to(dtype).transpose(-1, -2)  # (B, heads, N, N)
        return logits if bias is None else logits.add_(bias)  # in place: one pass over (B, heads, N, N)

    def probabilities(self, x: Tensor) -> Tensor:
        """Attention probabilities before dropout: ``(B, heads, N, N)`` or ``(1, heads, N, N)``."""
        return self.logits(x).softmax(dim=-1)

    # ------------------------------------------------------------------ the computations

    def _reference(self, x: Tensor) -> Tensor:
        """The literal formula: materialized probabilities, dropout, weighted sum, projection."""
        b, h, w, d = x.shape
        probs = self.probabilities(x)  # (B|1, heads, N, N)
        # batch-free probabilities: one mask for the whole batch (the paper's code); else one per image
        heads_out = self.attn_dropout(probs) @ x.reshape(b, 1, h * w, d)  # (B, heads, N, D)
        return self._project(heads_out.transpose(1, 2), h, w)

    def _shared(self, x: Tensor) -> Tensor:
        """Positional-only: one ``(heads, N, N)`` probability tensor (dropped once) for the batch."""
        b, h, w, d = x.shape
        probs = self.attn_dropout(self.probabilities(x)[0])  # (heads, N, N)
        heads_out = torch.einsum("hqk,bkd->bqhd", probs, x.reshape(b, h * w, d))  # (B, N, heads, D)
        return self._project(heads_out, h, w)

    def _separable(self, x: Tensor) -> Tensor:
        """Row softmax x column softmax, fused with the projection (``sa_conv.nn.separable``)."""
        if self.training and self.attn_dropout.p > 0:
            raise ValueError("impl='separable' cannot apply attention dropout; use 'shared' or 'auto'")
        _, h, w, _ = x.shape
        row, col = self._positional_axes(h, w, x.device, _softmax_dtype(x))
        return separable_attention_projection(
            x, row.softmax(-1), col.softmax(-1), self.proj.weight, self.proj.bias
        )

    def _sdpa(self, x: Tensor) -> Tensor:
        """Input-dependent: ``scaled_dot_product_attention`` with every other logit term as a float bias,
        in the softmax dtype (the float32 bias is not rounded to the autocast dtype); one dropout mask
        per image."""
        b, h, w, d = x.shape
        dtype = _softmax_dtype(x)
        q, k = self._queries_keys(x)
        bias = self._bias(q, k, h, w, dtype)  # (1|B, heads, N, N) or None
        v = x.reshape(b, 1, h * w, d).expand(b, self.heads, h * w, d)  # (B, heads, N, D)
        p = self.attn_dropout.p if self.training else 0.0
        with no_autocast(x.device):
            if self.content:
                heads_out = F.scaled_dot_product_attention(
                    _given(q).to(dtype), _given(k).to(dtype), v.to(dtype), attn_mask=bias, dropout_p=p
                )
            else:  # no content logit: the bias alone
                heads_out = F.dropout(_given(bias).softmax(-1), p, self.training) @ v.to(dtype)
        return self._project(heads_out.transpose(1, 2), h, w)

    def _tiled(self, x: Tensor) -> Tensor:
        """Content attention one image at a time (``nn.tiled``): the positional logits a float bias, the
        query and key terms read by the kernel from their tables of shifts, or else a float bias too."""
        if self.training and self.attn_dropout.p > 0:
            raise ValueError("impl='tiled' cannot apply attention dropout; use 'reference' or 'auto'")
        b, h, w, d = x.shape
        dtype = _softmax_dtype(x)
        q, k = self._queries_keys(x)
        shifts, bias = None, None
        if self._tabulated:  # the positional logits alone as the bias, (1, heads, N, N)
            bias = self._positional(h, w, x.device, dtype).unsqueeze(0)
            shifts = _given(self.encoding).shift_tables(h, w, x.device)
        else:
            bias = self._bias(q, k, h, w, dtype)  # (1|B, heads, N, N) or None
        q, k = _given(q).transpose(1, 2).to(dtype), _given(k).transpose(1, 2).to(dtype)  # (B, N, heads, D)
        with no_autocast(x.device):  # the shift tables in the logit dtype
            heads_out = tiled_content_attention(
                q, k, x.reshape(b, h * w, d), bias, 1 / math.sqrt(self.dim), shifts
            )
        return self._project(heads_out, h, w)  # heads_out (B, N, heads, D)

    def _project(self, heads_out: Tensor, h: int, w: int) -> Tensor:
        """The heads ``(B, N, heads, D)`` concatenated and projected: ``(B, H, W, out_dim)``."""
        b, _, heads, d = heads_out.shape
        return self.proj(heads_out.reshape(b, h, w, heads * d))

    # ------------------------------------------------------------------ internals

    @property
    def _batch_free_bias(self) -> bool:
        """Whether every non-content logit term is the same for every image (no query or key term)."""
        return not (self.query_term or self.key_term)

    @property
    def _tabulated(self) -> bool:
        """Whether the query and key terms come as tables of shifts (the tiled kernel reads them)."""
        return not self._batch_free_bias and _given(self.encoding).tabulated

    def _check_input(self, x: Tensor) -> tuple[int, int, int, int]:
        """The input's shape, checked."""
        if x.ndim != 4:
            raise ValueError(f"x must be (B, H, W, dim) channels-last, got shape {tuple(x.shape)}")
        if x.shape[-1] != self.dim:
            raise ValueError(f"x has {x.shape[-1]} channels in its last dim, the layer has dim={self.dim}")
        weight = self.proj.weight
        if not x.is_floating_point():
            raise ValueError(f"x must be a floating-point tensor, got {x.dtype}")
        if x.dtype != weight.dtype and not autocast_enabled(x.device):
            raise ValueError(
                f"x is {x.dtype} but the layer's weights are {weight.dtype}: cast one to the other "
                f"(x.to({weight.dtype}) or layer.to({x.dtype})), or run under torch.autocast"
            )
        b, h, w, d = x.shape
        return b, h, w, d

    def _positional(self, h: int, w: int, device: torch.device, dtype: torch.dtype) -> Tensor:
        """The encoding's logits ``(heads, N, N)`` in ``dtype``, outside any autocast."""
        with no_autocast(device):
            return _given(self.encoding).logits(h, w).to(dtype)

    def _positional_axes(
        self, h: int, w: int, device: torch.device, dtype: torch.dtype
    ) -> tuple[Tensor, Tensor]:
        """The separable encoding's row and column logits in ``dtype``, outside any autocast."""
        with no_autocast(device):
            row, col = _given(self.encoding).axis_logits(h, w)
            return row.to(dtype), col.to(dtype)

    def _queries_keys(self, x: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """Per-head queries and keys ``(B, heads, N, D)`` where the logits need them."""
        q = self._per_head(self.query, x) if self.query is not None else None
        k = self._per_head(self.key, x) if self.key is not None else None
        return q, k

    def _bias(self, q: Tensor | None, k: Tensor | None, h: int, w: int, dtype: torch.dtype) -> Tensor | None:
        """Every logit term but content, in ``dtype``: positional (+ query / key terms); None if none."""
        encoding = self.encoding
        if encoding is None:
            return None
        device = q.device if q is not None else _given(k).device
        bias = self._positional(h, w, device, dtype).unsqueeze(0)  # (1, heads, N, N)
        with no_autocast(device):  # the logits in the softmax dtype
            if self.query_term:
                bias = encoding.query_logits(_given(q).to(dtype), h, w).add_(bias)  # (B, heads, N, N)
            if self.key_term:
                bias = encoding.key_logits(_given(k).to(dtype), h, w).add_(bias)
        return bias

    def _per_head(self, linear: nn.Linear, x: Tensor) -> Tensor:
        """Per-head query or key projection: ``(B, H, W, D)`` -> ``(B, heads, N, D)``."""
        b, h, w, d = x.shape
        return linear(x).reshape(b, h * w, self.heads, d).transpose(1, 2)

    def extra_repr(self) -> str:
        enc = type(self.encoding).__name__ if self.encoding is not None else None
        return (
            f"dim={self.dim}, heads={self.heads}, out_dim={self.out_dim}, encoding={enc}, "
            f"content={self.content}, query_term={self.query_term}, key_term={self.key_term}, "
            f"impl={self._impl}"
        )


# the computation of each ``impl`` (the module docstring), one method each
_COMPUTATIONS = {
    "reference": MultiHeadSelfAttention2d._reference,
    "shared": MultiHeadSelfAttention2d._shared,
    "separable": MultiHeadSelfAttention2d._separable,
    "sdpa": MultiHeadSelfAttention2d._sdpa,
    "tiled": MultiHeadSelfAttention2d._tiled,
}


def _softmax_dtype(x: Tensor) -> torch.dtype:
    """float32 for float32, bfloat16 and float16 activations; float64 for float64."""
    return torch.promote_types(x.dtype, torch.float32)


def _given(value: _T | None) -> _T:
    """``value``, which the layer's construction guarantees where this is called (an encoding without
    content, queries and keys with content): said to the type checker, checked once here."""
    assert value is not None, "a part the layer's configuration guarantees is missing"
    return value
