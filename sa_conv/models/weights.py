"""Trained weights that ship with the suite, and runs carried from one machine to another.

Shipped weights are safetensors files (tensors and a string table: reading one runs no code) under
``weights/<scale>/<name>-seed<k>.safetensors``, each with its run's config and locality history in the
file's metadata, listed in ``weights/manifest.json`` (model, scale, seed, precision, epochs, test
accuracy, parameters, the commit that trained it, the file's sha256). A shipped model is named
``<scale>/<name>-seed<k>`` (``small6/quadratic-seed0``); ``read_weights`` returns the checkpoint-shaped
record every command reads (``hyper_parameters``, ``state_dict``, ``run_config``, the locality history;
``sa_conv.training.trained.load_trained`` takes a name, a weights file or a checkpoint alike).

The study ships its runs here and carries the unfinished ones (``experiments.study.weights``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from sa_conv.models import MODELS as REGISTRY
from sa_conv.models import Backbone, model_config
from sa_conv.models.hyper_parameters import HyperParameters
from sa_conv.models.manifest_entry import ENTRY_FIELDS, ManifestEntry
from sa_conv.models.weights_folder import weights_dir
from sa_conv.utils.files import atomic_write
from sa_conv.utils.json_values import is_json, json_kind
from sa_conv.utils.quote import quoted
from sa_conv.utils.safe_load import CheckpointError
from sa_conv.utils.untrusted import UntrustedInputError, load_json, read_bounded
from sa_conv.utils.version import __version__

__all__ = [
    "ENTRY_FIELDS",
    "FORMAT",
    "ManifestEntry",
    "backbone_of",
    "check_fit",
    "entry_file",
    "load_pretrained",
    "manifest",
    "read_weights",
    "save_weights",
    "sha256_of",
    "shipped_file",
    "tensors_of",
    "weights_dir",
]

FORMAT = "sa-conv weights 1"  # the metadata layout of a weights file
MAX_MANIFEST_BYTES = 16 * 2**20  # the manifest of every shipped model takes about 100 KB


def sha256_of(path: Path) -> str:
    """The sha256 of a file, hex."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest(root: Path | None = None) -> dict[str, ManifestEntry]:
    """The shipped models by name (empty where none ship); ``CheckpointError`` names what is wrong with a
    manifest that is not one (not JSON, not an object of entries, an entry without a field it needs)."""
    path = (root or weights_dir()) / "manifest.json"
    if not path.is_file():
        return {}
    try:
        text = read_bounded(path, str(path), max_bytes=MAX_MANIFEST_BYTES)
        models = load_json(text, str(path), max_bytes=MAX_MANIFEST_BYTES)
    except UntrustedInputError as err:  # not JSON, not UTF-8, too deep or too large
        raise CheckpointError(str(err)) from None
    if not isinstance(models, dict):
        raise CheckpointError(f"{path} must be an object of model entries by name, not {json_kind(models)}")
    return {name: ManifestEntry.from_json(name, entry, str(path)) for name, entry in models.items()}


def save_weights(
    path: Path,
    backbone: nn.Module,
    *,
    hyper_parameters: dict[str, object],
    run_config: dict[str, object],
    history: list[dict[str, object]] | None = None,
    step: int | None = None,
) -> None:
    """Write ``backbone``'s weights (float32, contiguous) with what rebuilds it, atomically."""
    tensors = {k: v.detach().float().contiguous().cpu() for k, v in backbone.state_dict().items()}
    metadata = {
        "format": FORMAT,
        "sa_conv_version": __version__,
        "hyper_parameters": json.dumps(hyper_parameters),
        "run_config": json.dumps(run_config),
        "locality_history": json.dumps(history or []),
        "global_step": json.dumps(step),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata), what="weights")


def read_weights(path: Path) -> dict[str, object]:
    """A weights file as the checkpoint-shaped record commands read."""
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        tensors: dict[str, Tensor] = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path} is not a readable weights file ({type(err).__name__})") from None
    if metadata.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an sa-conv weights file (no {quoted(FORMAT)} metadata)")
    hparams = _metadata_field(path, metadata, "hyper_parameters", dict)
    if not isinstance(hparams.get("model"), str) or not isinstance(hparams.get("model_config"), dict):
        raise CheckpointError(
            f"{path}: its metadata 'hyper_parameters' needs a model name ('model', a string) and its "
            "options ('model_config', an object)"
        )
    history = _metadata_field(path, metadata, "locality_history", list)
    step = _metadata_field(path, metadata, "global_step", (int, type(None)), default="null")
    return {
        "hyper_parameters": hparams,
        "state_dict": {f"backbone.{k}": v for k, v in tensors.items()},
        "run_config": _metadata_field(path, metadata, "run_config", dict),
        "global_step": step,
        "sa_conv_version": __version__,
        "callbacks": {"AttentionFigures": {"history": history}} if history else {},
        "weights_file": str(path),
    }


def _metadata_field(
    path: Path, metadata: dict[str, str], key: str, kind: type | tuple[type, ...], default: str | None = None
) -> Any:
    """One JSON field of a weights file's metadata, decoded and of ``kind``; ``CheckpointError`` naming the
    file and field where it is missing, not JSON or of another type."""
    text = metadata.get(key, default)
    if text is None:
        raise CheckpointError(f"{path} has no {quoted(key)} in its metadata")
    try:
        value = load_json(text, f"{path}: its metadata {quoted(key)}")
    except UntrustedInputError as err:
        raise CheckpointError(str(err)) from None
    if not is_json(value, kind):
        raise CheckpointError(
            f"{path}: its metadata {quoted(key)} is {json_kind(value)}, not {json_kind(kind)}"
        )
    return value


