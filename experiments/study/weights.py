"""The study's weights: each finished run shipped (``sa_conv.models.weights``), each unfinished one carried to
the next machine as its newest resumable checkpoint, and picked up there."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from experiments.study.row import StudyRow
from sa_conv.analysis.snapshots import LocalitySnapshot, history_json
from sa_conv.models.hyper_parameters import HyperParameters
from sa_conv.models.weights import ManifestEntry, backbone_of, manifest, save_weights, sha256_of, weights_dir
from sa_conv.training.checkpoints import with_best
from sa_conv.training.config import RunConfig, config_difference
from sa_conv.training.resume import Resume, find_resume
from sa_conv.training.summary import RunSummary
from sa_conv.utils.files import atomic_write, locked, write_text
from sa_conv.utils.machine import source_commit
from sa_conv.utils.precisions import FLOAT32
from sa_conv.utils.safe_load import read_checkpoint, run_config_of

__all__ = ["carried_checkpoint", "carried_resume", "carry", "ship", "ship_run"]


def carried_resume(scale: str, run: str, root: Path, config: RunConfig, weights: Path) -> Resume | None:
    """The carried checkpoint of run ``run`` (``<name>-seed<k>``), if one is there: it continues in a new
    run folder under ``root``, exactly where the other machine stopped. ``CheckpointError`` where it is
    another config's."""
    path = carried_checkpoint(scale, run, weights)
    return find_resume(str(path), root, config) if path.is_file() else None


def ship_run(name: str, summary: RunSummary, row: StudyRow, weights: Path) -> None:
    """Ship a finished run's reported weights (its best checkpoint) as ``name`` unless the manifest
    already lists this run, and drop its carried checkpoint (a finished run resumes nothing); a warning
    where the checkpoint to ship is not here."""
    scale, run = name.split("/")
    carried_checkpoint(scale, run, weights).unlink(missing_ok=True)
    shipped = manifest(weights).get(name)
    if (
        shipped is not None
        and shipped.test_acc == summary.test_acc
        and not config_difference(shipped.config, summary.config)
    ):
        return
    best = summary.best_checkpoint
    if not best or not Path(best).is_file():
        print(f"warning: {name}: no weights shipped: {best} is not here", file=sys.stderr)
        return
    commit = summary.commit or source_commit()
    ckpt = read_checkpoint(best)
    entry = ship(name, ckpt, row=row, history=summary.locality_history, commit=commit, root=weights)
    print(f"== {name}: weights shipped, {weights / entry.file} ({entry.bytes / 2**20:.2f} MiB)")


def carry(scale: str, run: str, resume: Resume | None, weights: Path) -> Path | None:
    """Copy an unfinished run's newest resumable checkpoint to its carried place, replacing one that is
    not as far along (never one further along: another machine's newer steps are kept)."""
    if resume is None:
        return None
    target = carried_checkpoint(scale, run, weights)
    if target.is_file():
        if target.resolve() == resume.path.resolve():
            return target
        there = read_checkpoint(target).get("global_step", 0)
        there = there if isinstance(there, int) else 0
        if there >= resume.step:
            print(f"== {run}: {target} holds step {there}, this run {resume.step}: kept", file=sys.stderr)
            return target
    target.parent.mkdir(parents=True, exist_ok=True)
    ckpt = with_best(read_checkpoint(resume.path), resume.path.parent)
    atomic_write(target, lambda tmp: torch.save(ckpt, tmp), what="carried checkpoint")
    print(f"== {run}: step {ckpt['global_step']} carried to {target}", file=sys.stderr)
    return target


def ship(
    name: str,
    ckpt: dict[str, object],
    *,
    row: StudyRow,
    history: Sequence[LocalitySnapshot] | None,
    commit: str | None,
    root: Path | None = None,
) -> ManifestEntry:
    """Write the weights of ``ckpt`` (a run's reported checkpoint) as shipped model ``name`` under
    ``root`` (default ``weights_dir()``) and list it in the manifest (under a lock: studies of several
    scales may ship at once); returns its entry."""
    root = root or weights_dir()
    if row.model is None or row.epochs is None or row.n_test_images is None:
        raise ValueError(f"the row of {name} records no model, epochs or test images: nothing to ship")
    manifest(root)  # a malformed manifest is refused before any file is written
    run_config = run_config_of(ckpt)
    backbone = backbone_of(ckpt)
    file = f"{name}.safetensors"
    staged = root / f"{file}.staged"  # moved in place with the manifest's entry, under its lock
    save_weights(
        staged,
        backbone,
        hyper_parameters=HyperParameters.read(ckpt.get("hyper_parameters"), name).to_dict(),
        run_config=run_config,
        history=history_json(history or []),
        step=step if isinstance(step := ckpt.get("global_step"), int) else None,
    )
    entry = ManifestEntry(
        model=row.model,
        scale=name.split("/")[0],
        seed=row.seed,
        precision=row.precision if "precision" not in row.absent and row.precision else FLOAT32,
        epochs=row.epochs,
        epoch_of_weights=(epoch if isinstance(epoch := ckpt.get("epoch"), int) else 0) + 1,
        test_acc=row.test_acc,
        n_test_images=row.n_test_images,
        params=sum(p.numel() for p in backbone.parameters()),
        file=file,
        bytes=staged.stat().st_size,
        sha256=sha256_of(staged),
        commit=commit,
        config=run_config,
    )
    with locked(root / ".manifest.lock"):
        models = manifest(root)
        models[name] = entry
        os.replace(staged, root / file)
        entries = {key: models[key].to_json() for key in sorted(models)}
        write_text(root / "manifest.json", json.dumps(entries, indent=1) + "\n")
    return entry


def carried_checkpoint(scale: str, run: str, root: Path | None = None) -> Path:
    """Where run ``<name>-seed<k>`` of ``scale`` keeps its newest resumable checkpoint between machines."""
    return (root or weights_dir()) / "unfinished" / scale / f"{run}.ckpt"
