"""What the command-line programs share: flags derived from config dataclasses, and one guard that turns
every expected failure into one line on stderr and a non-zero exit (``--debug`` shows the traceback); an
out-of-memory error's line says what to lower (``experiments.memory``)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import gc
import logging
import math
import re
import sys
import threading
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, NoReturn

from experiments.memory import is_out_of_memory, memory_device, out_of_memory_line
from sa_conv.training.config import RunConfig
from sa_conv.utils.config import field_help, field_types
from sa_conv.utils.files import can_write_in, is_disk_full
from sa_conv.utils.safe_load import CheckpointError, run_config_of

# what pulls in Lightning and the data stack (seconds) is imported where it is used, so that --help
# and an error in the flags answer at once

__all__ = [
    "DEFAULT_DATA_DIR",
    "ArgumentParser",
    "UserError",
    "add_config_flags",
    "check_data_dir",
    "data_flags",
    "datamodule_from_flags",
    "datamodule_of_checkpoint",
    "flag",
    "main_guard",
    "output_file",
    "output_folder",
    "positive_float",
    "positive_int",
    "seed_int",
]

SYNTHETIC_SIZE = 512  # synthetic training images unless --synthetic-size says otherwise
DEFAULT_DATA_DIR = Path("data/cifar10")  # where torchvision downloads CIFAR-10 when no --data-dir is given
SUGGESTION_CUTOFF = 0.75  # difflib's similarity a flag needs to be suggested for a mistyped one


class UserError(RuntimeError):
    """Bad input from the user: reported as one line, no traceback."""


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


def flag(name: str) -> str:
    """The command-line flag of a config field: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (a tolerance, a scale)."""
    value = _float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


SEED_MAX = 2**32 - 1  # numpy's seeds (Lightning seeds numpy too)


def seed_int(text: str) -> int:
    """argparse type: a random seed, 0 to 2**32 - 1."""
    value = _int(text)
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


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError("nan is not a number here")
    return value


def _int_or_word(text: str) -> int | str:
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else text


def _count_or_fraction(text: str) -> int | float:
    """``"20"`` -> 20 batches; ``"0.5"`` or ``"1.0"`` -> a fraction of the epoch (Lightning's meanings)."""
    return _int(text) if re.fullmatch(r"[+-]?\d+", text) else _float(text)


def _parser_for(hint: Any) -> tuple[Callable[[str], Any], dict[str, Any]]:
    """argparse ``type`` and extra keywords for a field type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if set(rest) == {int, float}:
            inner: Callable[[str], Any] = _count_or_fraction
            extra: dict[str, Any] = {}
        elif set(rest) == {int, str}:  # a count or a word (devices: 2 or auto)
            inner, extra = _int_or_word, {}
        else:
            inner, extra = _parser_for(rest[0])
        if type(None) not in args:
            return inner, extra

        def optional(text: str) -> Any:
            return None if text.lower() == "none" else inner(text)

        return optional, extra
    if origin is Literal:
        return type(args[0]), {"choices": list(args)}
    if origin is tuple:
        item, _ = _parser_for(args[0])
        return item, {"nargs": "+"}
    return {int: _int, float: _float, str: str, Path: Path}.get(hint, str), {}


def add_config_flags(
    parser: argparse._ActionsContainer,
    cls: type,
    defaults: Mapping[str, Any],
    *,
    skip: tuple[str, ...] = (),
    loose: bool = False,
) -> list[str]:
    """One flag per field of the dataclass ``cls`` (``--field-name``), its default (``defaults``, else
    the field's own) shown in --help.

    Booleans get ``--x`` / ``--no-x``, ``X | None`` accepts ``none``, tuples take several values,
    ``Literal`` fields list their choices. ``loose``: the flags only, values kept as strings and flags
    the parser has already skipped (to find the positional arguments among any model's flags). Returns
    the field names added.
    """
    helps = field_help(cls)
    own = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    added = []
    for name, hint in field_types(cls).items():
        if name in skip:
            continue
        default = defaults.get(name, own.get(name))
        text = helps.get(name, "")
        shown = " ".join(map(str, default)) if isinstance(default, tuple | list) else default
        text = f"{text} (default: {shown})" if text else f"(default: {shown})"
        # argparse has no public way to ask whether a parser already has a flag
        if loose and flag(name) in parser._option_string_actions:
            continue
        if hint is bool:
            parser.add_argument(
                flag(name), dest=name, action=argparse.BooleanOptionalAction, default=default, help=text
            )
        elif loose:
            parser.add_argument(flag(name), dest=name, nargs=_parser_for(hint)[1].get("nargs"))
        else:
            kind, extra = _parser_for(hint)
            metavar = None if "choices" in extra else name.upper()
            parser.add_argument(
                flag(name), dest=name, type=kind, default=default, help=text, metavar=metavar, **extra
            )
        added.append(name)
    return added


def data_flags(group: argparse._ActionsContainer, *, default_note: str | None = None) -> None:
    """``--data-dir``, ``--synthetic`` and ``--synthetic-size``."""
    note = default_note or f"download CIFAR-10 to {DEFAULT_DATA_DIR}"
    source = group.add_mutually_exclusive_group()  # one source of images: real ones or synthetic ones
    source.add_argument(
        "--data-dir",
        type=Path,
        help=f"an ImageFolder tree (train/, test/) or a torchvision CIFAR-10 root (default: {note})",
    )
    source.add_argument("--synthetic", action="store_true", help="synthetic images (smoke runs, tests)")
    group.add_argument(
        "--synthetic-size",
        type=positive_int,
        help=f"synthetic training images (default: {SYNTHETIC_SIZE}, or the checkpoint's run's)",
    )


def check_data_dir(path: Path) -> None:
    """A given --data-dir must be an existing, non-empty folder."""
    if not path.exists():
        raise UserError(f"--data-dir {path} does not exist")
    if not path.is_dir():
        raise UserError(f"--data-dir {path} is a file, not a folder")
    if not any(path.iterdir()):
        raise UserError(f"--data-dir {path} is empty")


def datamodule_from_flags(args: argparse.Namespace, config: Any) -> Any:
    """The data module of a run config over the data the flags name."""
    from sa_conv.training.run import datamodule_for

    if args.data_dir is not None:
        check_data_dir(args.data_dir)
    return datamodule_for(
        config,
        data_dir=args.data_dir or DEFAULT_DATA_DIR,
        synthetic=args.synthetic,
        synthetic_size=args.synthetic_size or SYNTHETIC_SIZE,
    )


def datamodule_of_checkpoint(
    ckpt: dict[str, Any], args: argparse.Namespace, *, batch_size: int | None = None
) -> Any:
    """The data a checkpoint was trained on: its folder (unless the flags name other data) and its run
    config's split, subset, protocol, augmentation and seed; ``batch_size`` replaces the run's training
    and evaluation batches."""
    from sa_conv.training.run import datamodule_for

    trained = ckpt.get("datamodule_hyper_parameters") or {}
    synthetic = args.synthetic or (args.data_dir is None and trained.get("source") == "synthetic")
    data_dir = args.data_dir
    if data_dir is not None:
        check_data_dir(data_dir)
    elif not synthetic and trained.get("data_dir"):
        data_dir = Path(trained["data_dir"])
        if not data_dir.is_dir():
            raise UserError(f"the checkpoint was trained on {data_dir}, which is not here: pass --data-dir")
    config = RunConfig.from_dict(run_config_of(ckpt))
    if batch_size is not None:
        config = config.replace(data={"batch_size": batch_size})
    data = datamodule_for(
        config,
        data_dir=data_dir or DEFAULT_DATA_DIR,
        synthetic=synthetic,
        synthetic_size=args.synthetic_size or trained.get("synthetic_size", SYNTHETIC_SIZE),
    )
    if batch_size is not None:  # the evaluation's batches too (else at least 256: no lower)
        data.eval_batch_size = batch_size
    return data


def data_note(datamodule: Any, ckpt: dict[str, Any]) -> str:
    """Which data a command on a checkpoint uses, and whether the checkpoint trained on it."""
    from sa_conv.data.datamodule import data_difference
    from sa_conv.training.resume import data_fingerprint_of

    now = datamodule.fingerprint()
    where = datamodule.data_dir or "synthetic images"
    counts = f"train {now['train']}, val {now['val']}, test {now['test']} images"
    line = f"data: {where} ({counts}, sha256 {now['sha256'][:12]})"
    stored = data_fingerprint_of(ckpt)
    if stored is None:
        return f"{line}; the checkpoint does not record its data"
    differs = data_difference(stored, now)
    return (
        f"{line}; not the data the checkpoint trained on: {differs}"
        if differs
        else f"{line}: the checkpoint's own"
    )


def _user_errors() -> tuple[type[BaseException], ...]:
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    from sa_conv.data.datamodule import DataError
    from sa_conv.training.signals import RankLostError

    return (
        UserError,
        ValueError,
        DataError,
        RankLostError,
        CheckpointError,
        FloatingPointError,
        OSError,  # file system: a missing, unwritable or full path
        MisconfigurationException,
    )


def _message(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return f"{err.strerror}: {err.filename}" if err.filename else err.strerror
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def main_guard(main: Callable[[list[str] | None], int | None]) -> Callable[[list[str] | None], int]:
    """Run ``main(argv)``; expected failures print ``error: ...`` in one line and return 1; a run stopped
    by a signal prints ``stopped: ...`` (where, and how to resume) and returns 130 after Ctrl-C, 143 after
    SIGTERM; out of memory says the batch size and how to lower it (``MemoryUse``), and how to resume
    where a checkpoint exists. ``--debug`` anywhere shows the full traceback instead."""

    def wrapped(argv: list[str] | None = None) -> int:
        from sa_conv.training.precision import flush_denormals
        from sa_conv.training.signals import RunInterruptedError

        flush_denormals()  # before any parallel op starts the intra-op threads, which copy the CPU mode
        quiet_libraries()
        quiet_disk_full_threads()
        argv = list(sys.argv[1:] if argv is None else argv)
        debug = "--debug" in argv
        try:
            return main(argv) or 0
        except RunInterruptedError as err:
            if debug:
                raise
            # a requested stop, not an error: say where it stopped and how to go on
            print(f"stopped: {err}; resume with the same command and --resume", file=sys.stderr)
            return 130 if err.signal == "SIGINT" else 143
        except _user_errors() as err:
            if debug:
                raise
            print(f"error: {_message(err)}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return 130
        except SystemExit as exit_:  # argparse: --help (0) or a one-line usage error (2)
            code = exit_.code
            return code if isinstance(code, int) else (0 if code is None else 1)
        except (RuntimeError, MemoryError) as err:
            if debug or not is_out_of_memory(err):
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
        if not is_disk_full(args.exc_value):
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
