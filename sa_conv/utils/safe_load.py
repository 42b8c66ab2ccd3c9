"""Reading a checkpoint without running code.

A checkpoint is a pickle, and a pickle can ask to run any function when it is read. Every read is
``torch.load(..., weights_only=True)``: tensors and plain data only, plus the few numpy types that hold
the RNG state of checkpoints written before it was stored as a tensor (``SAFE_GLOBALS``, nothing
broader). A file that asks for anything else is refused unread (``UnsafeCheckpointError``).
"""

from __future__ import annotations

import contextlib
import pickle
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sa_conv.utils.errors import CheckpointError, UnsafeCheckpointError
from sa_conv.utils.untrusted import UntrustedInputError, check_bounds
from sa_conv.utils.version import __version__

__all__ = [
    "SAFE_GLOBALS",
    "CheckpointError",
    "UnsafeCheckpointError",
    "load_checkpoint_file",
    "read_checkpoint",
    "run_config_of",
    "safe_globals",
]


# the only non-tensor globals a checkpoint may name: numpy's RNG state (a uint32 array), as checkpoints
# written before the state was stored as a tensor hold it
SAFE_GLOBALS: list[Any] = [
    np._core.multiarray._reconstruct,  # type: ignore[attr-defined]  # rebuilds an ndarray of the allowed class and dtype below
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
]


@contextlib.contextmanager
def safe_globals() -> Iterator[None]:
    """``torch.load(weights_only=True)`` inside this block also accepts ``SAFE_GLOBALS`` (and nothing else);
    Lightning's own loads (``fit``/``test`` with ``ckpt_path``) run inside it too."""
    with torch.serialization.safe_globals(SAFE_GLOBALS):
        yield


def load_checkpoint_file(path: str | Path) -> Any:
    """``torch.load`` of ``path`` onto the CPU without running code; ``UnsafeCheckpointError`` (nothing
    read) if the file names a global outside the allow-list, ``CheckpointError`` if it is not readable."""
    try:
        with safe_globals(), warnings.catch_warnings():
            # torch warns of a pickle protocol it may not read; the error below says what it could not
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's refusal of a function or class outside the allow-list, before anything ran (code needs one)
        found = re.search(r"GLOBAL (\S+)", str(err))
        if found:
            raise UnsafeCheckpointError(
                f"{path} asks to run code when it is read ({found.group(1)}: not a tensor or plain data): "
                "it may be unsafe and was not loaded"
            ) from None
        detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(err))  # the safe reader's own complaint
        what = f"{type(err).__name__}: {detail.group(1).strip()}" if detail else type(err).__name__
        what += "; a plain pickle, not a torch checkpoint?" if "Unsupported operand" in what else ""
        raise CheckpointError(f"{path} is not a readable checkpoint ({what}); it was not loaded") from None
    except Exception as err:  # zip and EOF errors all mean the same to the user
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(err).__name__})") from None


def read_checkpoint(path: str | Path) -> dict[str, object]:
    """Read a checkpoint written by a run (no code runs); ``CheckpointError`` names what is wrong with it."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory, not a file")
    if path.exists() and not path.is_file():
        raise CheckpointError(f"checkpoint {path} is not a regular file (a device, a pipe or a socket)")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist{_what_is_there(path.parent)}")
    try:
        path.open("rb").close()
    except OSError as err:
        reason = "permission denied" if isinstance(err, PermissionError) else err.strerror
        raise CheckpointError(f"cannot read checkpoint {path}: {reason}") from None
    ckpt = load_checkpoint_file(path)
    try:  # untrusted structure bounded before anything walks it
        check_bounds(ckpt, f"checkpoint {path}")
    except UntrustedInputError as err:
        raise CheckpointError(str(err)) from None
    hparams = ckpt.get("hyper_parameters") if isinstance(ckpt, dict) else None
    if not hparams or "model" not in hparams or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} is not an sa-conv checkpoint (no model hyper-parameters)")
    version = ckpt.get("sa_conv_version")
    if version != __version__:
        raise CheckpointError(f"{path} was written by sa-conv {version}, this is sa-conv {__version__}")
    return ckpt


SHOWN_NAMES = 8  # checkpoints a missing checkpoint's message names before it counts the rest


def _what_is_there(folder: Path) -> str:
    """The end of a missing checkpoint's message: the checkpoints its folder does have, or why none."""
    if not folder.is_dir():
        return f" (nor does its folder {folder})"
    try:
        here, below = _checkpoints_in(folder), _checkpoints_in(folder / "checkpoints")
    except OSError:  # an unreadable folder: the missing file is the news
        return ""
    if here:
        return f"; that folder has: {_listed(here)}"
    if below:  # a run's folder named instead of its checkpoints/ folder
        return f"; that folder has no checkpoints, its checkpoints/ folder has: {_listed(below)}"
    return "; that folder has no checkpoints (*.ckpt)"


def _checkpoints_in(folder: Path) -> list[str]:
    """The names of the ``*.ckpt`` files in ``folder`` (none if it is not a folder), sorted."""
    return sorted(p.name for p in folder.glob("*.ckpt") if p.is_file()) if folder.is_dir() else []


def _listed(names: list[str]) -> str:
    """``names`` joined, at most ``SHOWN_NAMES`` of them and a count of the rest."""
    more = len(names) - SHOWN_NAMES
    return ", ".join(names[:SHOWN_NAMES]) + (f" and {more} more" if more > 0 else "")


def run_config_of(ckpt: dict[str, object], path: str | Path = "the checkpoint") -> dict[str, object]:
    """The run config stored in a checkpoint by ``RunConfigRecord``; ``CheckpointError`` without one."""
    stored = ckpt.get("run_config")
    if not isinstance(stored, dict):
        raise CheckpointError(f"{path} holds no run config (not written by experiments.run)")
    return {str(k): v for k, v in stored.items()}
