"""Waiting on a run in a process of its own."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def wait_for_step(
    proc: subprocess.Popen, step_of: Callable[[], int], step: int, seconds: float = 900
) -> bool:
    """Until ``step_of()`` (the run's newest saved step, -1 while none can be read) reaches ``step``: True;
    False where the process ended first, or after ``seconds`` (the process then killed, so that its output
    can be read)."""
    deadline = time.monotonic() + seconds
    while proc.poll() is None:
        if step_of() >= step:
            return True
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return False
        time.sleep(0.05)
    return step_of() >= step
