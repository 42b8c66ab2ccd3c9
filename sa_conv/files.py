"""Atomic file writes: a kill mid-write leaves the previous file (or none), never a half-written one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["atomic_write", "new_folders_removed_on_error", "save_png", "write_json", "write_text"]


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (no window for other threads)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary file next to ``path``, then rename it over ``path``.

    The temporary file lives in the same folder (a rename within one file system is atomic) and gets the
    permissions of a plain ``open()`` under the process umask (``mkstemp`` would leave it 0600).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def save_png(figure: Any, path: str | Path, *, dpi: int = 110) -> None:
    """Save a matplotlib figure as PNG atomically."""
    atomic_write(
        path, lambda tmp: figure.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.15)
    )


@contextmanager
def new_folders_removed_on_error(path: str | Path) -> Iterator[None]:
    """On an exception in the block, remove the folders it made on the way to ``path`` if they hold no file.

    A run that fails before writing anything (bad data, no network) leaves no empty output or download
    folder behind; one that wrote a checkpoint keeps it.
    """
    path = Path(path).absolute()
    top = None  # the highest folder of the path that does not exist yet
    for folder in (path, *path.parents):
        if folder.exists():
            break
        top = folder
    try:
        yield
    except BaseException:
        if top is not None and top.is_dir() and not any(p.is_file() for p in top.rglob("*")):
            shutil.rmtree(top, ignore_errors=True)
        raise