def entry_file(name: str, entry: ManifestEntry, root: Path | None = None) -> Path:
    """Where manifest ``entry`` (of model ``name``) keeps its weights: its ``file``, a relative
    ``.safetensors`` path below the weights folder ``root`` that stays there once resolved (no symlink
    leads out); ``CheckpointError`` for any other path."""
    root = root or weights_dir()
    file = PurePosixPath(entry.file)
    inside = not file.is_absolute() and ".." not in file.parts and file.suffix == ".safetensors"
    if not inside or root.resolve() not in (root / file).resolve().parents:
        raise CheckpointError(
            f"the manifest's file of {quoted(name)} ({quoted(entry.file)}) must be a relative "
            ".safetensors path inside the weights folder, not led out of it by a symlink (a shared store: "
            "name it with SA_CONV_WEIGHTS)"
        )
    return root / file


def shipped_file(name: str) -> Path:
    """The weights file of a shipped model, its sha256 checked against the manifest."""
    models = manifest()
    if name not in models:
        names = ", ".join(sorted(models)) or "none ship in this checkout"
        raise CheckpointError(f"{name} is neither a file nor a shipped model (shipped: {names})")
    path = entry_file(name, models[name])
    if not path.is_file():
        raise CheckpointError(f"the weights of {name} ({path}) are missing from this checkout")
    if sha256_of(path) != models[name].sha256:
        raise CheckpointError(f"{path} differs from the manifest's sha256: the file changed since it shipped")
    return path


def check_fit(state: dict[str, Tensor], module: nn.Module, what: str) -> None:
    """Refuse, before anything is loaded, tensors that do not fit ``module``'s: a shape other than its, a
    floating-point one stored as integers, counts stored with fractions, NaN or infinity; ``CheckpointError``
    (``what``: its start) names the first tensor and counts the rest. Missing and unexpected names are
    ``load_state_dict``'s to name."""
    wanted = module.state_dict()
    wrong: list[str] = []
    for name, tensor in state.items():
        if name not in wanted or not isinstance(tensor, Tensor):
            continue
        want = wanted[name]
        if tuple(tensor.shape) != tuple(want.shape):
            wrong.append(
                f"size mismatch for {name}: {tuple(tensor.shape)} in the file, {tuple(want.shape)} in the "
                "model"
            )
        elif want.is_floating_point() and not tensor.is_floating_point():
            wrong.append(f"dtype mismatch for {name}: {tensor.dtype} in the file, {want.dtype} in the model")
        elif tensor.is_floating_point() and not want.is_floating_point() and tensor.ne(tensor.round()).any():
            wrong.append(f"dtype mismatch for {name}: fractions in the file, {want.dtype} in the model")
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise CheckpointError(f"{what}: {wrong[0]}{more}")
    bad = [
        k
        for k, t in state.items()
        if isinstance(t, Tensor) and t.is_floating_point() and not t.isfinite().all()
    ]
    if bad:
        raise CheckpointError(
            f"{what}: its weights hold NaN or infinity ({len(bad)} tensors, first {bad[0]}): "
            "a diverged run; use an earlier checkpoint"
        )


def backbone_of(record: dict[str, object]) -> Backbone:
    """The backbone a record (``read_weights``, a checkpoint) holds, its weights checked (``check_fit``)
    and loaded."""
    hparams = HyperParameters.read(record.get("hyper_parameters"), "the record")
    if hparams.model not in REGISTRY:
        raise CheckpointError(f"the record's model {quoted(hparams.model)} is not one of this suite's")
    backbone = REGISTRY[hparams.model].build(model_config(hparams.model, **hparams.model_config))
    weights = tensors_of(record.get("state_dict"), "the record")
    state = {k.removeprefix("backbone."): v for k, v in weights.items() if k.startswith("backbone.")}
    check_fit(state, backbone, f"the weights do not fit their model {quoted(hparams.model)}")
    try:
        backbone.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(f"the weights do not fit their model {quoted(hparams.model)}: {err}") from None
    return backbone


def load_pretrained(name: str | os.PathLike[str]) -> Backbone:
    """A shipped model by name (``small6/quadratic-seed0``) or a weights file, its backbone in eval mode."""
    if not isinstance(name, str | os.PathLike):
        raise TypeError(
            "load_pretrained takes a shipped model's name or a weights file's path, "
            f"not a {type(name).__name__}"
        )
    spec = os.fspath(name)
    path = Path(spec)
    if path.suffix == ".safetensors" or path.is_file():
        if path.suffix != ".safetensors":
            raise CheckpointError(
                f"{path} is not a weights file (*.safetensors); for a training checkpoint use "
                "sa_conv.training.checkpoints.module_from_checkpoint(path).backbone"
            )
        if not path.is_file():
            raise CheckpointError(f"weights file {path} does not exist")
        return backbone_of(read_weights(path)).eval()
    return backbone_of(read_weights(shipped_file(spec))).eval()


def tensors_of(value: object, source: str) -> dict[str, Tensor]:
    """A record's weights, each a tensor; ``CheckpointError`` naming ``source`` otherwise."""
    state = {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}
    if wrong := [k for k, v in state.items() if not isinstance(v, Tensor)]:
        raise CheckpointError(f"{source}: its weight {quoted(wrong[0], 60)} is not a tensor")
    return {k: v for k, v in state.items() if isinstance(v, Tensor)}
