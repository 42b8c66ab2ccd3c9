"""The error guard of every program: an expected failure is one line on stderr and a non-zero exit
(``--debug`` shows the traceback), a requested stop says how to resume, an out-of-memory error says what
to lower (``experiments.cli.memory``); library chatter that says nothing about the run is silenced."""

from __future__ import annotations

import gc
import logging
import re
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, Protocol

from experiments.cli.memory import is_out_of_memory, memory_device, out_of_memory_line
from sa_conv.utils.errors import CheckpointError, DataError, RankLostError, RunInterruptedError
from sa_conv.utils.files import is_disk_full
from sa_conv.utils.stopping import EXIT_CODES, StoppedOutsideTraining, stop_line, stopping_at_once

# what pulls in Lightning and the data stack (seconds) is imported where it is used, so that --help
# and an error in the flags answer at once

__all__ = ["UserError", "computing", "main_guard", "quiet_disk_full_threads", "quiet_libraries"]


class UserError(RuntimeError):
    """Bad input from the user: reported as one line, no traceback."""


_USER_ERRORS: tuple[type[BaseException], ...] = (
    UserError,
    ValueError,
    DataError,
    RankLostError,
    CheckpointError,
    FloatingPointError,
    OSError,  # file system: a missing, unwritable or full path
)
# Lightning's own bad-configuration error, where Lightning is loaded (never imported to find out)
_LIGHTNING_ERRORS = (("lightning_fabric.utilities.exceptions", "MisconfigurationException"),)


def _is_user_error(err: BaseException) -> bool:
    """Whether ``err`` is bad input the user can fix (one line), asked without importing anything."""
    if isinstance(err, _USER_ERRORS):
        return True
    loaded = (getattr(sys.modules.get(module), name, None) for module, name in _LIGHTNING_ERRORS)
    return any(isinstance(cls, type) and isinstance(err, cls) for cls in loaded)


def computing() -> None:
    """What a command does once its arguments are checked, before its first tensor operation: float32
    denormals flushed to zero on the CPU, as the runs compute (before any parallel op starts the intra-op
    threads, which copy the CPU mode). Imports torch."""
    from sa_conv.training.precision import flush_denormals

    flush_denormals()


def _message(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return f"{err.strerror}: {err.filename}" if err.filename else err.strerror
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class Command(Protocol):
    """A program's guarded entry point: ``argv`` (default ``sys.argv[1:]``) in, the exit code out."""

    def __call__(self, argv: list[str] | None = None) -> int: ...


def main_guard(main: Callable[[list[str] | None], int | None]) -> Command:
    """Run ``main(argv)``; expected failures print ``error: ...`` in one line and return 1; a run stopped
    by a signal prints ``stopped: ...`` (where, and how to resume) and returns 130 after Ctrl-C, 143 after
    SIGTERM; out of memory says the batch size and how to lower it (``MemoryUse``), and how to resume
    where a checkpoint exists. ``--debug`` anywhere shows the full traceback instead."""

    def wrapped(argv: list[str] | None = None) -> int:
        quiet_libraries()
        quiet_disk_full_threads()
        argv = list(sys.argv[1:] if argv is None else argv)
        debug = "--debug" in argv
        try:
            with stopping_at_once():
                return main(argv) or 0
        except KeyboardInterrupt:
            print(stop_line("SIGINT"), file=sys.stderr)
            return EXIT_CODES["SIGINT"]
        except StoppedOutsideTraining as err:
            print(stop_line(str(err)), file=sys.stderr)
            return EXIT_CODES[str(err)]
        except SystemExit as exit_:  # argparse: --help (0) or a one-line usage error (2)
            code = exit_.code
            return code if isinstance(code, int) else (0 if code is None else 1)
        except RunInterruptedError as err:
            if debug:
                raise
            # a requested stop, not an error: say where it stopped and how to go on
            print(f"stopped: {err}; resume with the same command and --resume", file=sys.stderr)
            return 130 if err.signal == "SIGINT" else 143
        except (RecursionError, OverflowError) as err:  # input the readers' bounds did not foresee
            if debug:
                raise
            what = "nested too deeply to read" if isinstance(err, RecursionError) else "a number out of range"
            print(f"error: the input holds {what} ({str(err)[:80]}); --debug shows where", file=sys.stderr)
            return 1
        except Exception as err:
            if debug:
                raise
            if _is_user_error(err):
                print(f"error: {_message(err)}", file=sys.stderr)
                return 1
            if not is_out_of_memory(err):
                raise
            where, use = memory_device(err), getattr(err, "memory_use", None)
        # out of memory: the line is made once the error (and the batch's tensors its frames hold) is gone
        gc.collect()
        print(f"error: {out_of_memory_line(where, use)}", file=sys.stderr)
        return 1

    return wrapped


# Lightning's lines that say nothing the run does not say itself (hardware it does not use, its own
# restore steps, the precision plugin, the signal it received: the run says what it did about it)
_CHATTER = re.compile(
    r"Tip:|GPU available|TPU available|HPU available|IPU available|Using bfloat16|Using 16bit|"
    r"Restoring states from|Restored all states|Loaded model weights|`Trainer.fit` stopped|Received SIG"
)


_quiet_hooks: dict[str, Any] = {}  # the thread hook this module installed (installed once)


def quiet_disk_full_threads() -> None:
    """A writer thread (TensorBoard's) that finds the disk full stays quiet: the error reaches the main
    thread at the next write, where it becomes one line."""

    previous = threading.excepthook
    if previous is _quiet_hooks.get("installed"):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None or not is_disk_full(args.exc_value):
            previous(args)

    threading.excepthook = _quiet_hooks["installed"] = hook


def quiet_libraries() -> None:
    """Silence library chatter that says nothing about the run (tips, known deprecations, hardware lines,
    "checkpoint directory exists" on every resume)."""
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*litlogger.*|.*litmodels.*")
    warnings.filterwarnings("ignore", message=r".*is smaller than the logging interval.*")
    warnings.filterwarnings("ignore", message=r".*Checkpoint directory .* exists and is not empty.*")
    for name in (
        "pytorch_lightning.utilities.rank_zero",
        "pytorch_lightning.trainer.connectors.signal_connector",
    ):
        logging.getLogger(name).addFilter(lambda record: not _CHATTER.search(record.getMessage()))
