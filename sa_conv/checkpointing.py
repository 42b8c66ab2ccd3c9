"""Checkpoints of a run: written atomically, read by one function, resumable exactly (``sa_conv.resume``
finds the one to resume by config)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.io import TorchCheckpointIO
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException

from sa_conv import __version__
from sa_conv.files import atomic_write, disk_full, free_bytes, human_size

__all__ = [
    "AtomicCheckpointIO",
    "CheckpointError",
    "InterruptCheckpoint",
    "ResumableRNG",
    "RunConfigRecord",
    "read_checkpoint",
    "run_config_of",
]


class CheckpointError(RuntimeError):
    """A file is not a readable sa-conv checkpoint."""


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by a run; ``CheckpointError`` names what is wrong with it."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory, not a file")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(
            path, map_location="cpu", weights_only=False
        )  # our own files: RNG and loader states
    except Exception as err:  # pickle, zip and EOF errors all mean the same to the user
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(err).__name__})") from None
    hparams = ckpt.get("hyper_parameters") if isinstance(ckpt, dict) else None
    if not hparams or "model" not in hparams or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} is not an sa-conv checkpoint (no model hyper-parameters)")
    version = ckpt.get("sa_conv_version")
    if version != __version__:
        raise CheckpointError(f"{path} was written by sa-conv {version}, this is sa-conv {__version__}")
    return ckpt


def run_config_of(ckpt: dict[str, Any], path: str | Path = "the checkpoint") -> dict[str, Any]:
    """The run config stored in a checkpoint by ``RunConfigRecord``; ``CheckpointError`` without one."""
    stored = ckpt.get("run_config")
    if stored is None:
        raise CheckpointError(f"{path} holds no run config (not written by experiments.run)")
    return stored


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` through ``sa_conv.files.atomic_write``: a temporary file in the checkpoint's own folder.

    Kept because Lightning's ``TorchCheckpointIO`` stages its temporary file in the system temp folder:
    when that is another file system, ``shutil.move`` copies, and a kill mid-copy leaves half a file. A
    checkpoint that cannot fit (less free space than the last one took) is refused before it is written.
    """

    def __init__(self) -> None:
        super().__init__()
        self._last_size = 0  # bytes of the last checkpoint written: the next one will need about as many

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None
    ) -> None:
        path = Path(path)
        needed = self._last_size or (path.stat().st_size if path.exists() else 0)
        if needed and free_bytes(path.parent) < needed:  # say so before a write that cannot succeed
            raise disk_full(path, "checkpoint", f"; the last one took {human_size(needed)}: it will not fit")
        atomic_write(path, lambda tmp: torch.save(checkpoint, tmp), what="checkpoint")
        self._last_size = path.stat().st_size


class RunConfigRecord(pl.Callback):
    """Stores the run's config in every checkpoint, for config-checked resumes and repeats."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        checkpoint["run_config"] = self.config


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


def rng_states() -> dict[str, Any]:
    """The global RNG states: torch, this process's CUDA device (where it is in use), numpy, python."""
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # this rank's own device
        states["torch.cuda"] = torch.cuda.get_rng_state()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what ``rng_states`` returned (the CUDA states only where CUDA is)."""
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
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
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"rng": rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict["rng"]

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._pending is not None:
            set_rng_states(self._pending)
            self._pending = None
