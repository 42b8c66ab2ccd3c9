"""Trained weights that ship with the suite, and runs carried from one machine to another.

Shipped weights are safetensors files (tensors and a string table: reading one runs no code) under
``weights/<scale>/<name>-seed<k>.safetensors``, each with its run's config and locality history in the
file's metadata, listed in ``weights/manifest.json`` (model, scale, seed, precision, epochs, test
accuracy, parameters, the commit that trained it, the file's sha256). A shipped model is named
``<scale>/<name>-seed<k>`` (``small6/quadratic-seed0``); ``read_weights`` returns the checkpoint-shaped
record every command reads (``hyper_parameters``, ``state_dict``, ``run_config``, the locality history;
``sa_conv.training.checkpoints.load_trained`` takes a name, a weights file or a checkpoint alike).

A run that outlives a working session keeps its newest resumable checkpoint in
``weights/unfinished/<scale>/<name>-seed<k>.ckpt`` (replaced in place, removed when the run finishes),
from where the study resumes it on any machine (``carried_checkpoint``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from sa_conv import __version__
from sa_conv.models import MODELS as REGISTRY
from sa_conv.models import Backbone, model_config
from sa_conv.utils.files import atomic_write, locked, write_text
from sa_conv.utils.safe_load import CheckpointError

__all__ = [
    "FORMAT",
    "backbone_of",
    "carried_checkpoint",
    "load_pretrained",
    "manifest",
    "read_weights",
    "save_weights",
    "sha256_of",
    "ship",
    "shipped_file",
    "weights_dir",
]

FORMAT = "sa-conv weights 1"  # the metadata layout of a weights file


def weights_dir() -> Path:
    """The folder of shipped weights: ``$SA_CONV_WEIGHTS``, else ``weights/`` of the checkout."""
    return Path(os.environ.get("SA_CONV_WEIGHTS") or Path(__file__).resolve().parents[2] / "weights")


def sha256_of(path: Path) -> str:
    """The sha256 of a file, hex."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest(root: Path | None = None) -> dict[str, dict[str, Any]]:
    """The shipped models by name (empty where none ship)."""
    path = (root or weights_dir()) / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def save_weights(
    path: Path,
    backbone: nn.Module,
    *,
    hyper_parameters: dict[str, Any],
    run_config: dict[str, Any],
    history: list[dict[str, Any]] | None = None,
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


def read_weights(path: Path) -> dict[str, Any]:
    """A weights file as the checkpoint-shaped record commands read."""
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        tensors: dict[str, Tensor] = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path} is not a readable weights file ({type(err).__name__})") from None
    if metadata.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an sa-conv weights file (no {FORMAT!r} metadata)")
    history = json.loads(metadata["locality_history"])
    return {
        "hyper_parameters": json.loads(metadata["hyper_parameters"]),
        "state_dict": {f"backbone.{k}": v for k, v in tensors.items()},
        "run_config": json.loads(metadata["run_config"]),
        "global_step": json.loads(metadata.get("global_step", "null")),
        "sa_conv_version": __version__,
        "callbacks": {"AttentionFigures": {"history": history}} if history else {},
        "weights_file": str(path),
    }


def shipped_file(name: str) -> Path:
    """The weights file of a shipped model, its sha256 checked against the manifest."""
    models = manifest()
    if name not in models:
        names = ", ".join(sorted(models)) or "none ship in this checkout"
        raise CheckpointError(f"{name} is neither a file nor a shipped model (shipped: {names})")
    entry = models[name]
    path = weights_dir() / entry["file"]
    if not path.is_file():
        raise CheckpointError(f"the weights of {name} ({path}) are missing from this checkout")
    if sha256_of(path) != entry["sha256"]:
        raise CheckpointError(f"{path} differs from the manifest's sha256: the file changed since it shipped")
    return path


def backbone_of(record: dict[str, Any]) -> Backbone:
    """The backbone a record (``read_weights``, a checkpoint) holds, its weights loaded."""
    hparams = record["hyper_parameters"]
    if hparams.get("model") not in REGISTRY:
        raise CheckpointError(f"the record's model {hparams.get('model')!r} is not one of this suite's")
    backbone = REGISTRY[hparams["model"]].build(model_config(hparams["model"], **hparams["model_config"]))
    state = {
        k.removeprefix("backbone."): v for k, v in record["state_dict"].items() if k.startswith("backbone.")
    }
    try:
        backbone.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(f"the weights do not fit their model {hparams['model']!r}: {err}") from None
    return backbone


def load_pretrained(name: str) -> Backbone:
    """A shipped model by name (``small6/quadratic-seed0``), its backbone in eval mode."""
    return backbone_of(read_weights(shipped_file(name))).eval()


def ship(
    name: str,
    ckpt: dict[str, Any],
    *,
    row: dict[str, Any],
    history: list[dict[str, Any]] | None,
    commit: str | None,
    root: Path | None = None,
) -> dict[str, Any]:
    """Write the weights of ``ckpt`` (a run's reported checkpoint) as shipped model ``name`` under
    ``root`` (default ``weights_dir()``) and list it in the manifest (under a lock: studies of several
    scales may ship at once); returns its entry."""
    root = root or weights_dir()
    backbone = backbone_of(ckpt)
    file = f"{name}.safetensors"
    save_weights(
        root / file,
        backbone,
        hyper_parameters=dict(ckpt["hyper_parameters"]),
        run_config=ckpt["run_config"],
        history=history,
        step=ckpt.get("global_step"),
    )
    entry = {
        "model": row["model"],
        "scale": name.split("/")[0],
        "seed": row["seed"],
        "precision": row.get("precision", "32-true"),
        "epochs": row["epochs"],
        "epoch_of_weights": (ckpt.get("epoch") or 0) + 1,
        "test_acc": row["test_acc"],
        "n_test_images": row["n_test_images"],
        "params": sum(p.numel() for p in backbone.parameters()),
        "file": file,
        "bytes": (root / file).stat().st_size,
        "sha256": sha256_of(root / file),
        "commit": commit,
        "config": ckpt["run_config"],
    }
    with locked(root / ".manifest.lock"):
        models = manifest(root)
        models[name] = entry
        write_text(root / "manifest.json", json.dumps(dict(sorted(models.items())), indent=1) + "\n")
    return entry


def carried_checkpoint(scale: str, run: str, root: Path | None = None) -> Path:
    """Where run ``<name>-seed<k>`` of ``scale`` keeps its newest resumable checkpoint between machines."""
    return (root or weights_dir()) / "unfinished" / scale / f"{run}.ckpt"
