"""Relative positional encodings: per-head logits that depend only on the shift delta = key - query.

Every encoding maps a grid size to a ``(heads, N, N)`` tensor of positional logits, N = height * width
in row-major order, entry ``[h, q, k]`` the logit of head h for query q and key k. Shifts are
``(dy, dx) = key - query`` in token-grid pixels.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "CompositeRelativeEncoding",
    "GaussianEncoding",
    "LearnedRelativeEncoding",
    "PositionalEncoding",
    "QuadraticEncoding",
    "relative_shifts",
]


def relative_shifts(height: int, width: int, device: torch.device | None = None) -> Tensor:
    """All shifts key - query of an height x width grid, row-major: ``(N, N, 2)`` as (dy, dx)."""
    ys, xs = torch.meshgrid(
        torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij"
    )
    pos = torch.stack([ys.flatten(), xs.flatten()], dim=-1)  # (N, 2)
    return pos[None, :, :] - pos[:, None, :]  # (N_q, N_k, 2)


def _axis_shifts(size: int, device: torch.device) -> Tensor:
    """Shifts key - query along one axis: ``(size, size)`` with entry [q, k] = k - q."""
    idx = torch.arange(size, device=device)
    return idx[None, :] - idx[:, None]


def _check_heads(heads: int) -> None:
    if not isinstance(heads, int) or heads <= 0:
        raise ValueError(f"heads must be a positive integer, got {heads!r}")


class PositionalEncoding(nn.Module):
    """Base class: ``logits(height, width) -> (heads, N, N)``."""

    heads: int

    def logits(self, height: int, width: int) -> Tensor:
        """Positional logits ``(heads, N, N)`` of an height x width token grid."""
        raise NotImplementedError

    def forward(self, height: int, width: int) -> Tensor:
        return self.logits(height, width)


class QuadraticEncoding(PositionalEncoding):
    """Isotropic quadratic encoding: logit_h(delta) = -alpha_h * ||delta - centre_h||^2.

    Parameters (paper init): ``centres`` (heads, 2) ~ N(0, std^2) in (dy, dx), ``spread`` s_h ~
    1 + N(0, 0.01^2), with alpha_h = s_h^2 / 2 (inverse covariance s_h^2 I).
    """

    def __init__(self, heads: int, *, centre_std: float = 2.0, spread_std: float = 0.01) -> None:
        super().__init__()
        _check_heads(heads)
        self.heads = heads
        self.centres = nn.Parameter(torch.randn(heads, 2) * centre_std)  # (heads, 2) as (dy, dx)
        self.spread = nn.Parameter(1.0 + torch.randn(heads) * spread_std)  # (heads,)

    @property
    def alpha(self) -> Tensor:
        """Per-head sharpness alpha_h = s_h^2 / 2, shape ``(heads,)``."""
        return self.spread.square() / 2

    @torch.no_grad()
    def set_(self, centres: Tensor, alpha: float | Tensor) -> QuadraticEncoding:
        """Set centres ``(heads, 2)`` and sharpness alpha (scalar or ``(heads,)``) in place."""
        centres = torch.as_tensor(centres, dtype=self.centres.dtype)
        if centres.shape != self.centres.shape:
            raise ValueError(
                f"centres must have shape {tuple(self.centres.shape)}, got {tuple(centres.shape)}"
            )
        alpha = torch.as_tensor(alpha, dtype=self.spread.dtype).expand(self.heads)
        if not bool((alpha > 0).all()):
            raise ValueError("alpha must be positive")
        self.centres.copy_(centres)
        self.spread.copy_((2 * alpha).sqrt())
        return self

    def logits(self, height: int, width: int) -> Tensor:
        delta = relative_shifts(height, width, self.centres.device).to(self.centres.dtype)
        diff = delta[None] - self.centres[:, None, None, :]  # (heads, N, N, 2)
        return -self.alpha[:, None, None] * diff.square().sum(-1)  # (heads, N, N)

    def axis_logits(self, height: int, width: int) -> tuple[Tensor, Tensor]:
        """Separable factors: row ``(heads, H, H)`` and column ``(heads, W, W)`` logits whose sum
        ``row[h, qy, ky] + col[h, qx, kx]`` equals ``logits(...)[h, q, k]``."""
        device, dtype = self.centres.device, self.centres.dtype
        alpha = self.alpha[:, None, None]
        dy = _axis_shifts(height, device).to(dtype)[None] - self.centres[:, 0, None, None]
        dx = _axis_shifts(width, device).to(dtype)[None] - self.centres[:, 1, None, None]
        return -alpha * dy.square(), -alpha * dx.square()


class GaussianEncoding(PositionalEncoding):
    """Generalized quadratic encoding: logit = -1/2 (delta - c_h)^T S_h S_h^T (delta - c_h).

    Parameters (paper init): ``centres`` (heads, 2) ~ N(0, std^2), ``scale`` S_h (heads, 2, 2) ~
    I + N(0, 0.01^2); the inverse covariance S_h S_h^T is positive semi-definite by construction.
    """

    def __init__(self, heads: int, *, centre_std: float = 2.0, scale_std: float = 0.01) -> None:
        super().__init__()
        _check_heads(heads)
        self.heads = heads
        self.centres = nn.Parameter(torch.randn(heads, 2) * centre_std)  # (heads, 2)
        self.scale = nn.Parameter(torch.eye(2).expand(heads, 2, 2) + torch.randn(heads, 2, 2) * scale_std)

    @property
    def inverse_covariance(self) -> Tensor:
        """S_h S_h^T, shape ``(heads, 2, 2)``."""
        return self.scale @ self.scale.transpose(-1, -2)

    @torch.no_grad()
    def degenerate_heads(self, max_condition: float = 1000.0, min_eigenvalue: float = 1e-5) -> Tensor:
        """Boolean ``(heads,)``: inverse covariance with condition number > 1000 or largest
        eigenvalue < 1e-5 (the paper's pruning rule)."""
        eig = torch.linalg.eigvalsh(self.inverse_covariance.double())  # (heads, 2) ascending
        small, large = eig[:, 0].clamp_min(0), eig[:, 1]
        condition = large / small.clamp_min(torch.finfo(torch.float64).tiny)
        return (condition > max_condition) | (large < min_eigenvalue)

    def logits(self, height: int, width: int) -> Tensor:
        delta = relative_shifts(height, width, self.centres.device).to(self.centres.dtype)
        diff = delta[None] - self.centres[:, None, None, :]  # (heads, N, N, 2)
        quad = torch.einsum("hqki,hij,hqkj->hqk", diff, self.inverse_covariance, diff)
        return -0.5 * quad  # (heads, N, N)


class LearnedRelativeEncoding(PositionalEncoding):
    """Learned relative encoding (positional only): logit = key_row_h . row[dy] + key_col_h . col[dx].

    ``row`` and ``col`` are tables of ``2 * max_size - 1`` learned vectors of width ``dim`` shared by
    the heads; each head has its own row and column key vectors. No scaling.
    """

    def __init__(self, heads: int, dim: int, *, max_size: int = 16, init_std: float = 0.02) -> None:
        super().__init__()
        _check_heads(heads)
        if dim <= 0 or max_size <= 0:
            raise ValueError(f"dim and max_size must be positive, got dim={dim}, max_size={max_size}")
        self.heads, self.dim, self.max_size = heads, dim, max_size
        self.row = nn.Parameter(torch.randn(2 * max_size - 1, dim) * init_std)  # (2M-1, D)
        self.col = nn.Parameter(torch.randn(2 * max_size - 1, dim) * init_std)  # (2M-1, D)
        self.key_row = nn.Parameter(torch.randn(heads, dim) * init_std)  # (heads, D)
        self.key_col = nn.Parameter(torch.randn(heads, dim) * init_std)  # (heads, D)

    def _check_size(self, height: int, width: int) -> None:
        for name, size in (("height", height), ("width", width)):
            if size > self.max_size:
                raise ValueError(
                    f"{name}={size} exceeds the learned relative encoding's max_size={self.max_size}"
                )

    def _scores(self) -> tuple[Tensor, Tensor]:
        """Score of every row shift and column shift: two ``(heads, 2M-1)`` tensors."""
        return self.key_row @ self.row.T, self.key_col @ self.col.T

    def logits(self, height: int, width: int) -> Tensor:
        self._check_size(height, width)
        row_scores, col_scores = self._scores()
        delta = relative_shifts(height, width, self.row.device) + (self.max_size - 1)  # (N, N, 2)
        return row_scores[:, delta[..., 0]] + col_scores[:, delta[..., 1]]  # (heads, N, N)

    def axis_logits(self, height: int, width: int) -> tuple[Tensor, Tensor]:
        """Row ``(heads, H, H)`` and column ``(heads, W, W)`` logits; their sum is the full logit."""
        self._check_size(height, width)
        row_scores, col_scores = self._scores()
        m = self.max_size - 1
        dy = _axis_shifts(height, self.row.device) + m  # (H, H) table index
        dx = _axis_shifts(width, self.col.device) + m  # (W, W)
        return row_scores[:, dy], col_scores[:, dx]


class CompositeRelativeEncoding(PositionalEncoding):
    """Composite attention's relative terms (Chang et al., ACL 2021), in 2D.

    ``logit = b_h[clip(delta)] + q_h . w[clip(delta)] / sqrt(dim)``: a fixed relative bias table per
    head (a lightweight convolution) and a query-dependent term (a dynamic convolution), with the shift
    clipped to the window ``[-window, window]^2`` (``mask=False``: shifts beyond it take the edge entry)
    or masked there (``mask=True``: keys outside the window get logit -inf, a K x K local attention).
    ``logits`` is the input-independent bias term; ``query_logits`` the query-dependent one.
    """

    def __init__(
        self,
        heads: int,
        dim: int,
        *,
        window: int = 7,
        mask: bool = False,
        query_term: bool = True,
        bias_term: bool = True,
        init_std: float = 0.02,
    ) -> None:
        super().__init__()
        _check_heads(heads)
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        if not (query_term or bias_term):
            raise ValueError("a composite encoding needs the query term, the bias term or both")
        self.heads, self.dim, self.window, self.mask = heads, dim, window, mask
        size = 2 * window + 1
        self.bias = nn.Parameter(torch.randn(heads, size, size) * init_std) if bias_term else None
        self.rel = nn.Parameter(torch.randn(size, size, dim) * init_std) if query_term else None

    @property
    def query_dependent(self) -> bool:
        """Whether there is a query-dependent term (the layer must project queries)."""
        return self.rel is not None

    def _table_index(self, height: int, width: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """Row-major table index ``(N, N)`` of every clipped shift, and the in-window mask ``(N, N)``."""
        delta = relative_shifts(height, width, device)  # (N, N, 2)
        inside = (delta.abs() <= self.window).all(-1)
        clipped = delta.clamp(-self.window, self.window) + self.window
        return clipped[..., 0] * (2 * self.window + 1) + clipped[..., 1], inside

    def logits(self, height: int, width: int) -> Tensor:
        device = (self.bias if self.bias is not None else self.rel).device
        index, inside = self._table_index(height, width, device)
        n = height * width
        out = torch.zeros(
            self.heads, n, n, device=device, dtype=(self.bias if self.bias is not None else self.rel).dtype
        )
        if self.bias is not None:
            out = out + self.bias.flatten(1)[:, index]  # (heads, N, N)
        if self.mask:
            out = out.masked_fill(~inside, float("-inf"))
        return out

    def query_logits(self, q: Tensor, height: int, width: int) -> Tensor:
        """``q_h . w[clip(delta)] / sqrt(dim)`` for queries ``q (B, heads, N, dim)``: ``(B, heads, N, N)``."""
        if self.rel is None:
            raise ValueError("this composite encoding has no query-dependent term")
        index, _ = self._table_index(height, width, q.device)
        table = F.embedding(index, self.rel.flatten(0, 1)).to(q.dtype)  # (N, N, D): w[clip(k - q)]
        return torch.einsum("bhqd,qkd->bhqk", q / math.sqrt(self.dim), table)  # (B, heads, N, N)
