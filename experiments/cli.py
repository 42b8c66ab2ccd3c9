"""Shared command-line plumbing: one-line errors, a parser that fails in one line, atomic writes."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import torch

__all__ = ["ArgumentParser", "UserError", "hardware", "main_guard", "write_json_atomic", "write_text_atomic"]


class UserError(RuntimeError):
    """Bad input from the user: reported as one line, no traceback."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _user_errors() -> tuple[type[BaseException], ...]:
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    from sa_conv.data import DataError
    from sa_conv.lit import CheckpointError

    return (
        UserError,
        ValueError,
        TypeError,
        DataError,
        CheckpointError,
        FloatingPointError,
        FileNotFoundError,
        MisconfigurationException,
    )


def main_guard(main: Callable[[list[str] | None], int | None]) -> Callable[[list[str] | None], int]:
    """Run ``main(argv)``; known user errors print ``error: ...`` in one line and exit 1.

    ``--debug`` anywhere on the command line shows the full traceback instead.
    """

    def wrapped(argv: list[str] | None = None) -> int:
        quiet_libraries()
        argv = list(sys.argv[1:] if argv is None else argv)
        debug = "--debug" in argv
        try:
            return main([a for a in argv if a != "--debug"]) or 0
        except _user_errors() as err:
            if debug:
                raise
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            print(f"error: {message}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return 130

    return wrapped


def quiet_libraries() -> None:
    """Silence library chatter that says nothing about the run (tips, a known deprecation)."""
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*litlogger.*|.*litmodels.*")
    logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(
        lambda record: "Tip:" not in record.getMessage()
    )


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``: never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` atomically (see ``write_text_atomic``)."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def hardware() -> dict[str, Any]:
    """The machine a number came from."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    info: dict[str, Any] = {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    return info
