"""Checkpoints of a run: written atomically, read without running code (``sa_conv.utils.safe_load``),
resumable exactly, also in another run folder (``sa_conv.training.resume`` finds the one to resume by
config); any trained model's record, from a checkpoint, a weights file or a shipped name; and the
LightningModule such a record rebuilds (``module_from_checkpoint``, checkpoints of every earlier layout)."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path
from typing import TypedDict, cast

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.plugins.io import TorchCheckpointIO
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException

from sa_conv.models.hyper_parameters import HyperParameters
from sa_conv.models.weights import check_fit, tensors_of
from sa_conv.training.module import ImageClassifier
from sa_conv.training.trained import TrainedModel
from sa_conv.utils.files import atomic_write, disk_full, free_bytes, human_size
from sa_conv.utils.quote import quoted
from sa_conv.utils.safe_load import CheckpointError, read_checkpoint

__all__ = [
    "AtomicCheckpointIO",
    "InterruptCheckpoint",
    "RelocatedResume",
    "ResumableRNG",
    "RunConfigRecord",
    "confine_paths",
    "module_from_checkpoint",
    "with_best",
    "within",
]


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` through ``utils.files.atomic_write``: a temporary file in the checkpoint's own folder.

    Kept because Lightning's ``TorchCheckpointIO`` stages its temporary file in the system temp folder:
    when that is another file system, ``shutil.move`` copies, and a kill mid-copy leaves half a file. A
    checkpoint that cannot fit (less free space than the last one took) is refused before it is written.
    """

    def __init__(self) -> None:
        super().__init__()
        self._last_size = 0  # bytes of the last checkpoint written: the next one will need about as many

    def save_checkpoint(
        self, checkpoint: dict[str, object], path: str | Path, storage_options: object = None
    ) -> None:
        path = Path(path)
        needed = self._last_size or (path.stat().st_size if path.exists() else 0)
        if needed and free_bytes(path.parent) < needed:  # say so before a write that cannot succeed
            raise disk_full(path, "checkpoint", f"; the last one took {human_size(needed)}: it will not fit")
        atomic_write(path, lambda tmp: torch.save(checkpoint, tmp), what="checkpoint")
        self._last_size = path.stat().st_size


class RunConfigRecord(pl.Callback):
    """Stores the run's config in every checkpoint, for config-checked resumes and repeats."""

    def __init__(self, config: dict[str, object]) -> None:
        self.config = config

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, object]
    ) -> None:
        checkpoint["run_config"] = self.config


class RelocatedResume(pl.Callback):
    """A run resumed in another folder than the one its checkpoint was written in: the checkpoint
    callbacks' records (best model and score, last checkpoint) are restored whole (Lightning would keep
    only the best path), their files pointed at in this run's folder where they are not where they were (a
    checkpoint carried from another machine), and the best model's weights such a checkpoint carries
    (``carried_best``, see ``with_best``) written there: the run ends as it would have in its first folder.

    Only state the run itself could have written is restored: a file path that does not lie inside the
    run's checkpoint folder, once resolved (``..`` and symlinks), is dropped with one warning line before
    Lightning could remove or write it (``confine_paths``)."""

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, object]
    ) -> None:
        carried = checkpoint.pop("carried_best", None)
        callbacks = {
            cb.state_key: cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint)
        }
        best_paths: set[tuple[Path, Path]] = set()  # (best model, its callback's folder)
        dropped: list[str] = []
        states = checkpoint.get("callbacks")
        for key, state in states.items() if isinstance(states, dict) else ():
            callback = callbacks.get(key)
            if callback is None or callback.dirpath is None or not isinstance(state, dict):
                continue
            if state.get("dirpath") and state["dirpath"] != callback.dirpath:
                here = Path(callback.dirpath)

                def moved(path: object, here: Path = here) -> object:  # a file still where it was stays there
                    if isinstance(path, str) and _is_path(path) and not Path(path).exists():
                        return str(here / Path(path).name)
                    return path

                state["dirpath"] = callback.dirpath
                for name in _PATH_FIELDS:
                    state[name] = moved(state.get(name, ""))
                best_k = state.get("best_k_models")
                state["best_k_models"] = (
                    {moved(k): v for k, v in best_k.items()} if isinstance(best_k, dict) else {}
                )
            resumed = str(trainer.ckpt_path or "")
            source = Path(resumed).parent if _is_path(resumed) else None
            dropped += confine_paths(state, Path(callback.dirpath), callback.mode, source)
            if _is_path(best := state.get("best_model_path")):
                best_paths.add((Path(str(best)), Path(callback.dirpath)))
        if dropped and trainer.is_global_zero:
            more = f" and {len(dropped) - 1} more" if len(dropped) > 1 else ""
            print(
                f"warning: the checkpoint names files outside this run's checkpoint folder: dropped "
                f"{dropped[0]}{more} from its records",
                file=sys.stderr,
            )
        if not isinstance(carried, dict) or not trainer.is_global_zero:
            return
        model = carried.get("checkpoint")
        for best, folder in best_paths:  # the best model of the other folder, written in this run's
            if best.name == carried.get("file") and not best.exists() and best.parent == folder:
                folder.mkdir(parents=True, exist_ok=True)
                atomic_write(best, lambda tmp: torch.save(model, tmp), what="best checkpoint")


