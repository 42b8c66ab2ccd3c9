"""Resumable runs: checkpoints written atomically, and the global RNG carried across a resume."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.seed import _collect_rng_states, _set_rng_states
from pytorch_lightning.plugins.io import TorchCheckpointIO

__all__ = ["AtomicCheckpointIO", "ResumableRNG", "readable_checkpoint"]


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a temporary file in the same folder, then ``os.replace``: a kill during a save
    leaves the previous file intact, never a half-written one."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None
    ) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            torch.save(checkpoint, tmp)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)


class ResumableRNG(pl.Callback):
    """Saves the global RNG states (torch, CUDA, numpy, python) with every checkpoint and restores them
    just before the first training batch after a resume, so dropout continues the same stream."""

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"rng": _collect_rng_states(include_cuda=torch.cuda.is_available())}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict["rng"]

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._pending is not None:
            _set_rng_states(self._pending)
            self._pending = None


def readable_checkpoint(path: Path) -> bool:
    """Whether ``path`` loads as a checkpoint (used to skip a corrupt one when resuming)."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception:  # truncated zip, pickle errors, EOF: all mean unreadable
        return False
    return isinstance(ckpt, dict) and "state_dict" in ckpt
