"""The computations ``MultiHeadSelfAttention2d`` can choose between, by name, torch-free (configs and
command lines read them)."""

from __future__ import annotations

import typing
from typing import Literal

__all__ = ["IMPLS", "Impl"]

Impl = Literal["auto", "reference", "shared", "separable", "sdpa", "tiled"]
IMPLS: tuple[str, ...] = typing.get_args(Impl)