# the file paths a ``ModelCheckpoint`` state holds besides its ``best_k_models`` keys
_PATH_FIELDS = ("best_model_path", "kth_best_model_path", "last_model_path")


def _is_path(value: object) -> bool:
    """Whether ``value`` is a non-empty local file path (not a URL, which Lightning would hand to fsspec)."""
    return isinstance(value, str) and bool(value) and "://" not in value and "\0" not in value


def within(path: object, folder: Path) -> Path | None:
    """``path`` relative to ``folder`` when it names a file inside it, both resolved (``..`` and symlinks
    followed); None otherwise (outside, not a local path, unresolvable)."""
    if not isinstance(path, str) or not _is_path(path):
        return None
    try:
        resolved, root = Path(path).resolve(), folder.resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a name too long
        return None
    return resolved.relative_to(root) if root in resolved.parents else None


def confine_paths(
    state: dict[str, object], folder: Path, mode: str = "max", source: Path | None = None
) -> list[str]:
    """Keep in a ``ModelCheckpoint`` state (monitoring in ``mode``) only the file paths inside ``folder``
    (the run's checkpoint folder, where Lightning removes and writes), rewritten under it, or files in
    ``source`` (the resumed checkpoint's own folder, only ever read), rewritten resolved; where top-k
    entries go, the best and k-th are taken again from those kept. Returns the paths dropped, quoted."""

    def confined(path: object) -> str | None:
        here = within(path, folder)
        if here is not None:
            return str(folder / here)
        if source is None or (there := within(path, source)) is None or len(there.parts) != 1:
            return None
        return str(source.resolve() / there) if (source / there).is_file() else None

    dropped: list[str] = []
    for name in _PATH_FIELDS:
        value = state.get(name)
        if value:
            state[name] = confined(value) or ""
            if not state[name]:
                dropped.append(quoted(value, 60))
                if name == "best_model_path":
                    state["best_model_score"] = None
    best_k = state.get("best_k_models")
    if best_k is None:
        return dropped
    ranked = best_k if isinstance(best_k, dict) else {}
    kept = {path: score for k, score in ranked.items() if (path := confined(k)) is not None}
    if len(kept) == len(ranked) and isinstance(best_k, dict):
        state["best_k_models"] = kept
        return dropped
    dropped += [quoted(k, 60) for k in ranked if confined(k) is None] or [quoted(best_k, 60)]
    state["best_k_models"] = kept
    if kept:
        best, worst = (max, min) if mode == "max" else (min, max)
        worst_score = -math.inf if mode == "max" else math.inf  # a score that is not a number ranks last

        def score(path: str) -> float:
            value = kept[path]
            numeric = isinstance(value, int | float | torch.Tensor) and not isinstance(value, bool)
            return (
                float(value)
                if numeric and (not isinstance(value, torch.Tensor) or value.numel() == 1)
                else worst_score
            )

        best_path, kth_path = best(kept, key=score), worst(kept, key=score)
        state["best_model_path"], state["best_model_score"] = best_path, kept[best_path]
        state["kth_best_model_path"], state["kth_value"] = kth_path, kept[kth_path]
    else:
        state["kth_best_model_path"], state["kth_value"] = "", None
    return dropped


def with_best(ckpt: dict[str, object], folder: Path) -> dict[str, object]:
    """A resumable checkpoint that also carries its run's best model (weights and what rebuilds them) when
    that is another file in ``folder`` (the checkpoint's own), for a resume on a machine without the run's
    folder (``RelocatedResume``); a best model named outside ``folder`` is not read."""
    callbacks = ckpt.get("callbacks")
    states = (
        [v for k, v in callbacks.items() if str(k).startswith("ModelCheckpoint")]
        if isinstance(callbacks, dict)
        else []
    )
    named = (s.get("best_model_path") for s in states if isinstance(s, dict))
    best = next((folder / here for p in named if (here := within(p, folder)) is not None), None)
    if best is None or not best.is_file():
        return ckpt
    model = read_checkpoint(best)
    keep = ("hyper_parameters", "state_dict", "epoch", "global_step", "run_config", "sa_conv_version")
    kept = {k: model[k] for k in keep if k in model}
    kept["pytorch-lightning_version"] = model.get("pytorch-lightning_version")
    return {**ckpt, "carried_best": {"file": best.name, "checkpoint": kept}}


