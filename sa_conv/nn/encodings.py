"""Relative positional encodings: per-head logits that depend only on the shift delta = key - query.

Every encoding maps a grid size to a ``(heads, N, N)`` tensor of positional logits, N = height * width
in row-major order, entry ``[h, q, k]`` the logit of head h for query q and key k. Shifts are
``(dy, dx) = key - query`` in token-grid pixels.

Optional capabilities are declared on the class, and the attention layer asks for them (never
``hasattr``): ``separable`` (``axis_logits``: a row term plus a column term), ``query_dependent``
(``query_logits``: a term that reads the query's features), ``key_dependent`` (``key_logits``), and
``weight_decay`` (False: the paper's code exempts the parameters from weight decay). A new encoding is
one class here plus one line in ``sa_conv.nn.registry.ENCODINGS`` (torch-free; the four encodings here:
about 400 lines, kept together so that they read side by side).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sa_conv.nn.registry import ENCODINGS, EncodingEntry, EncodingLayer
from sa_conv.nn.tiled import ShiftTables
from sa_conv.utils.quote import quoted

__all__ = [
    "ENCODINGS",
    "CompositeRelativeEncoding",
    "EncodingEntry",
    "EncodingLayer",
    "GaussianEncoding",
    "LearnedRelativeEncoding",
    "PositionalEncoding",
    "QuadraticEncoding",
    "composite_for_layer",
    "interior_queries",
    "learned_for_layer",
    "relative_shifts",
    "spectrum",
]


def interior_queries(height: int, width: int, margin: int) -> Tensor:
    """Row-major indices of the queries at least ``margin`` pixels from every border."""
    ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    keep = (ys >= margin) & (ys < height - margin) & (xs >= margin) & (xs < width - margin)
    return (ys * width + xs)[keep]


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
    if not isinstance(heads, int) or isinstance(heads, bool) or heads <= 0:
        raise ValueError(f"heads must be a positive integer, got {quoted(heads)}")


class PositionalEncoding(nn.Module):
    """Base class: ``logits(height, width) -> (heads, N, N)``, and the capabilities it declares."""

    heads: int
    separable: bool = False  # axis_logits(height, width): row + column terms sum to the logits
    query_dependent: bool = False  # query_logits(q, height, width): a term of the query's features
    key_dependent: bool = False  # key_logits(k, height, width): a term of the key's features
    tabulated: bool = False  # shift_tables(height, width, device): those terms as tables of shifts
    weight_decay: bool = True  # False: exempt from weight decay (the paper's centres and spreads)
    head_parameters: tuple[str, ...] = ()  # parameters whose first dimension is the head (pruning)
    centre_parameter: str | None = None  # the per-head centres (heads, 2) it learns (head dynamics)
    spread_parameter: str | None = None  # the per-head spreads it learns (frozen by the lock-in test)

    def logits(self, height: int, width: int) -> Tensor:
        """Positional logits ``(heads, N, N)`` of an height x width token grid."""
        raise NotImplementedError

    def axis_logits(self, height: int, width: int) -> tuple[Tensor, Tensor]:
        """Row ``(heads, H, H)`` and column ``(heads, W, W)`` logits whose sum is the full logit."""
        raise NotImplementedError(f"{type(self).__name__} is not separable")

    def query_logits(self, q: Tensor, height: int, width: int) -> Tensor:
        """The query-dependent term for queries ``q (B, heads, N, D)``: ``(B, heads, N, N)``."""
        raise NotImplementedError(f"{type(self).__name__} has no query-dependent term")

    def key_logits(self, k: Tensor, height: int, width: int) -> Tensor:
        """The key-dependent term for keys ``k (B, heads, N, D)``: ``(B, heads, N, N)``."""
        raise NotImplementedError(f"{type(self).__name__} has no key-dependent term")

    def shift_tables(self, height: int, width: int, device: torch.device) -> ShiftTables:
        """The query- and key-dependent terms as tables of relative shifts (the tiled kernel's form)."""
        raise NotImplementedError(f"{type(self).__name__} has no tables of shifts")

    #: the paper's pruning rule for this encoding's heads, in words (None: no rule)
    degenerate_rule: str | None = None

    def degenerate_heads(self) -> Tensor | None:
        """Boolean ``(heads,)`` of heads the paper would prune, or None if the encoding has no rule."""
        return None

    def head_gaussians(self) -> tuple[Tensor, Tensor] | None:
        """Centres ``(heads, 2)`` and inverse covariances ``(heads, 2, 2)`` when every head is a Gaussian
        blob (logit = -1/2 (delta - c)^T A (delta - c)), else None. Detached."""
        return None

    @torch.no_grad()
    def select_heads(self, keep: Tensor) -> None:
        """Keep only the heads ``keep`` (indices, in order): slices every per-head parameter."""
        if not self.head_parameters:
            raise NotImplementedError(f"{type(self).__name__} cannot select heads")
        keep = torch.as_tensor(keep, dtype=torch.long)
        for name in self.head_parameters:
            param = getattr(self, name)
            if param is not None:
                setattr(self, name, nn.Parameter(param.detach()[keep.to(param.device)].clone()))
        self.heads = len(keep)

    def forward(self, height: int, width: int) -> Tensor:
        return self.logits(height, width)


class QuadraticEncoding(PositionalEncoding):
    """Isotropic quadratic encoding: logit_h(delta) = -alpha_h * ||delta - centre_h||^2.

    Parameters (the paper's init): ``centres`` (heads, 2) ~ N(0, std^2) in (dy, dx), ``spread`` s_h ~
    1 + N(0, 0.01^2), with alpha_h = s_h^2 / 2 (inverse covariance s_h^2 I).
    """

    separable = True
    weight_decay = False
    head_parameters = ("centres", "spread")
    centre_parameter, spread_parameter = "centres", "spread"

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
        if not bool(torch.isfinite(centres).all()):
            raise ValueError("centres must be finite")
        alpha = torch.as_tensor(alpha, dtype=self.spread.dtype).expand(self.heads)
        if not bool(((alpha > 0) & torch.isfinite(alpha)).all()):
            raise ValueError(f"alpha must be positive and finite, got {alpha.tolist()}")
        self.centres.copy_(centres)
        self.spread.copy_((2 * alpha).sqrt())
        return self

    degenerate_rule = "s^2 < 1e-5 (the isotropic inverse covariance s^2 I)"

    def degenerate_heads(self, min_eigenvalue: float = 1e-5) -> Tensor:
        """Boolean ``(heads,)``: the isotropic rule, inverse covariance s^2 I with s^2 < 1e-5."""
        return self.spread.detach().square() < min_eigenvalue

    def head_gaussians(self) -> tuple[Tensor, Tensor]:
        eye = torch.eye(2, device=self.spread.device, dtype=self.spread.dtype)
        return self.centres.detach(), self.spread.detach().square()[:, None, None] * eye  # A = s^2 I

    def logits(self, height: int, width: int) -> Tensor:
        delta = relative_shifts(height, width, self.centres.device).to(self.centres.dtype)
        diff = delta[None] - self.centres[:, None, None, :]  # (heads, N, N, 2)
        return -self.alpha[:, None, None] * diff.square().sum(-1)  # (heads, N, N)

    def axis_logits(self, height: int, width: int) -> tuple[Tensor, Tensor]:
        device, dtype = self.centres.device, self.centres.dtype
        alpha = self.alpha[:, None, None]
        dy = _axis_shifts(height, device).to(dtype)[None] - self.centres[:, 0, None, None]
        dx = _axis_shifts(width, device).to(dtype)[None] - self.centres[:, 1, None, None]
        return -alpha * dy.square(), -alpha * dx.square()


class GaussianEncoding(PositionalEncoding):
    """Generalized quadratic encoding: logit = -1/2 (delta - c_h)^T S_h S_h^T (delta - c_h).

    Parameters (the paper's init): ``centres`` (heads, 2) ~ N(0, std^2), ``scale`` S_h (heads, 2, 2) ~
    I + N(0, 0.01^2); the inverse covariance S_h S_h^T is positive semi-definite by construction.
    """

    weight_decay = False
    head_parameters = ("centres", "scale")
    centre_parameter, spread_parameter = "centres", "scale"

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

    degenerate_rule = "condition number > 1000 or largest eigenvalue < 1e-5 of the inverse covariance"

    @torch.no_grad()
    def degenerate_heads(self, max_condition: float = 1000.0, min_eigenvalue: float = 1e-5) -> Tensor:
        """Boolean ``(heads,)``: inverse covariance with condition number > 1000 or largest
        eigenvalue < 1e-5 (the paper's pruning rule)."""
        condition, large = spectrum(self.inverse_covariance)
        return ((condition > max_condition) | (large < min_eigenvalue)).to(self.centres.device)

    def head_gaussians(self) -> tuple[Tensor, Tensor]:
        return self.centres.detach(), self.inverse_covariance.detach()

    def logits(self, height: int, width: int) -> Tensor:
        delta = relative_shifts(height, width, self.centres.device).to(self.centres.dtype)
        diff = delta[None] - self.centres[:, None, None, :]  # (heads, N, N, 2)
        quad = torch.einsum("hqki,hij,hqkj->hqk", diff, self.inverse_covariance, diff)
        return -0.5 * quad  # (heads, N, N)


@torch.no_grad()
def spectrum(inverse_covariance: Tensor) -> tuple[Tensor, Tensor]:
    """Condition number and largest eigenvalue, each ``(heads,)`` in float64, of ``(heads, 2, 2)`` inverse
    covariances: what the paper's pruning rule reads."""
    eig = torch.linalg.eigvalsh(inverse_covariance.double())  # (heads, 2) ascending
    small, large = eig[:, 0].clamp_min(0), eig[:, 1]
    return large / small.clamp_min(torch.finfo(torch.float64).tiny), large


class LearnedRelativeEncoding(PositionalEncoding):
    """Learned relative encoding (positional only): logit = key_row_h . row[dy] + key_col_h . col[dx].

    ``row`` and ``col`` are tables of ``2 * max_size - 1`` learned vectors of width ``dim`` shared by
    the heads; each head has its own row and column key vectors. No scaling. Init as the paper's code:
    the tables are ``nn.Embedding`` (N(0, 1)) and the keys a default ``nn.Linear(dim, heads, bias=False)``
    (uniform in +-1/sqrt(dim)); ``init_std`` draws all four from N(0, init_std^2) instead (BERT's init).
    """

    separable = True
    head_parameters = ("key_row", "key_col")

    def __init__(self, heads: int, dim: int, *, max_size: int = 16, init_std: float | None = None) -> None:
        super().__init__()
        _check_heads(heads)
        if dim <= 0 or max_size <= 0:
            raise ValueError(f"dim and max_size must be positive, got dim={dim}, max_size={max_size}")
        self.heads, self.dim, self.max_size = heads, dim, max_size
        self.row = nn.Parameter(torch.empty(2 * max_size - 1, dim))  # (2M-1, D)
        self.col = nn.Parameter(torch.empty(2 * max_size - 1, dim))  # (2M-1, D)
        self.key_row = nn.Parameter(torch.empty(heads, dim))  # (heads, D)
        self.key_col = nn.Parameter(torch.empty(heads, dim))  # (heads, D)
        with torch.no_grad():
            if init_std is None:
                self.row.normal_()
                self.col.normal_()
                bound = 1 / math.sqrt(dim)
                self.key_row.uniform_(-bound, bound)
                self.key_col.uniform_(-bound, bound)
            else:
                for p in (self.row, self.col, self.key_row, self.key_col):
                    p.normal_(0.0, init_std)

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
        self._check_size(height, width)
        row_scores, col_scores = self._scores()
        m = self.max_size - 1
        dy = _axis_shifts(height, self.row.device) + m  # (H, H) table index
        dx = _axis_shifts(width, self.col.device) + m  # (W, W)
        return row_scores[:, dy], col_scores[:, dx]


class CompositeRelativeEncoding(PositionalEncoding):
    """Composite attention's relative terms (Chang et al., ACL 2021), in 2D.

    ``logit = b_h[clip(delta)] + q_h . w[clip(delta)] / sqrt(dim) (+ k_h . w'[clip(-delta)] / sqrt(dim))``:
    a fixed relative bias table per head (a lightweight convolution, ``convfixed``), a query-dependent
    term (a dynamic convolution, ``convq``) and optionally a key-dependent term (``convk``, the key at
    ``k`` reading the table at the reversed shift ``q - k``), the shift clipped to the window
    ``[-window, window]^2`` (``mask=False``: shifts beyond it take the edge entry) or masked there
    (``mask=True``: keys outside the window get logit -inf, a K x K local attention).

    Init as Chang et al.'s code: the bias table zeros, the query and key tables Kaiming-uniform (a = sqrt 5)
    over their relative positions, i.e. uniform in +-1/sqrt(P) with P = (2 window + 1)^2 positions in
    2D; ``init_std`` draws every table from N(0, init_std^2) instead (random instances in tests).
    """

    head_parameters = ("bias",)
    tabulated = True

    def __init__(
        self,
        heads: int,
        dim: int,
        *,
        window: int = 7,
        mask: bool = False,
        query_term: bool = True,
        bias_term: bool = True,
        key_term: bool = False,
        init_std: float | None = None,
    ) -> None:
        super().__init__()
        _check_heads(heads)
        if not isinstance(window, int) or window < 0:
            raise ValueError(f"window must be an integer >= 0, got {quoted(window)}")
        if not (query_term or bias_term or key_term):
            raise ValueError("a composite encoding needs at least one of the bias, query and key terms")
        self.heads, self.dim, self.window, self.mask = heads, dim, window, mask
        self.query_dependent, self.key_dependent = query_term, key_term
        size = 2 * window + 1
        self.bias = nn.Parameter(torch.zeros(heads, size, size)) if bias_term else None
        self.rel = nn.Parameter(torch.empty(size, size, dim)) if query_term else None
        self.rel_key = nn.Parameter(torch.empty(size, size, dim)) if key_term else None
        with torch.no_grad():
            for table in (self.bias, self.rel, self.rel_key):
                if table is not None and init_std is not None:
                    table.normal_(0.0, init_std)
                elif table is not None and table is not self.bias:
                    table.uniform_(-1 / size, 1 / size)  # 1 / sqrt(P), P = size^2

    def _parameter(self) -> Tensor:
        return next(t for t in (self.bias, self.rel, self.rel_key) if t is not None)

    def _table_index(self, height: int, width: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """Row-major table index ``(N, N)`` of every clipped shift, and the in-window mask ``(N, N)``."""
        delta = relative_shifts(height, width, device)  # (N, N, 2)
        inside = (delta.abs() <= self.window).all(-1)
        clipped = delta.clamp(-self.window, self.window) + self.window
        return clipped[..., 0] * (2 * self.window + 1) + clipped[..., 1], inside

    def logits(self, height: int, width: int) -> Tensor:
        param = self._parameter()
        index, inside = self._table_index(height, width, param.device)
        n = height * width
        out = torch.zeros(self.heads, n, n, device=param.device, dtype=param.dtype)
        if self.bias is not None:
            out = out + self.bias.flatten(1)[:, index]  # (heads, N, N)
        if self.mask:
            out = out.masked_fill(~inside, float("-inf"))
        return out

    def query_logits(self, q: Tensor, height: int, width: int) -> Tensor:
        """``q_h . w[clip(k - q)] / sqrt(dim)`` for queries ``q (B, heads, N, dim)``: ``(B, heads, N, N)``."""
        if self.rel is None:
            raise ValueError("this composite encoding has no query-dependent term")
        index, _ = self._table_index(height, width, q.device)
        table = F.embedding(index, self.rel.flatten(0, 1)).to(q.dtype)  # (N, N, D): w[clip(k - q)]
        return torch.einsum("bhqd,qkd->bhqk", q / math.sqrt(self.dim), table)  # (B, heads, N, N)

    def shift_tables(self, height: int, width: int, device: torch.device) -> ShiftTables:
        index, _ = self._table_index(height, width, device)
        rel, rel_key = (None if t is None else t.flatten(0, 1) for t in (self.rel, self.rel_key))
        return ShiftTables(index, rel, rel_key, 1 / math.sqrt(self.dim))  # tables (S, D)

    def key_logits(self, k: Tensor, height: int, width: int) -> Tensor:
        """``k_h . w'[clip(q - k)] / sqrt(dim)`` for keys ``k (B, heads, N, dim)``: ``(B, heads, N, N)``."""
        if self.rel_key is None:
            raise ValueError("this composite encoding has no key-dependent term")
        index, _ = self._table_index(height, width, k.device)
        table = F.embedding(index.T, self.rel_key.flatten(0, 1)).to(k.dtype)  # (N_q, N_k, D): w'[clip(q - k)]
        return torch.einsum("bhkd,qkd->bhqk", k / math.sqrt(self.dim), table)  # (B, heads, N, N)


def learned_for_layer(layer: EncodingLayer) -> LearnedRelativeEncoding:
    """The learned relative encoding of one layer (its tables as wide as the tokens, as long as the grid)."""
    return LearnedRelativeEncoding(layer.heads, layer.dim, max_size=layer.grid, init_std=layer.init_std)


def composite_for_layer(layer: EncodingLayer) -> CompositeRelativeEncoding:
    """The composite encoding of one layer (its window, clipped or masked, and its key term)."""
    return CompositeRelativeEncoding(
        layer.heads, layer.dim, window=layer.window, mask=layer.window_mask, key_term=layer.key_term
    )
