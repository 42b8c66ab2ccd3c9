"""Which checkpoint a run resumes from: found by its config, checked against the command that asks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch

from sa_conv.data.fingerprint import data_difference
from sa_conv.training.checkpoints import module_from_checkpoint
from sa_conv.training.config import RunConfig, config_difference
from sa_conv.training.module import ImageClassifier
from sa_conv.utils.quote import quoted
from sa_conv.utils.safe_load import CheckpointError, read_checkpoint, run_config_of

__all__ = ["Resume", "check_same_data", "data_fingerprint_of", "find_resume"]


class Resume(NamedTuple):
    """A checkpoint to resume, the version of its run folder (None: a checkpoint from elsewhere, whose
    training continues in a new run folder), the config it was written with, the fingerprint of the
    data it trained on (None in checkpoints written before they recorded it), and its step."""

    path: Path
    version: int | None
    stored: dict[str, object]
    data: dict[str, object] | None = None
    step: int = 0


def check_same_data(resume: Resume | None, fingerprint: Callable[[], dict[str, object]]) -> None:
    """A resume on other data than the run trained on (``fingerprint``: of the data now, computed only
    where there is one to compare) is refused with ``CheckpointError``; the same data moved elsewhere
    is not."""
    if resume is None or resume.data is None:  # checkpoints written before they recorded their data
        return
    differs = data_difference(resume.data, fingerprint())
    if differs:
        raise CheckpointError(
            f"{resume.path} trained on other data: {differs}; resume it with the data it trained on "
            "(--data-dir), or start a new run"
        )


def data_fingerprint_of(ckpt: dict[str, object]) -> dict[str, object] | None:
    """The fingerprint of a run's data its checkpoint holds (the DataModule's state)."""
    state = ckpt.get("CIFAR10DataModule")
    fingerprint = state.get("fingerprint") if isinstance(state, dict) else None
    return {str(k): v for k, v in fingerprint.items()} if isinstance(fingerprint, dict) else None


def checkpoints_of(run_dir: Path) -> list[Path]:
    """A run's checkpoints, newest first (Lightning's SLURM requeue checkpoints included)."""
    found = [*run_dir.glob("checkpoints/*.ckpt"), *run_dir.glob("hpc_ckpt_*.ckpt")]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def version_of(path: Path) -> int | None:
    """N of the ``version_N`` folder ``path`` lies in (None outside one)."""
    for parent in path.parents:
        if parent.name.startswith("version_") and parent.name[8:].isdigit():
            return int(parent.name[8:])
    return None


def _checked(path: Path, ckpt: dict[str, object], wanted: dict[str, object]) -> dict[str, object]:
    """The checkpoint's run config, if it is ``wanted`` and its weights fit it (checked before a run
    folder is made); ``CheckpointError`` otherwise."""
    stored = run_config_of(ckpt, path)
    differs = config_difference(stored, wanted)
    if differs:
        shown = "; ".join(differs[:4]) + (f"; and {len(differs) - 4} more" if len(differs) > 4 else "")
        raise CheckpointError(f"{path} is a run with other options: {shown}")
    try:
        module = module_from_checkpoint(ckpt)
        check_training_state(ckpt, module)
    except CheckpointError as err:
        raise CheckpointError(f"{path}: {err}") from None
    return stored


MAX_COUNT = 10**12  # steps or epochs a checkpoint may record


def check_training_state(ckpt: dict[str, object], module: ImageClassifier) -> None:
    """The training state Lightning restores, checked before it does: the step and epoch counts, and the
    optimizer's state, one dense buffer of its parameter's shape per parameter; ``CheckpointError``."""
    for key in ("global_step", "epoch"):
        value = ckpt.get(key, 0)
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            raise CheckpointError(f"its {key} {quoted(value)} is not a count from 0 to {MAX_COUNT:,}")
    states = ckpt.get("optimizer_states", [])
    if not isinstance(states, list) or len(states) > 1:
        raise CheckpointError("its optimizer_states is not one optimizer's state")
    params = [p for group in module.parameter_groups() for p in group["params"]]
    for state in states:
        groups, saved = (state.get(k) if isinstance(state, dict) else None for k in ("param_groups", "state"))
        if not isinstance(groups, list) or not isinstance(saved, dict):
            raise CheckpointError("its optimizer state has no param_groups list and state mapping")
        ids = [i for g in groups if isinstance(g, dict) for i in g.get("params", [])]
        if len(ids) != len(params) or len(set(ids)) != len(ids):
            raise CheckpointError(f"its optimizer holds {len(ids)} parameters, the model {len(params)}")
        for key, entry in saved.items():
            if key not in ids or not isinstance(entry, dict):
                raise CheckpointError(f"its optimizer state names a parameter {quoted(key)} it does not hold")
            param = params[ids.index(key)]
            for name, value in entry.items():
                _check_buffer(value, param, f"its optimizer's {quoted(name)} of parameter {key}")


def _check_buffer(value: object, param: torch.Tensor, what: str) -> None:
    """A per-parameter optimizer buffer: a dense float tensor of the parameter's shape (a scalar: a count)."""
    if value is None or not isinstance(value, torch.Tensor):
        return  # e.g. SGD's momentum_buffer before the first step
    if value.dim() == 0:
        return
    if tuple(value.shape) != tuple(param.shape) or not value.is_floating_point():
        raise CheckpointError(
            f"{what} is {tuple(value.shape)} {value.dtype}, not {tuple(param.shape)} floats"
        )
    if not value.is_contiguous():  # e.g. one value broadcast (stride 0): the optimizer cannot write it
        raise CheckpointError(f"{what} is not a dense tensor (strides {quoted(value.stride())})")


