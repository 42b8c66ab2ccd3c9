"""Values quoted in messages, cut short: a value read from a file or a flag is never printed whole."""

from __future__ import annotations

import reprlib

__all__ = ["quoted"]


def _short_repr() -> reprlib.Repr:
    """A ``reprlib.Repr`` that shows at most two levels and three items of each container."""
    short = reprlib.Repr()
    short.maxlevel = 2
    for name in ("maxtuple", "maxlist", "maxarray", "maxdict", "maxset", "maxfrozenset", "maxdeque"):
        setattr(short, name, 3)
    short.maxstring = short.maxlong = short.maxother = 40
    return short


_SHORT = _short_repr()


def quoted(value: object, limit: int = 48) -> str:
    """``repr(value)`` in at most ``limit`` characters; containers, strings and numbers of any size and
    depth (shared references too) are read only as far as the quote shows them."""
    try:
        text = _SHORT.repr(value)
    except (ValueError, RecursionError, MemoryError):  # an int past Python's digit limit, say
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
