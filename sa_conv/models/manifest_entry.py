"""A shipped model's entry in ``weights/manifest.json``: what it is, how well it did, where its file is."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from sa_conv.utils.errors import CheckpointError
from sa_conv.utils.json_values import is_json, json_kind
from sa_conv.utils.quote import quoted

__all__ = ["ENTRY_FIELDS", "ManifestEntry"]

# the fields every entry has, and their JSON types
ENTRY_FIELDS: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "scale": str,
    "seed": int,
    "precision": str,
    "epochs": int,
    "test_acc": (int, float),
    "n_test_images": int,
    "params": int,
    "file": str,
    "bytes": int,
    "sha256": str,
    "config": dict,
}
_OPTIONAL: dict[str, type | tuple[type, ...]] = {"epoch_of_weights": int, "commit": str}
_ORDER: tuple[str, ...] = ("model", "scale", "seed", "precision", "epochs", "epoch_of_weights", "test_acc")
_ORDER += ("n_test_images", "params", "file", "bytes", "sha256", "commit", "config")


@dataclass(frozen=True)
class ManifestEntry:
    """One shipped model: its model and scale, seed, precision and epochs, test accuracy (on
    ``n_test_images``), parameters, its weights file (relative to the weights folder, with its size and
    sha256), its run config; where recorded, the epoch its weights come from and the commit that trained it.

    Extending it: a new field is optional with the default None (``to_json`` leaves None out), so that
    older manifests read and write back unchanged; keys this version does not know stay in ``extra``."""

    model: str
    scale: str
    seed: int
    precision: str
    epochs: int
    test_acc: float
    n_test_images: int
    params: int
    file: str
    bytes: int
    sha256: str
    config: dict[str, object]
    epoch_of_weights: int | None = None
    commit: str | None = None
    extra: dict[str, object] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, object]:
        """The entry as ``manifest.json`` holds it (its keys in the file's order)."""
        out = {name: getattr(self, name) for name in _ORDER}
        return {**{k: v for k, v in out.items() if v is not None}, **self.extra}

    @classmethod
    def from_json(cls, name: str, data: object, source: str) -> ManifestEntry:
        """The entry ``name`` of the manifest ``source``; ``CheckpointError`` names the first field that is
        missing or not of its JSON type."""
        if not isinstance(data, dict):
            raise CheckpointError(f"{source}: entry {quoted(name)} is {json_kind(data)}, not an object")
        for key, kind in {**ENTRY_FIELDS, **_OPTIONAL}.items():
            if key not in data:
                if key in ENTRY_FIELDS:
                    raise CheckpointError(f"{source}: entry {quoted(name)} has no {quoted(key)}")
                continue
            if not is_json(data[key], kind) and not (key in _OPTIONAL and data[key] is None):
                raise CheckpointError(
                    f"{source}: entry {quoted(name)} has {json_kind(data[key])} as {quoted(key)}, "
                    f"not {json_kind(kind)}"
                )
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in data.items() if k in known}
        values["test_acc"] = float(values["test_acc"])
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})
