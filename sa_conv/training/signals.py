"""Stopping a run on request: SIGTERM (schedulers) and Ctrl-C end the current step, save a checkpoint
and say how to resume; a second Ctrl-C interrupts at once. The first Ctrl-C is acknowledged at once, in
one line, with about how long the step has left to run. And lost ranks: a distributed run whose rank is
gone stops in time (``ddp_aware_strategy``) and says which one (``RankRecord``, ``peer_lost``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.strategies import DDPStrategy

from sa_conv.utils.errors import RankLostError, RunInterruptedError
from sa_conv.utils.stopping import while_training

__all__ = [
    "RankLostError",
    "RankRecord",
    "RunInterruptedError",
    "ddp_aware_strategy",
    "lost_ranks",
    "peer_lost",
    "sigint_as_sigterm",
    "stopping_line",
]


def stopping_line(step_seconds: float | None) -> str:
    """What a first Ctrl-C during training says: the run stops after this step (about ``step_seconds``,
    where known) and a second Ctrl-C aborts without a checkpoint."""
    about = f", about {max(1, round(step_seconds))} s" if step_seconds is not None else ""
    return f"stopping after this step{about}; Ctrl-C again to abort without a checkpoint"


def _tell(line: str) -> None:
    """``line`` on stderr from a signal handler: printed, or written straight to the file descriptor
    where the handler interrupted a write to the same stream (a buffered stream is not reentrant)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except RuntimeError:  # "reentrant call": the main thread was inside a write to stderr
        os.write(2, f"\n{line}\n".encode())


@contextlib.contextmanager
def sigint_as_sigterm(acknowledge: Callable[[], str] | None = None) -> Iterator[dict[str, str]]:
    """A first Ctrl-C stops like SIGTERM (at the end of the step, with a checkpoint); a second one
    interrupts at once. Yields which signal arrived. ``acknowledge``: the line said on stderr at the first
    Ctrl-C (e.g. ``stopping_line`` of the step time), so that nobody waits on silence and presses again."""
    received = {"signal": "SIGTERM"}

    def handler(signum: int, frame: Any) -> None:
        received["signal"] = "SIGINT"
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # before Lightning's handler is in
            raise KeyboardInterrupt
        if acknowledge is not None:
            with contextlib.suppress(Exception):  # a line that cannot be said must not keep the run going
                _tell(acknowledge())
        signal.raise_signal(signal.SIGTERM)

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield received
        return
    try:
        with while_training():
            yield received
    finally:
        signal.signal(signal.SIGINT, previous)


class RankRecord(pl.Callback):
    """Each rank of a distributed run writes its process id where the others can look (``folder``), so
    that a rank whose peer died can say which one."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, rank: int) -> Path:
        return self.folder / f"{os.environ.get('MASTER_PORT', '0')}-rank{rank}.pid"

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.world_size > 1:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.path(trainer.global_rank).write_text(f"{socket.gethostname()} {os.getpid()}")

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.path(trainer.global_rank).unlink(missing_ok=True)


def ddp_aware_strategy(strategy: str, timeout_minutes: float) -> str | DDPStrategy:
    """Lightning's strategy; DDP with a timeout, so that a dead rank ends the others in time (with NCCL, a
    failed collective raises in Python instead of aborting the process: not yet tried on GPUs)."""
    if strategy == "ddp":
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")  # abort the communicators, raise
        return DDPStrategy(timeout=timedelta(minutes=timeout_minutes))
    return strategy


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a child of ours not yet reaped counts as ended)."""
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # our child (Lightning starts the other ranks): reap it
        return waited == pid
    except ChildProcessError:  # not our child
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.is_file() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z"  # a zombie


def lost_ranks(record: RankRecord, world_size: int, me: int) -> list[int]:
    """The other ranks of this machine whose process is gone (ranks on other nodes cannot be told)."""
    gone = []
    for rank in range(world_size):
        path = record.path(rank)
        if rank == me or not path.is_file():
            continue
        try:
            host, pid = path.read_text().split()
            if host == socket.gethostname() and _gone(int(pid)):
                gone.append(rank)
        except (ValueError, OSError):
            continue
    return gone


def peer_lost(
    record: RankRecord, me: int, world: int, err: BaseException, *, grace_s: float = 5.0
) -> RankLostError | None:
    """The one-line error for a distributed run whose collective failed: the rank that is gone (or the
    wait that timed out) and how to go on; None for an error that is not about a peer."""
    text = str(err).lower()
    timed_out = "timeout" in text or "timed out" in text
    gone = lost_ranks(record, world, me)
    if not gone and not timed_out and "peer" not in text and "connection" not in text:
        return None  # another error: it speaks for itself
    deadline = time.monotonic() + grace_s  # a killed rank's sockets close before its process has ended
    while not gone and time.monotonic() < deadline:
        time.sleep(0.05)
        gone = lost_ranks(record, world, me)
    if gone:
        who = ", ".join(f"rank {r}" for r in gone)
        what = f"{who} of {world} is gone (its process ended: killed, out of memory, or a lost node)"
    else:
        what = f"a peer of rank {me} of {world} stopped answering (a dead rank or a lost node)"
    return RankLostError(f"{what}; rank {me} stopped too. Resume the run with the same command and --resume")
