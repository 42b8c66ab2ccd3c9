"""The layout of a locality history as a file holds it, checked before anything reads it.

A run's locality history (``maps.locality_snapshot`` at each recorded step) travels in its checkpoints
and in the metadata of its shipped weights. A file is data from anywhere: ``check_history`` holds the
history it brings to the layout the snapshots are written in, so a malformed one is refused in one line
naming where it is wrong instead of failing deep inside a figure.
"""

from __future__ import annotations

from typing import Any

from sa_conv.utils.json_values import is_json
from sa_conv.utils.safe_load import CheckpointError

__all__ = ["check_history"]

# per layer: the per-head lists every snapshot holds, and the optional ones (older records lack them)
_PER_HEAD = ("mean_distance", "peak_mass")
_OPTIONAL_PER_HEAD = {"peak_shift": 2, "centres": 2}  # each head's (dy, dx)


def check_history(history: Any, source: str) -> list[dict[str, Any]]:
    """``history`` if it has the layout of a locality history; else ``CheckpointError`` naming ``source``
    (the file it came from) and the first place it is wrong."""
    if not isinstance(history, list):
        raise CheckpointError(f"{source}: its locality history is not a list")
    depth = None
    for i, snapshot in enumerate(history):
        where = f"{source}: locality snapshot {i}"
        if not isinstance(snapshot, dict) or not _integer(snapshot.get("step")):
            raise CheckpointError(f"{where} is not an object with an integer 'step'")
        layers = snapshot.get("layers")
        if not isinstance(layers, list) or not layers:
            raise CheckpointError(f"{where} has no 'layers' list")
        if depth is not None and len(layers) != depth:
            raise CheckpointError(f"{where} lists {len(layers)} layers, snapshot 0 {depth}")
        depth = len(layers)
        for j, layer in enumerate(layers, 1):
            problem = _layer_problem(layer)
            if problem:
                raise CheckpointError(f"{where}, layer {j}: {problem}")
    return history


def _layer_problem(layer: Any) -> str | None:
    """What is wrong with one layer of a snapshot, or None."""
    if not isinstance(layer, dict):
        return "not an object"
    heads = None
    for key in _PER_HEAD:
        values = layer.get(key)
        if not isinstance(values, list) or not values or not all(_number(v) for v in values):
            return f"{key!r} is not a list of numbers, one per head"
        if heads is not None and len(values) != heads:
            return f"{key!r} has {len(values)} entries, {_PER_HEAD[0]!r} {heads}"
        heads = len(values)
    if "centre_grad_norm" in layer and not (
        isinstance(layer["centre_grad_norm"], list)
        and len(layer["centre_grad_norm"]) == heads
        and all(_number(v) for v in layer["centre_grad_norm"])
    ):
        return f"'centre_grad_norm' is not {heads} numbers"
    for key, width in _OPTIONAL_PER_HEAD.items():
        if key in layer and not _is_rows(layer[key], heads, width):
            return f"{key!r} is not {heads} pairs of numbers"
    if "inverse_covariance" in layer and not (
        isinstance(layer["inverse_covariance"], list)
        and len(layer["inverse_covariance"]) == heads
        and all(_is_rows(m, 2, 2) for m in layer["inverse_covariance"])
    ):
        return f"'inverse_covariance' is not {heads} 2x2 matrices"
    if ("overlap" in layer) != ("coverage" in layer):  # recorded together, read together
        return "holds one of 'overlap' and 'coverage' without the other"
    for key in ("overlap", "coverage"):
        if key in layer and not _number(layer[key]):
            return f"{key!r} is not a number"
    return None


def _is_rows(value: Any, rows: int | None, width: int) -> bool:
    """``value`` is a list of ``rows`` lists of ``width`` numbers."""
    return (
        isinstance(value, list)
        and len(value) == rows
        and all(isinstance(r, list) and len(r) == width and all(_number(v) for v in r) for r in value)
    )


def _number(value: Any) -> bool:
    """A JSON number."""
    return is_json(value, (int, float))


def _integer(value: Any) -> bool:
    """A JSON integer."""
    return is_json(value, int)