class InterruptCheckpoint(pl.Callback):
    """Saves ``<dirpath>/<filename>.ckpt`` when the run stops on SIGTERM (or SIGINT, which the run turns
    into SIGTERM): Lightning stops at the end of a step, so the checkpoint resumes exactly. Other errors
    (a NaN loss) keep the last good checkpoint instead. A fit that completes removes it once a later
    ``last.ckpt`` is written beside it (a smoke test writes none: it stays).

    Not Lightning's ``OnExceptionCheckpoint``: with one of those, ``fit(ckpt_path=None)`` silently
    resumes from it whenever the file exists.
    """

    def __init__(self, *, dirpath: str | Path, filename: str = "interrupted") -> None:
        self.path = Path(dirpath) / f"{filename}.ckpt"

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, SIGTERMException) and trainer.state.fn == TrainerFn.FITTING:
            trainer.save_checkpoint(self.path, weights_only=False)  # a full, resumable checkpoint

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        here, last = self.path, self.path.with_name("last.ckpt")
        stale = here.exists() and last.exists() and last.stat().st_mtime_ns > here.stat().st_mtime_ns
        if trainer.is_global_zero and stale:  # a later state of the run is saved
            here.unlink()


# the global RNG states a checkpoint holds: torch's, numpy's (its key array an int64 tensor; an array in
# older checkpoints), python's and, where CUDA is in use, this process's device's (a list in older ones)
RNGStates = TypedDict(
    "RNGStates",
    {
        "torch": torch.Tensor,
        "numpy": tuple[str, "torch.Tensor | np.ndarray", int, int, float],
        "python": tuple[object, ...],
        "torch.cuda": "torch.Tensor | list[torch.Tensor]",
    },
    total=False,
)


def rng_states() -> RNGStates:
    """The global RNG states: torch, this process's CUDA device (where it is in use), numpy, python; plain
    data and tensors (numpy's key array as an int64 tensor), which load without running code."""
    numpy_state = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True))
    name, keys, pos, has_gauss, cached = numpy_state
    states: RNGStates = {
        "torch": torch.get_rng_state(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # this rank's own device
        states["torch.cuda"] = torch.cuda.get_rng_state()
    return states


def set_rng_states(states: RNGStates) -> None:
    """Restore what ``rng_states`` returned (the CUDA states only where CUDA is)."""
    torch.set_rng_state(states["torch"])
    name, keys, pos, has_gauss, cached = states["numpy"]  # keys: a tensor, or an array (older checkpoints)
    np.random.set_state((name, np.asarray(keys, dtype=np.int64).astype(np.uint32), pos, has_gauss, cached))
    random.setstate(states["python"])
    cuda = states.get("torch.cuda")
    if cuda is not None and torch.cuda.is_available():
        # one device's state (every rank of a run has the same: the same seed, the same draws); older
        # checkpoints hold a list of every device's: this rank's device takes the first
        torch.cuda.set_rng_state(cuda[0] if isinstance(cuda, list | tuple) else cuda)


class ResumableRNG(pl.Callback):
    """Saves the global RNG states (torch, CUDA, numpy, python) with every checkpoint and restores them
    just before the first training batch after a resume, so dropout continues the same stream.

    Lightning keeps these states only in its fault-tolerant internals (no public API), so the callback
    collects them itself, in the same layout."""

    def __init__(self) -> None:
        self._pending: RNGStates | None = None

    def state_dict(self) -> dict[str, object]:
        return {"rng": rng_states()}

    def load_state_dict(self, state_dict: dict[str, object]) -> None:
        # this callback's own state (a checkpoint's types are bounded as it is read: ``utils.safe_load``)
        self._pending = cast(RNGStates, state_dict["rng"])

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        if self._pending is not None:
            set_rng_states(self._pending)
            self._pending = None


def module_from_checkpoint(record: str | Path | dict[str, object] | TrainedModel) -> ImageClassifier:
    """The LightningModule a trained model (``load_trained``'s record) or a checkpoint (a path, or its
    already-read ``read_checkpoint`` dict) rebuilds, its weights loaded; ``CheckpointError`` for weights
    that do not fit their model or hold NaN or infinity."""
    if isinstance(record, TrainedModel):
        hparams, state = record.hyper_parameters, record.state_dict
    else:
        source = "the checkpoint" if isinstance(record, dict) else str(record)
        ckpt = record if isinstance(record, dict) else read_checkpoint(record)
        hparams = HyperParameters.read(ckpt.get("hyper_parameters"), source)
        state = tensors_of(ckpt.get("state_dict"), source)
    mismatch = f"the checkpoint does not match its model {quoted(hparams.model)}"
    try:
        if hparams.extra:
            raise TypeError(f"unexpected hyper-parameter {quoted(next(iter(hparams.extra)), 40)}")
        module = ImageClassifier(
            model=hparams.model,
            model_config=hparams.model_config,
            optim=hparams.optim,
            val_name=hparams.val_name,
        )
        check_fit(state, module, mismatch)
        module.load_state_dict(state)
    except (ValueError, TypeError, RuntimeError) as err:
        if isinstance(err, CheckpointError):
            raise
        raise CheckpointError(f"{mismatch}: {_load_error(err)}") from None
    return module


def _load_error(err: BaseException) -> str:
    """The gist of a ``load_state_dict`` error in one line: its first specific complaint, and how many."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):  # "Error(s) in loading state_dict for ...:" then details
        detail = lines[1].rstrip(".")
        more = f" (and {len(lines) - 2} more)" if len(lines) > 2 else ""
        return (detail[:240] + "...") if len(detail) > 240 else detail + more
    return lines[0] if lines else type(err).__name__
