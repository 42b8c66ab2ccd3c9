"""Decoded JSON values from files: their type checked (a boolean is not a number) and named for messages."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_json", "is_json", "json_kind"]


def is_json(value: Any, kind: type | tuple[type, ...]) -> bool:
    """``isinstance``, a JSON ``true``/``false`` not counting as a number."""
    return isinstance(value, kind) and not isinstance(value, bool)


def json_kind(value: Any) -> str:
    """What a decoded JSON value (or a field's type, or the first of its types) is, for messages:
    ``a list``, ``null``."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number"}
    if isinstance(value, tuple):
        value = value[0]
    if isinstance(value, type):
        value = value()  # an instance names its type: {} an object, 0 a number
    return "null" if value is None else names.get(type(value), "a number")


def finite_json(value: Any) -> Any:
    """``value`` with each NaN or infinite float as None (``null``): what a strict JSON parser reads."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value
