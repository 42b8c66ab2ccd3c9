"""A signal while a command is not training (starting up, writing figures) ends it at once with one
line; during training the run's own handling takes over (a checkpoint at the end of the step)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType

__all__ = ["EXIT_CODES", "StoppedOutsideTraining", "stop_line", "stopping_at_once", "while_training"]

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class StoppedOutsideTraining(BaseException):
    """SIGTERM arrived while no run was training. A ``BaseException``, as ``KeyboardInterrupt`` is: the
    libraries' ``except Exception`` lets it through."""


def stop_line(name: str) -> str:
    """The line a command ends with when the signal ``name`` arrives outside training."""
    if name == "SIGINT":
        return "error: interrupted"
    return f"stopped: {name} outside training; the same command goes on (--resume for a run)"


def _importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (where libraries catch errors and go on half-loaded)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


class _StopAtOnce:
    """The handler outside training: raises where the program is; inside an import (which writes
    nothing, and whose libraries would swallow or garble the error) says the line and exits there."""

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if _importing(frame):
            os.write(2, f"{stop_line(name)}\n".encode())
            os._exit(EXIT_CODES[name])
        raise KeyboardInterrupt if name == "SIGINT" else StoppedOutsideTraining(name)


@contextlib.contextmanager
def stopping_at_once() -> Iterator[None]:
    """Ctrl-C and SIGTERM stop the program at once in this block, except while a run trains in it."""
    try:
        previous = {sig: signal.signal(sig, _StopAtOnce()) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: signals left alone
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def while_training() -> Iterator[None]:
    """The default SIGTERM handling back while a run trains, for Lightning's handler to take over
    (Lightning calls the handler it finds too: ours would stop the run in the middle of its step)."""
    current = signal.getsignal(signal.SIGTERM)
    if not isinstance(current, _StopAtOnce):
        yield
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, current)
