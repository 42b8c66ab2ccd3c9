"""A row of a study's results (``results/<scale>.json``): one run's accuracy, cost, locality and history;
one reader that checks what a file brought (``StudyRow.from_json``) and ``to_json``, which writes a row
back as it came."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from sa_conv.analysis.snapshots import LayerSummary
from sa_conv.training.epochs import EpochRecord, epochs_json, read_epochs
from sa_conv.utils.json_values import is_json, json_kind
from sa_conv.utils.quote import quoted
from sa_conv.utils.untrusted import UntrustedInputError, finite_number, load_json, read_bounded

__all__ = ["ROW_KEYS", "LocalityPoint", "StudyRow", "readable_rows", "rows_json"]

# the numbers every row has, which the tables compute with, and the range each must lie in
_NUMBERS = {
    "params": (0.0, 1e13),
    "train_time_s": (0.0, 1e9),
    "train_images_per_s": (0.0, 1e9),
    "test_acc": (0.0, 1.0),
    "test_acc_stderr": (0.0, 1.0),
}
ROW_KEYS = ("name", "seed", "note", *_NUMBERS)  # what every row of a results JSON has

# the plain columns a row may have, and their JSON types (null allowed)
_PLAIN: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "protocol": str,
    "epochs": int,
    "layers_count": int,
    "heads": int,
    "precision": str,
    "bf16_products": str,
    "train_flops_per_image": (int, float),
    "eval_flops_per_image": (int, float),
    "n_test_images": int,
    "best_val_acc": (int, float),
    "run_dir": str,
    "hardware": str,
    "test_correct": str,
}


@dataclass(frozen=True)
class LocalityPoint:
    """One recorded step of a run's locality: each layer's summary at that step."""

    step: int
    layers: tuple[LayerSummary, ...]


@dataclass(frozen=True, kw_only=True)
class StudyRow:
    """One run of a study: its entry's name, seed and note; its parameters, training time and speed; its
    test accuracy with its standard error; where recorded, its model, protocol, epochs, depth and heads,
    precision, GFLOP columns, per-image test results (``test_correct``: 1 right, 0 wrong) and machine;
    its locality per layer at the end and over training, the heads that sharpened, its epoch records; the
    rows it replaced (``replaced``: what each recorded); whether this study re-checked it (``rechecked``).

    Extending it: a new column is optional with the default None, and a key a file lacks is written back
    lacking (``absent``), so that older files read and write back unchanged (keys a version does not know
    are kept in ``extra`` and written back as they came)."""

    name: str
    model: str | None = None
    seed: int
    note: str
    protocol: str | None = None
    epochs: int | None = None
    layers_count: int | None = None
    heads: int | None = None
    precision: str | None = None
    bf16_products: str | None = None  # emulated on a CPU without native bf16
    params: int | float
    train_flops_per_image: int | float | None = None
    eval_flops_per_image: int | float | None = None
    test_acc: float
    test_acc_stderr: float
    n_test_images: int | None = None
    best_val_acc: float | None = None
    train_time_s: float
    train_images_per_s: float
    layers: tuple[LayerSummary, ...] = ()
    locality_history: tuple[LocalityPoint, ...] = ()
    sharpening: tuple[dict[str, object], ...] = ()  # ``analysis.dynamics.sharpening``'s events, as data
    epochs_history: tuple[EpochRecord, ...] = ()
    run_dir: str | None = None
    hardware: str | None = None
    test_correct: str | None = None
    rechecked: bool = True
    replaced: tuple[dict[str, object], ...] = ()  # what each row it replaced recorded (``study.reruns``)
    extra: dict[str, object] = field(default_factory=dict)  # keys of a file this version does not know
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False)  # keys a file lacked

    @property
    def key(self) -> tuple[str, int]:
        """The run this row is of: its entry's name and its seed."""
        return self.name, self.seed

    def to_json(self) -> dict[str, object]:
        """The row as a results JSON holds it."""
        out: dict[str, object] = {}
        for f in fields(self):
            if f.name in ("extra", "absent") or f.name in self.absent:
                continue
            value = getattr(self, f.name)
            if f.name == "layers":
                value = [layer.to_json() for layer in value]
            elif f.name == "locality_history":
                value = [{"step": p.step, "layers": [la.to_json() for la in p.layers]} for p in value]
            elif f.name == "epochs_history":
                value = epochs_json(value)
            elif f.name in ("sharpening", "replaced"):
                value = list(value)
            out[f.name] = value
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: object) -> StudyRow:
        """A row as a results JSON holds it; ``ValueError`` says what is wrong (a column lacking, of the
        wrong type, a number out of its range, locality that is not per-layer summaries)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"it is {json_kind(data)}, not a run's row (an object)")
        row = {str(k): v for k, v in data.items()}
        name, seed, note = row.get("name"), row.get("seed"), row.get("note")
        if not isinstance(name, str) or not is_json(seed, int) or not isinstance(seed, int):
            raise ValueError("it is not a run's row (an object with a name and an integer seed)")
        if lacking := [k for k in ROW_KEYS if k not in row]:
            raise ValueError(f"it lacks {', '.join(lacking)}")
        if not isinstance(note, str):
            raise ValueError(f"its note is {quoted(note)}, not a string")
        numbers: dict[str, float] = {}
        for key, (low, high) in _NUMBERS.items():
            try:
                numbers[key] = finite_number(row[key], quoted(key), low=low, high=high)
            except UntrustedInputError as err:
                raise ValueError(str(err)) from None
        for key, kind in _PLAIN.items():
            value = row.get(key)
            if value is not None and not is_json(value, kind):
                raise ValueError(f"its {key!r} is {quoted(value)}, not {json_kind(kind)}")
        rechecked = row.get("rechecked", True)
        if not isinstance(rechecked, bool):
            raise ValueError(f"its 'rechecked' is {quoted(rechecked)}, not a boolean")
        known = {f.name for f in fields(cls)} - {"extra", "absent"}
        return cls(
            name=name,
            seed=seed,
            note=note,
            params=_as_given(row["params"], numbers["params"]),
            train_time_s=numbers["train_time_s"],
            train_images_per_s=numbers["train_images_per_s"],
            test_acc=numbers["test_acc"],
            test_acc_stderr=numbers["test_acc_stderr"],
            model=_text(row, "model"),
            protocol=_text(row, "protocol"),
            epochs=_count(row, "epochs"),
            layers_count=_count(row, "layers_count"),
            heads=_count(row, "heads"),
            precision=_text(row, "precision"),
            bf16_products=_text(row, "bf16_products"),
            train_flops_per_image=_number(row, "train_flops_per_image"),
            eval_flops_per_image=_number(row, "eval_flops_per_image"),
            n_test_images=_count(row, "n_test_images"),
            best_val_acc=_number(row, "best_val_acc"),
            run_dir=_text(row, "run_dir"),
            hardware=_text(row, "hardware"),
            test_correct=_text(row, "test_correct"),
            layers=_layers(row.get("layers"), "layers"),
            locality_history=tuple(
                _point(p) for p in _objects(row.get("locality_history"), "locality_history")
            ),
            sharpening=_objects(row.get("sharpening"), "sharpening"),
            epochs_history=tuple(read_epochs(row.get("epochs_history") or [], "its 'epochs_history'")),
            rechecked=rechecked,
            replaced=_objects(row.get("replaced"), "replaced"),
            extra={k: v for k, v in row.items() if k not in known},
            absent=frozenset(known - set(row)),
        )


def _text(row: Mapping[str, object], key: str) -> str | None:
    """A column checked to be a string (or absent, or null)."""
    value = row.get(key)
    return value if isinstance(value, str) else None


def _count(row: Mapping[str, object], key: str) -> int | None:
    """A column checked to be an integer (or absent, or null)."""
    value = row.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(row: Mapping[str, object], key: str) -> int | float | None:
    """A column checked to be a number (or absent, or null)."""
    value = row.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _as_given(value: object, number: float) -> int | float:
    """A checked number as the file wrote it (an integer stays one)."""
    return value if isinstance(value, int) else number


def _objects(value: object, key: str) -> tuple[dict[str, object], ...]:
    """A column that is a list of objects (none: empty); ``ValueError`` otherwise."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"its {key!r} is {quoted(value)}, not a list of objects")
    return tuple({str(k): x for k, x in v.items()} for v in value)


def _layers(value: object, key: str) -> tuple[LayerSummary, ...]:
    """Per-layer summaries, each read by its reader."""
    return tuple(LayerSummary.from_json(layer) for layer in _objects(value, key))


def _point(value: Mapping[str, object]) -> LocalityPoint:
    """One recorded step of a locality history."""
    step = value.get("step")
    if not is_json(step, int) or not isinstance(step, int) or step < 0:
        raise ValueError(f"its locality history has a step {quoted(step)} that is not a count")
    return LocalityPoint(step, _layers(value.get("layers"), "locality_history"))


def readable_rows(path: Path) -> list[StudyRow]:
    """The rows of a results JSON that read as runs' rows (a file of other JSON has none);
    ``UntrustedInputError`` or ``OSError`` for a file that cannot be read."""
    data = load_json(read_bounded(path, str(path)), str(path))
    rows = []
    for row in data if isinstance(data, list) else []:
        try:
            rows.append(StudyRow.from_json(row))
        except ValueError:
            continue
    return rows


def rows_json(rows: Sequence[StudyRow]) -> list[dict[str, object]]:
    """Rows as a results JSON holds them."""
    return [row.to_json() for row in rows]