def find_resume(
    spec: str, root: Path, config: RunConfig, *, warn: Callable[[str], Any] = print
) -> Resume | None:
    """The checkpoint to resume under ``root``.

    ``spec``: a checkpoint path, ``latest`` (the newest readable checkpoint of the newest run under
    ``root/<model>`` with this config; one must exist) or ``auto`` (the same, or None: start a new run).
    A checkpoint of another config is refused with the options that differ; an unreadable one is skipped
    with a warning (``latest``) or refused (a path).
    """
    wanted = config.to_dict()
    if spec not in ("latest", "auto"):
        path = Path(spec)
        ckpt = read_checkpoint(path)
        stored = _checked(path, ckpt, wanted)
        inside = (root / config.model).resolve() in path.resolve().parents
        version = version_of(path) if inside else None
        return Resume(path, version, stored, data_fingerprint_of(ckpt), _step(ckpt))
    runs = sorted(
        (root / config.model).glob("version_*"),
        key=lambda p: version_of(p / "checkpoints") or -1,
        reverse=True,
    )
    mismatch = None
    for run in runs:
        for path in checkpoints_of(run):
            try:
                ckpt = read_checkpoint(path)
            except CheckpointError as err:
                warn(f"warning: skipping {err}")
                continue
            try:
                stored = _checked(path, ckpt, wanted)
            except CheckpointError as err:
                mismatch = mismatch or err
                break  # this run has another config: look at older runs
            return Resume(path, version_of(path), stored, data_fingerprint_of(ckpt), _step(ckpt))
    if spec == "auto":
        return None
    if mismatch is not None:
        raise CheckpointError(
            f"no run of {config.model} under {root} has this config; the newest: {mismatch}"
        )
    raise CheckpointError(f"no run of {config.model} with a readable checkpoint under {root / config.model}")


def _step(ckpt: dict[str, object]) -> int:
    """A checkpoint's step (its ``global_step``; 0 where it holds none, as in Lightning)."""
    step = ckpt.get("global_step", 0)
    return step if isinstance(step, int) else 0
