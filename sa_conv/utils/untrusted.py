"""Structure read from a file, bounded before anything uses it.

Every reader of untrusted data (checkpoint state, YAML, JSON, safetensors metadata, manifests, results
files) decodes through here or checks what it decoded with ``check_bounds``: nesting deeper than
``MAX_DEPTH`` or more than ``MAX_VALUES`` values (a YAML alias bomb counts every reference it makes) is
refused with one ``UntrustedInputError`` before any recursive code walks it; a decoder's own
``RecursionError`` or ``MemoryError`` is reported the same way. Values quoted in its messages are cut short
(``sa_conv.utils.quote``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sa_conv.utils.quote import quoted

__all__ = [
    "MAX_DEPTH",
    "MAX_TEXT_BYTES",
    "MAX_VALUES",
    "UntrustedInputError",
    "check_bounds",
    "finite_number",
    "load_json",
    "load_yaml",
    "read_bounded",
]

MAX_DEPTH = 64  # the deepest nesting any file of the suite has is under 10
MAX_VALUES = 2_000_000  # the largest results file holds about 110,000 values
MAX_TEXT_BYTES = 256 * 2**20  # a results JSON is a few MB, a config a few KB


class UntrustedInputError(ValueError):
    """Data from a file is not what the suite reads: too deep, too large, or of the wrong kind."""


def check_bounds(
    value: object, what: str, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES
) -> None:
    """Refuse ``value`` (decoded data: dicts, lists, tuples, scalars) nested deeper than ``max_depth`` or
    holding more than ``max_values`` values, counting a shared node once per reference; iterative, so it
    never recurses itself, and it stops as soon as a bound is passed."""
    stack: list[tuple[object, int]] = [(value, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > max_values:
            raise UntrustedInputError(f"{what} holds over {max_values:,} values: not a file the suite wrote")
        if isinstance(node, Mapping | list | tuple):
            if depth > max_depth:
                raise UntrustedInputError(
                    f"{what} is nested over {max_depth} levels deep: not a file the suite wrote"
                )
            children = node.values() if isinstance(node, Mapping) else node
            if len(children) > max_values:
                raise UntrustedInputError(
                    f"{what} holds over {max_values:,} values: not a file the suite wrote"
                )
            stack.extend((child, depth + 1) for child in children)


def read_bounded(path: Path, what: str, *, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a file, refused unread (``UntrustedInputError``) when it takes over ``max_bytes``;
    at most ``max_bytes`` are read even if it grows meanwhile."""
    if path.is_file() and path.stat().st_size > max_bytes:
        raise UntrustedInputError(f"{what} takes over {max_bytes:,} bytes: not a file the suite wrote")
    with path.open("rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UntrustedInputError(f"{what} takes over {max_bytes:,} bytes: not a file the suite wrote")
    return data


def load_json(text: str | bytes, what: str, *, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """JSON text decoded and bounded (``check_bounds``); ``UntrustedInputError`` names ``what`` and the
    problem (too long, not JSON, too deep, too large). ``NaN`` and the infinities decode as floats."""

    def malformed(err: Exception) -> str | None:
        return f"not valid JSON ({str(err)[:80]})" if isinstance(err, ValueError) else None  # or not UTF-8

    return _decoded(text, what, max_bytes, json.loads, malformed)


def load_yaml(text: str, what: str, *, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """YAML text (safe: plain data only) decoded and bounded like ``load_json``; an alias bomb is counted
    reference by reference, so it is refused after ``MAX_VALUES`` of them, never expanded."""
    import yaml

    def malformed(err: Exception) -> str | None:
        if not isinstance(err, yaml.YAMLError):
            return None
        return f"not valid YAML ({str(err).splitlines()[0][:80]})"

    return _decoded(text, what, max_bytes, yaml.safe_load, malformed)


def _decoded(
    text: str | bytes,
    what: str,
    max_bytes: int,
    decode: Callable[[Any], Any],
    malformed: Callable[[Exception], str | None],
) -> Any:
    """``decode(text)`` refused before it starts when too long, and after when too deep, too large or
    ``malformed`` (the format's own errors, said in a few words), then bounded (``check_bounds``)."""
    if len(text) > max_bytes:
        raise UntrustedInputError(f"{what} takes over {max_bytes:,} bytes: not a file the suite wrote")
    try:
        value = decode(text)
    except RecursionError:
        raise UntrustedInputError(
            f"{what} is nested too deeply to read: not a file the suite wrote"
        ) from None
    except MemoryError:
        raise UntrustedInputError(f"{what} is too large to read: not a file the suite wrote") from None
    except Exception as err:
        said = malformed(err)
        if said is None:
            raise
        raise UntrustedInputError(f"{what} is {said}") from None
    check_bounds(value, what)
    return value


def finite_number(value: object, what: str, *, low: float = -math.inf, high: float = math.inf) -> float:
    """``value`` as a float when it is a number (not a boolean) that is finite and in ``[low, high]``;
    ``UntrustedInputError`` naming ``what`` and the value, cut short, otherwise (an integer too large for
    a float included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UntrustedInputError(f"{what} is {quoted(value)}, not a number")
    try:
        number = float(value)
    except OverflowError:
        raise UntrustedInputError(f"{what} is {quoted(value)}, out of range") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise UntrustedInputError(f"{what} is {quoted(value)}, not a number in [{low:g}, {high:g}]")
    return number
