"""The locality record of a run, as typed records: one snapshot per recorded step (``LocalitySnapshot``, a
``LayerLocality`` per layer) and each layer's summary (``LayerSummary``).

A run's locality history travels in its checkpoints and in the metadata of its shipped weights, as plain
JSON-ready data (``to_json``). A file is data from anywhere: ``read_history`` is its one reader. It bounds
the structure first (``sa_conv.utils.untrusted``) and refuses, in one ``CheckpointError`` naming the file
and the first place it is wrong, a history that is not one, so nothing fails deep inside a figure.

New measures are new optional fields (default None): a record written before one existed reads with None
there, and ``to_json`` leaves out what is None, so old files keep their layout and read as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from sa_conv.utils.json_values import is_json
from sa_conv.utils.safe_load import CheckpointError
from sa_conv.utils.untrusted import UntrustedInputError, check_bounds

__all__ = ["LayerLocality", "LayerSummary", "LocalitySnapshot", "history_json", "read_history"]

Pair = tuple[float, float]
Matrix = tuple[Pair, Pair]


@dataclass(frozen=True, kw_only=True)
class LayerLocality:
    """One layer at one step, per head: mean attention distance, mass on its most attended pixel, that
    pixel's shift (dy, dx); the overlap (mean pairwise Jaccard index) and coverage (pixels) of the heads'
    half-mass regions; for Gaussian heads their centres and inverse covariances, and the mean norm of the
    loss gradient on each centre since the previous snapshot."""

    mean_distance: tuple[float, ...]
    peak_mass: tuple[float, ...]
    peak_shift: tuple[tuple[int, int], ...] | None = None
    overlap: float | None = None
    coverage: int | None = None
    centres: tuple[Pair, ...] | None = None
    inverse_covariance: tuple[Matrix, ...] | None = None
    centre_grad_norm: tuple[float, ...] | None = None

    @property
    def heads(self) -> int:
        """The layer's heads."""
        return len(self.peak_mass)

    def to_json(self) -> dict[str, object]:
        """Plain data (lists, numbers), without the fields that are None."""
        return _plain({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_json(cls, data: object) -> LayerLocality:
        """A layer of a decoded snapshot; ``ValueError`` says what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("not an object")
        mean_distance = _numbers(data.get("mean_distance"), None, "mean_distance")
        heads = len(mean_distance)
        peak_mass = _numbers(data.get("peak_mass"), heads, "peak_mass")
        if ("overlap" in data) != ("coverage" in data):  # recorded together, read together
            raise ValueError("holds one of 'overlap' and 'coverage' without the other")
        for key in ("overlap", "coverage"):
            if key in data and not _finite(data[key]):
                raise ValueError(f"{key!r} is not a number")
        shifts = _rows(data.get("peak_shift"), heads, 2, "peak_shift")
        covariance = data.get("inverse_covariance")
        if covariance is not None and not (
            isinstance(covariance, list)
            and len(covariance) == heads
            and all(_is_matrix(m) for m in covariance)
        ):
            raise ValueError(f"'inverse_covariance' is not {heads} 2x2 matrices")
        return cls(
            mean_distance=mean_distance,
            peak_mass=peak_mass,
            peak_shift=None if shifts is None else tuple((round(a), round(b)) for a, b in shifts),
            overlap=data.get("overlap"),
            coverage=data.get("coverage"),
            centres=_rows(data.get("centres"), heads, 2, "centres"),  # type: ignore[arg-type]
            inverse_covariance=None if covariance is None else tuple(_matrix(m) for m in covariance),
            centre_grad_norm=_numbers(data["centre_grad_norm"], heads, "centre_grad_norm")
            if "centre_grad_norm" in data
            else None,
        )


@dataclass(frozen=True, kw_only=True)
class LocalitySnapshot:
    """The locality of every layer at one training step. Extending ``LayerLocality`` or ``LayerSummary``:
    a new field optional with the default None (left out of ``to_json``), so that older checkpoints,
    weights and results files still read (the per-head dynamics were added so)."""

    step: int
    layers: tuple[LayerLocality, ...]

    def to_json(self) -> dict[str, object]:
        """Plain data: ``{"step": ..., "layers": [...]}``."""
        return {"step": self.step, "layers": [layer.to_json() for layer in self.layers]}


@dataclass(frozen=True, kw_only=True)
class LayerSummary:
    """One layer's locality at a step, summed up (``sa_conv.analysis.maps.layer_summary``): mean attention
    distance, sharp heads (>= 0.5 of their mass on one pixel), their distinct taps and the taps, the heads'
    mean mass on one pixel (conv-likeness); where recorded, the overlap and coverage of their half-mass
    regions; for Gaussian heads each alpha and the median, each centre's gradient norm, and, measured from
    step 0, each centre's displacement and outward shift (negative: nearer the query) with their medians."""

    mean_distance: float
    sharp_heads: int
    heads: int
    conv_likeness: float
    sharp_distinct_taps: int | None = None
    sharp_taps: list[list[int]] | None = None
    overlap: float | None = None
    coverage: int | None = None
    median_alpha: float | None = None
    alpha: list[float] | None = None
    centre_grad_norm: list[float] | None = None
    displacement: list[float] | None = None
    median_displacement: float | None = None
    outward: list[float] | None = None
    median_outward: float | None = None

    def to_json(self) -> dict[str, object]:
        """Plain data without the fields that are None (a results row's ``layers`` entry)."""
        return _plain({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_json(cls, data: object) -> LayerSummary:
        """A summary as ``to_json`` wrote it (a run's ``metrics.json``); ``ValueError`` says what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("a layer's summary is not an object")
        known = {f.name for f in fields(cls)}
        if missing := [
            k for k in ("mean_distance", "sharp_heads", "heads", "conv_likeness") if k not in data
        ]:
            raise ValueError(f"a layer's summary lacks {', '.join(missing)}")
        for key, value in data.items():
            if key in known and not _plain_number_or_list(value):
                raise ValueError(f"a layer's summary has {key!r} that is neither a number nor a list")
        return cls(**{k: v for k, v in data.items() if k in known})


def history_json(history: Sequence[LocalitySnapshot]) -> list[dict[str, object]]:
    """A history as plain data (what checkpoints and weights files hold)."""
    return [snapshot.to_json() for snapshot in history]


def read_history(history: object, source: str) -> list[LocalitySnapshot]:
    """The locality history a file brought (decoded data), bounded and checked; ``CheckpointError`` naming
    ``source`` (the file it came from) and the first place it is wrong."""
    try:
        check_bounds(history, f"{source}: its locality history")
    except UntrustedInputError as err:
        raise CheckpointError(str(err)) from None
    if not isinstance(history, list):
        raise CheckpointError(f"{source}: its locality history is not a list")
    out: list[LocalitySnapshot] = []
    for i, snapshot in enumerate(history):
        where = f"{source}: locality snapshot {i}"
        if not isinstance(snapshot, dict) or not is_json(snapshot.get("step"), int):
            raise CheckpointError(f"{where} is not an object with an integer 'step'")
        layers = snapshot.get("layers")
        if not isinstance(layers, list) or not layers:
            raise CheckpointError(f"{where} has no 'layers' list")
        if out and len(layers) != len(out[0].layers):
            raise CheckpointError(f"{where} lists {len(layers)} layers, snapshot 0 {len(out[0].layers)}")
        read = []
        for j, layer in enumerate(layers, 1):
            try:
                read.append(LayerLocality.from_json(layer))
            except ValueError as err:
                raise CheckpointError(f"{where}, layer {j}: {err}") from None
        out.append(LocalitySnapshot(step=snapshot["step"], layers=tuple(read)))
    return out


def _plain(values: dict[str, object]) -> dict[str, object]:
    """Record fields as JSON-ready data: tuples as lists, None left out."""

    def plain(value: Any) -> Any:
        return [plain(v) for v in value] if isinstance(value, tuple | list) else value

    return {name: plain(value) for name, value in values.items() if value is not None}


def _plain_number_or_list(value: object) -> bool:
    """A finite JSON number, or a list of them or of lists of them (taps)."""
    if isinstance(value, list):
        return all(_finite(v) or (isinstance(v, list) and all(_finite(w) for w in v)) for v in value)
    return _finite(value)


def _finite(value: object) -> bool:
    """A finite JSON number."""
    return is_json(value, (int, float)) and math.isfinite(value)  # type: ignore[arg-type]


def _numbers(value: object, count: int | None, key: str) -> tuple[float, ...]:
    """A non-empty list of ``count`` finite numbers (any count where None) as a tuple; else ``ValueError``."""
    if not isinstance(value, list) or not value or not all(_finite(v) for v in value):
        raise ValueError(f"{key!r} is not a list of numbers, one per head")
    if count is not None and len(value) != count:
        raise ValueError(f"{key!r} has {len(value)} entries, 'mean_distance' {count}")
    return tuple(float(v) for v in value)


def _rows(value: object, count: int, width: int, key: str) -> tuple[tuple[float, ...], ...] | None:
    """``count`` lists of ``width`` finite numbers as tuples (None where absent); else ``ValueError``."""
    if value is None:
        return None
    if not (
        isinstance(value, list)
        and len(value) == count
        and all(isinstance(r, list) and len(r) == width and all(_finite(v) for v in r) for r in value)
    ):
        raise ValueError(f"{key!r} is not {count} pairs of numbers")
    return tuple(tuple(float(v) for v in r) for r in value)


def _is_matrix(value: object) -> bool:
    """A 2x2 matrix of finite numbers."""
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(r, list) and len(r) == 2 and all(_finite(v) for v in r) for r in value)
    )


def _matrix(value: list[list[float]]) -> Matrix:
    """A 2x2 matrix as a tuple of two pairs."""
    (a, b), (c, d) = value
    return ((float(a), float(b)), (float(c), float(d)))
