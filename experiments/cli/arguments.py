"""The command line's parser and argument types: one line for a bad option (the flag a typo meant), and
numbers, seeds and output paths checked before any work."""

from __future__ import annotations

import argparse
import difflib
import math
from pathlib import Path
from typing import Any, NoReturn

from sa_conv.utils.files import can_write_in
from sa_conv.utils.quote import quoted

__all__ = [
    "SEED_MAX",
    "ArgumentParser",
    "output_file",
    "output_folder",
    "parse_float",
    "parse_int",
    "positive_float",
    "positive_int",
    "seed_int",
]

SUGGESTION_CUTOFF = 0.75  # difflib's similarity a flag needs to be suggested for a mistyped one
SEED_MAX = 2**32 - 1  # numpy's seeds (Lightning seeds numpy too)


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr (and exit code 2), a mistyped flag with the flag
    it is closest to; flags are spelled out (no prefix abbreviations: ``--epoch`` is a typo of
    ``--epochs``, never silently taken for it); every program has --debug (read by ``main_guard``, which
    turns errors into one line unless it is given)."""

    def __init__(self, *args: Any, add_debug: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        if add_debug:
            self.add_argument("--debug", action="store_true", help="show tracebacks, not one-line errors")

    def error(self, message: str) -> NoReturn:
        unknown = "unrecognized arguments: "
        if message.startswith(unknown):
            tokens = message[len(unknown) :].split(" ")
            hints = [self.suggestion(token) for token in tokens]
            if any(hints):
                marked = [f"{t} (did you mean {h}?)" if h else t for t, h in zip(tokens, hints, strict=True)]
                self.exit(2, f"{self.prog}: error: {unknown}{' '.join(marked)}\n")
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def suggestion(self, token: str) -> str | None:
        """The flag ``token`` (an unrecognized argument) most likely meant: the one it spells (``_`` and
        ``-`` the same, any case, any number of leading dashes), the only one it begins, else the most
        similar one if it is close enough."""
        name = token.split("=", 1)[0]
        if not name.startswith("-") or name == "-":
            return None
        wanted = "--" + name.lstrip("-").lower().replace("_", "-")
        # argparse has no public list of a parser's flags
        flags = [f for f in self._option_string_actions if f.startswith("--") and f != name]
        if wanted in flags:
            return wanted
        longer = [f for f in flags if f.startswith(wanted)]
        if len(longer) == 1:  # what argparse's abbreviations would have taken it for
            return longer[0]
        close = difflib.get_close_matches(wanted, flags, n=1, cutoff=SUGGESTION_CUTOFF)
        return close[0] if close else None


def parse_int(text: str) -> int:
    """argparse type: an integer."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {quoted(text)}") from None


def parse_float(text: str) -> float:
    """argparse type: a number, not NaN."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {quoted(text)}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError("nan is not a number here")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = parse_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (a tolerance, a scale)."""
    value = parse_float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def seed_int(text: str) -> int:
    """argparse type: a random seed, 0 to 2**32 - 1."""
    value = parse_int(text)
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"a seed is 0 to {SEED_MAX}, got {text}")
    return value


def output_file(text: str) -> Path:
    """argparse type: a file the program will write, checked before any work: not a folder, in a folder
    that exists or can be made, and writable."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a folder: name a file in it")
    _check_writable(path.parent, path)
    return path


def output_folder(text: str) -> Path:
    """argparse type: a folder the program will write into (made if missing), checked before any work."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a file, not a folder")
    _check_writable(path, path)
    return path


def _check_writable(folder: Path, path: Path) -> None:
    """``folder`` (or, while it does not exist, its nearest existing parent) takes a new file."""

    reason = can_write_in(folder)
    if reason:
        raise argparse.ArgumentTypeError(f"cannot write {path}: {reason}")
