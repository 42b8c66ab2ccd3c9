"""The suite's own errors that commands report as one line, torch-free so that a command can name them
before its heavy imports."""

from __future__ import annotations

__all__ = ["CheckpointError", "DataError", "UnsafeCheckpointError"]


class CheckpointError(RuntimeError):
    """A file is not a readable sa-conv checkpoint."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint asks to run code (a function or class outside the allow-list) when it is read."""


class DataError(RuntimeError):
    """The data cannot be loaded; the message says what to do."""
