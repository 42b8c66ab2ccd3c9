"""Every command checks its arguments before its heavy imports: an argument error is one line, printed
before torch is imported (the module is not in ``sys.modules`` when the command exits), so it answers at
once."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO

from experiments.commands import COMMANDS

# each command and an argument error of its own (argparse's, or a check of the values)
ERRORS = {
    "experiments.run": (["quadratic", "--epochs", "0"], "epochs must be an integer from 1 to 100,000"),
    "experiments.evaluate": (["--split", "train", "x.ckpt"], "invalid choice: 'train'"),
    "experiments.figures": (["x.ckpt", "--images", "0"], "--images"),
    "experiments.explore": (["x.ckpt", "--images", "-1"], "--images"),
    "experiments.convert": (["--kernel", "zero"], "--kernel"),
    "experiments.prune": (["x.ckpt", "--epochs", "-3"], "--epochs"),
    "experiments.equivalence": (["--trials", "0"], "--trials"),
    "experiments.study": (["--scale", "small", "--only", "no-such-entry"], "no entry no-such-entry"),
    "experiments.benchmark": (["--sections", "everything"], "invalid choice: 'everything'"),
    "experiments.models": (["--yaml"], "unrecognized arguments: --yaml"),
    "experiments.gallery": (["--screenshot", "one"], "--screenshot"),
}

PROBE = """
import runpy, sys
sys.argv = [{module!r}, *{argv!r}]
try:
    runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as stop:
    code = stop.code
sys.stdout.write(f"exit {{code}} torch {{'torch' in sys.modules}}")
"""


def test_every_command_is_registered_and_tried_here() -> None:
    """A command is one module and one line of ``experiments.commands.COMMANDS``; each has its error here."""
    modules = {
        f"experiments.{p.stem}" for p in (REPO / "experiments").glob("*.py") if not p.stem.startswith("_")
    }
    modules |= {f"experiments.{p.parent.name}" for p in (REPO / "experiments").glob("*/__main__.py")}
    registered = {command.module for command in COMMANDS.values()}
    assert modules - {"experiments.commands"} == registered == set(ERRORS)


@pytest.mark.parametrize("module", sorted(ERRORS))
def test_an_argument_error_comes_before_torch(module: str) -> None:
    argv, expected = ERRORS[module]
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module, argv=argv)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stderr.strip().splitlines() if "error" in line]
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.endswith("torch False") and "exit 0" not in proc.stdout, proc.stdout
