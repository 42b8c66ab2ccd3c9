"""Stopping a run on request: SIGTERM (schedulers) and Ctrl-C end the current step, save a checkpoint
and say how to resume; a second Ctrl-C interrupts at once."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["RunInterruptedError", "sigint_as_sigterm"]


class RunInterruptedError(RuntimeError):
    """The run was stopped by SIGTERM or SIGINT; a checkpoint to resume from was saved."""

    def __init__(self, run_dir: Path, checkpoint: Path, step: int, signal: str) -> None:
        super().__init__(f"{signal} at step {step}: saved {checkpoint}")
        self.run_dir, self.checkpoint, self.step, self.signal = run_dir, checkpoint, step, signal


@contextlib.contextmanager
def sigint_as_sigterm() -> Iterator[dict[str, str]]:
    """A first Ctrl-C stops like SIGTERM (at the end of the step, with a checkpoint); a second one
    interrupts at once. Yields which signal arrived."""
    received = {"signal": "SIGTERM"}

    def handler(signum: int, frame: Any) -> None:
        received["signal"] = "SIGINT"
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # before Lightning's handler is in
            raise KeyboardInterrupt
        signal.raise_signal(signal.SIGTERM)

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield received
        return
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)
