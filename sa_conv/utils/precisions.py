"""The precisions a run trains in, by name: one literal type, owned here (no torch: configs import it)."""

from __future__ import annotations

import typing
from typing import Literal

__all__ = ["AUTO", "BF16", "FLOAT32", "HALF", "LOW_PRECISIONS", "PRECISIONS", "Precision", "is_precision"]

Precision = Literal["auto", "32-true", "bf16-mixed", "16-mixed"]
PRECISIONS: tuple[Precision, ...] = typing.get_args(Precision)
AUTO: Precision = (
    "auto"  # bf16-mixed where bf16 is native, else 32-true (``utils.machine.resolve_precision``)
)
FLOAT32: Precision = "32-true"
BF16: Precision = "bf16-mixed"  # the project's contract (``training.precision``)
HALF: Precision = "16-mixed"
LOW_PRECISIONS: tuple[Precision, ...] = (BF16, HALF)  # products in 16 bits


def is_precision(value: object) -> typing.TypeGuard[Precision]:
    """Whether ``value`` names a precision."""
    return value in PRECISIONS
