"""Atomic file writes: a kill mid-write leaves the previous file (or none), never a half-written one; a
full disk or quota (ENOSPC, EDQUOT) is one ``DiskFullError`` naming the file, what it held and the free
space, with the previous file intact. Files that several processes update (a study's results table)
are changed under an exclusive lock, their rows merged (``locked``, ``merge_rows``)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "DiskFullError",
    "atomic_write",
    "can_write_in",
    "disk_full",
    "free_bytes",
    "human_size",
    "is_disk_full",
    "lock_file_of",
    "locked",
    "merge_rows",
    "new_folders_removed_on_error",
    "new_run_removed_on_error",
    "prepare_output_dir",
    "save_png",
    "write_json",
    "write_text",
]

_FULL = (errno.ENOSPC, errno.EDQUOT)
# what a file holds, by its suffix (the error says what was being written)
_KINDS = {".ckpt": "checkpoint", ".json": "results", ".yaml": "config", ".png": "figure", ".html": "page"}


class DiskFullError(OSError):
    """A write found no space (disk or quota). The message names the file, what it held and the free
    space; the file's previous version, if any, is intact."""


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` is a full disk or quota (an ``OSError`` ENOSPC / EDQUOT, or our own error)."""
    return isinstance(err, DiskFullError) or (isinstance(err, OSError) and err.errno in _FULL)


def free_bytes(path: str | Path) -> int:
    """Free bytes on the file system of ``path`` (its nearest existing folder)."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def human_size(n: float) -> str:
    """``n`` bytes in B, KB, MB or GB."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def disk_full(path: str | Path, what: str | None = None, detail: str = "") -> DiskFullError:
    """The error for a full disk while writing ``what`` to ``path`` (a file, or a run's folder)."""
    path = Path(path)
    what = what or _KINDS.get(path.suffix, "file")
    message = (
        f"no space left writing the {what} {path} ({human_size(free_bytes(path))} free{detail}); nothing was "
        "half-written: free space, then resume with the same command and --resume"
    )
    return DiskFullError(errno.ENOSPC, message)


def can_write_in(folder: str | Path) -> str | None:
    """Why a new file cannot be written in ``folder`` (made on demand), or None where it can: its nearest
    existing part must be a folder that takes a file (probed with an empty file, removed at once)."""
    folder = Path(folder).absolute()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        fd, name = tempfile.mkstemp(dir=existing, prefix=".sa-conv-probe.", suffix=".tmp")
    except OSError as err:
        return f"{existing}: {err.strerror or err}"
    os.close(fd)
    os.unlink(name)
    return None


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


def atomic_write(path: str | Path, write: Callable[[Path], object], *, what: str | None = None) -> None:
    """Call ``write(tmp)`` on a temporary file next to ``path``, then rename it over ``path``.

    A symlink is written through (its target replaced, the link kept); a path that is not a regular file
    (a device, a pipe) is refused. The temporary file lives in the same folder (a rename within one file
    system is atomic) and gets the permissions of a plain ``open()`` under the process umask (``mkstemp``
    would leave it 0600). A full disk or quota raises ``DiskFullError`` naming ``path`` and ``what`` it
    holds; ``path`` is untouched.
    """
    path = Path(path)
    if path.is_symlink():  # written through to its target: renaming over the link would replace it
        target = Path(os.path.realpath(path))
        if target.is_symlink() or not target.parent.is_dir():  # a loop, or a link into no folder
            raise OSError(errno.ELOOP, "A link that leads to no writable file", str(path))
        path = target
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory (name a file)", str(path))
    if path.exists() and not path.is_file():  # a device, a pipe, a socket: renaming over it would replace it
        raise OSError(errno.EINVAL, "Not a regular file (name a file to write)", str(path))
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        tmp = Path(name)
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except Exception as err:  # torch.save reports a full disk as a RuntimeError of its zip writer
        if is_disk_full(err) or (tmp is not None and _ran_out(err, tmp)):
            raise disk_full(path, what) from None
        if isinstance(err, OSError) and Path(str(err.filename)).name.startswith(f".{path.name}."):
            # the error names the file the user asked for, not our temporary one
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def _ran_out(err: BaseException, tmp: Path) -> bool:
    """A write error that is the disk filling up: the error says so, or (torch.save's zip writer, which
    reports ``unexpected pos``) the file system has no room left."""
    text = str(err)
    return (
        "No space left" in text
        or "Disk quota" in text
        or ("unexpected pos" in text and free_bytes(tmp) < 1 << 20)
    )


def write_text(path: str | Path, text: str, *, what: str | None = None) -> None:
    """Write ``text`` to ``path`` atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text), what=what)


def write_json(path: str | Path, data: Any, *, what: str | None = None) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n", what=what)


def save_png(figure: Any, path: str | Path, *, dpi: int = 110) -> None:
    """Save a matplotlib figure as PNG atomically."""
    atomic_write(
        path,
        lambda tmp: figure.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.15),
        what="figure",
    )


def lock_file_of(path: str | Path) -> Path:
    """The lock file of ``path`` and its siblings of the same stem: ``results/small.json`` and
    ``results/small.md`` share ``results/.small.lock``."""
    path = Path(path)
    return path.parent / f".{path.stem}.lock"


@contextmanager
def locked(lock: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock`` (made if missing) for the block: processes that lock the
    same file take turns. The kernel drops the lock when its holder ends, killed or not, so a dead writer
    never blocks the next; the file stays (removing it would let two processes lock different files)."""
    lock = Path(lock)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


Key = TypeVar("Key", bound=Hashable)
Row = TypeVar("Row")


def merge_rows(
    current: Mapping[Key, Row],
    ours: Mapping[Key, Row],
    *,
    own: Collection[Key],
    seen: Mapping[Key, Row],
) -> dict[Key, Row]:
    """The rows of a table several writers share, after one writer's update, by key.

    ``current``: the file's rows now (read under the lock); ``ours``: the writer's view of the table;
    ``own``: the keys of the rows it rebuilt itself (its runs: newer than the file's); ``seen``: the rows
    as it last read or wrote the file. An own row replaces the file's; a row another writer changed since
    ``seen`` is kept as that writer wrote it; any other row is the writer's view, or the file's where it
    has none. No row of either side is lost.
    """
    merged = dict(current)
    for key, row in ours.items():
        theirs = key in current and current[key] != seen.get(key)
        if key in own or not theirs:
            merged[key] = row
    return merged


def prepare_output_dir(path: Path) -> None:
    """Make the output folder ``path`` (and its parents) and check that it takes files (a probe file,
    removed at once); ``ValueError`` saying what is wrong otherwise."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"output directory {path} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".sa-conv-write-test-{time.time_ns()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"output directory {path} is not writable ({err.strerror or err})") from None


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


@contextmanager
def new_run_removed_on_error(folder: Path, keep: str = "*.ckpt") -> Iterator[None]:
    """On an exception in the block, remove the folders it made on the way to ``folder`` if they hold no
    file matching ``keep``: a run that fails before its first checkpoint leaves no run folder behind."""
    top = None  # the highest folder on the way to ``folder`` that does not exist yet
    for made in (folder.absolute(), *folder.absolute().parents):
        if made.exists():
            break
        top = made
    try:
        yield
    except BaseException:
        if top is not None and top.is_dir() and not any(top.rglob(keep)):
            shutil.rmtree(top, ignore_errors=True)
        raise
