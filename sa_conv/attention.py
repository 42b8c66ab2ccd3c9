"""2D multi-head self-attention over a channels-last token grid, with full-width heads (the paper's).

Head h computes ``P_h X`` at full width ``dim``; the heads are concatenated ``(heads * dim)`` and one
``Linear(heads * dim, out_dim)`` maps back. The logit of head h is its positional logit (from a
relative encoding), plus ``q_h . k_h / sqrt(dim)`` when ``content=True``.

Computations (``impl``):
- ``"reference"``: the literal formula. Materialize ``(B, heads, N, N)`` logits, softmax over keys,
  dropout, weighted sum. The oracle for every other path and the benchmark baseline.
- ``"shared"``: positional-only encodings; the probabilities do not depend on the input, so one
  ``(heads, N, N)`` tensor serves the whole batch.
- ``"separable"``: positional-only encodings whose logit is a row term plus a column term (quadratic,
  learned relative): the softmax factors into a row and a column softmax, applied as two small
  contractions, O(N (H + W)) per channel instead of O(N^2), fused with the projection so that only
  the input is kept for backward (sa_conv.separable).
- ``"sdpa"``: content attention through ``F.scaled_dot_product_attention`` with the positional
  logits as a float bias (``auto`` takes it on CUDA; on CPU it measured no faster than the reference).
- ``"auto"`` (default): the fastest exact path. Attention dropout on the full matrix neither factors
  nor shares across the batch, so while it is active (training with ``attn_dropout > 0``) ``auto``
  takes the reference computation; the fast paths are exact, not approximations.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sa_conv.encodings import PositionalEncoding
from sa_conv.separable import separable_attention_projection

__all__ = ["IMPLS", "Impl", "MultiHeadSelfAttention2d"]

Impl = Literal["auto", "reference", "shared", "separable", "sdpa"]
IMPLS: tuple[str, ...] = ("auto", "reference", "shared", "separable", "sdpa")


class MultiHeadSelfAttention2d(nn.Module):
    """Multi-head self-attention on ``(B, H, W, dim)`` token grids with relative positional logits."""

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
    ) -> None:
        super().__init__()
        if not isinstance(heads, int) or heads <= 0:
            raise ValueError(f"heads must be a positive integer, got {heads!r}")
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
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
        self.query_term = bool(getattr(encoding, "query_dependent", False))  # composite q . w[delta]
        if content or self.query_term:
            self.query = nn.Linear(dim, heads * dim)
        if content:
            self.key = nn.Linear(dim, heads * dim)
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.proj = nn.Linear(heads * dim, self.out_dim, bias=bias)
        self.impl: Impl = impl

    # ------------------------------------------------------------------ public API

    @property
    def impl(self) -> Impl:
        """The requested computation (``"auto"`` picks one per call)."""
        return self._impl

    @impl.setter
    def impl(self, value: Impl) -> None:
        if value not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {value!r}")
        if value in ("shared", "separable") and self.input_dependent:
            raise ValueError(f"impl={value!r} needs input-independent attention (no content, no query term)")
        if value == "separable" and not hasattr(self.encoding, "axis_logits"):
            raise ValueError(
                f"impl='separable' needs a separable encoding, got {type(self.encoding).__name__}"
            )
        if value == "sdpa" and not self.input_dependent:
            raise ValueError("impl='sdpa' needs input-dependent attention (content=True or a query term)")
        self._impl = value

    @property
    def input_dependent(self) -> bool:
        """Whether the attention probabilities depend on the input (content or a query term)."""
        return self.content or self.query_term

    def resolved_impl(self, device: torch.device | str = "cpu") -> str:
        """The computation the next forward call on ``device`` will use."""
        if self._impl != "auto":
            return self._impl
        if self.attn_dropout.p > 0 and self.training:
            return "reference"
        if self.input_dependent:  # fused SDPA kernels with a float bias exist on CUDA; on CPU it is no faster
            return "sdpa" if torch.device(device).type == "cuda" else "reference"
        return "separable" if hasattr(self.encoding, "axis_logits") else "shared"

    def logits(self, x: Tensor) -> Tensor:
        """Attention logits ``(B, heads, N, N)``, or ``(1, heads, N, N)`` when input-independent."""
        _, h, w, _ = self._check_input(x)
        if not self.input_dependent:
            return self.encoding.logits(h, w).unsqueeze(0).to(x.dtype)  # (1, heads, N, N)
        q = self._project(self.query, x)  # (B, heads, N, D)
        bias = self._bias(q, h, w)  # (1|B, heads, N, N) or None
        if not self.content:
            return bias
        k = self._project(self.key, x)  # (B, heads, N, D)
        logits = (q / math.sqrt(self.dim)) @ k.transpose(-1, -2)  # (B, heads, N, N)
        return logits if bias is None else logits.add_(bias)  # in place: one pass over (B, heads, N, N)

    def probabilities(self, x: Tensor) -> Tensor:
        """Attention probabilities before dropout: ``(B, heads, N, N)`` or ``(1, heads, N, N)``."""
        return self.logits(x).softmax(dim=-1)

    def forward(self, x: Tensor, return_attention: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """``x`` ``(B, H, W, dim)`` -> ``(B, H, W, out_dim)`` [, probabilities ``(B|1, heads, N, N)``]."""
        b, h, w, d = self._check_input(x)
        impl = self.resolved_impl(x.device)
        probs = None
        if impl == "reference":
            probs = self.probabilities(x)  # (B|1, heads, N, N)
            dropped = probs
            if self.training and self.attn_dropout.p > 0:
                dropped = self.attn_dropout(probs.expand(b, -1, -1, -1))  # (B, heads, N, N)
            heads_out = dropped @ x.reshape(b, 1, h * w, d)  # (B, heads, N, D)
            heads_out = heads_out.transpose(1, 2)  # (B, N, heads, D)
        elif impl == "shared":
            probs = self.probabilities(x)[0]  # (heads, N, N)
            heads_out = torch.einsum("hqk,bkd->bqhd", probs, x.reshape(b, h * w, d))
            probs = probs.unsqueeze(0)
        elif impl == "separable":
            row, col = self.encoding.axis_logits(h, w)  # (heads, H, H), (heads, W, W)
            row, col = row.to(x.dtype).softmax(-1), col.to(x.dtype).softmax(-1)
            y = separable_attention_projection(x, row, col, self.proj.weight, self.proj.bias)
            return (y, self.probabilities(x)) if return_attention else y
        else:  # sdpa
            q = self._project(self.query, x)  # (B, heads, N, D)
            bias = self._bias(q, h, w)  # (1|B, heads, N, N) or None
            v = x.reshape(b, 1, h * w, d).expand(b, self.heads, h * w, d)  # (B, heads, N, D)
            if self.content:
                k = self._project(self.key, x)  # (B, heads, N, D)
                heads_out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            else:  # no content logit: the bias alone
                heads_out = bias.to(v.dtype).softmax(-1) @ v
            heads_out = heads_out.transpose(1, 2)  # (B, N, heads, D)
        y = self.proj(heads_out.reshape(b, h, w, self.heads * d))  # (B, H, W, out_dim)
        if not return_attention:
            return y
        if probs is None:
            probs = self.probabilities(x)
        return y, probs

    # ------------------------------------------------------------------ internals

    def _check_input(self, x: Tensor) -> tuple[int, int, int, int]:
        if x.ndim != 4:
            raise ValueError(f"x must be (B, H, W, dim) channels-last, got shape {tuple(x.shape)}")
        if x.shape[-1] != self.dim:
            raise ValueError(f"x has {x.shape[-1]} channels in its last dim, the layer has dim={self.dim}")
        b, h, w, d = x.shape
        return b, h, w, d

    def _bias(self, q: Tensor, h: int, w: int) -> Tensor | None:
        """Every logit term but content: positional (+ composite query term); None if there is none."""
        if self.encoding is None:
            return None
        bias = self.encoding.logits(h, w).unsqueeze(0).to(q.dtype)  # (1, heads, N, N)
        if self.query_term:
            bias = self.encoding.query_logits(q, h, w).add_(bias)  # (B, heads, N, N)
        return bias

    def _project(self, linear: nn.Linear, x: Tensor) -> Tensor:
        """Per-head query or key projection: ``(B, H, W, D)`` -> ``(B, heads, N, D)``."""
        b, h, w, d = x.shape
        return linear(x).reshape(b, h * w, self.heads, d).transpose(1, 2)

    def extra_repr(self) -> str:
        enc = type(self.encoding).__name__ if self.encoding is not None else None
        return (
            f"dim={self.dim}, heads={self.heads}, out_dim={self.out_dim}, encoding={enc}, "
            f"content={self.content}, query_term={self.query_term}, impl={self._impl}"
        )
