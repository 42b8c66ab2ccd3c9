"""A program called in-process through its error guard, as its command runs it, or in a process of its
own; and the checks that a failure is one ``error:`` line and a requested stop one ``stopped:`` line."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

from experiments.cli import main_guard
from helpers.paths import REPO


def call(module: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``module.main(argv)`` as its command does; returns (exit code, stdout, stderr)."""
    code = main_guard(module.main)(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str) -> str:
    """The one ``error:`` line of a failed command (asserting there is exactly one, and no traceback)."""
    lines = [line for line in err.strip().splitlines() if "error:" in line]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def one_line_stop(code: int, err: str) -> str:
    """A requested stop: one ``stopped:`` line, no error line, no traceback."""
    lines = [line for line in err.strip().splitlines() if line.startswith("stopped:")]
    assert code != 0 and len(lines) == 1 and "error:" not in err and "Traceback" not in err, err
    assert "Received SIG" not in err  # Lightning's own line about the signal is not repeated
    return lines[0]


def run_cli(args: list[str]) -> subprocess.Popen:
    """``python -m experiments.run ARGS`` in a process of its own, from the checkout (stderr piped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.run", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
