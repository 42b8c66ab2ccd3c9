"""The suite's own errors that commands report as one line, torch-free so that a command can name them
before its heavy imports."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CheckpointError", "DataError", "RankLostError", "RunInterruptedError", "UnsafeCheckpointError"]


class CheckpointError(RuntimeError):
    """A file is not a readable sa-conv checkpoint."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint asks to run code (a function or class outside the allow-list) when it is read."""


class DataError(RuntimeError):
    """The data cannot be loaded; the message says what to do."""


class RunInterruptedError(RuntimeError):
    """The run was stopped by SIGTERM or SIGINT; a checkpoint to resume from was saved."""

    def __init__(self, run_dir: Path, checkpoint: Path, step: int, signal: str) -> None:
        super().__init__(f"{signal} at step {step}: saved {checkpoint}")
        self.run_dir, self.checkpoint, self.step, self.signal = run_dir, checkpoint, step, signal


class RankLostError(RuntimeError):
    """A rank of a distributed run is gone (killed, out of memory, a lost node): this one stopped too."""
