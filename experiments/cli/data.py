"""The data of a command: from its flags (``--data-dir``, ``--synthetic``) or, for a command on a
checkpoint, the data that checkpoint trained on; and a line saying which data it is."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.cli.arguments import positive_int
from experiments.cli.guard import UserError
from sa_conv.training.config import RunConfig

if TYPE_CHECKING:
    from sa_conv.data.datamodule import CIFAR10DataModule
    from sa_conv.training.trained import TrainedModel

__all__ = [
    "DEFAULT_DATA_DIR",
    "SYNTHETIC_SIZE",
    "check_data_dir",
    "data_flags",
    "data_note",
    "datamodule_from_flags",
    "datamodule_of_checkpoint",
]

SYNTHETIC_SIZE = 512  # synthetic training images unless --synthetic-size says otherwise
DEFAULT_DATA_DIR = Path("data/cifar10")  # where torchvision downloads CIFAR-10 when no --data-dir is given


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


def datamodule_from_flags(args: argparse.Namespace, config: RunConfig) -> CIFAR10DataModule:
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
    record: TrainedModel, args: argparse.Namespace, *, batch_size: int | None = None
) -> CIFAR10DataModule:
    """The data a checkpoint was trained on: its folder (unless the flags name other data) and its run
    config's split, subset, protocol, augmentation and seed; ``batch_size`` replaces the run's training
    and evaluation batches."""
    from sa_conv.training.run import datamodule_for

    trained = record.data_source or {}
    synthetic = args.synthetic or (args.data_dir is None and trained.get("source") == "synthetic")
    data_dir = args.data_dir
    if data_dir is not None:
        check_data_dir(data_dir)
    elif not synthetic and isinstance(trained_dir := trained.get("data_dir"), str) and trained_dir:
        data_dir = Path(trained_dir)
        if not data_dir.is_dir():
            raise UserError(f"the checkpoint was trained on {data_dir}, which is not here: pass --data-dir")
    config = RunConfig.from_dict(record.config())
    if batch_size is not None:
        config = config.replace(data={"batch_size": batch_size})
    data = datamodule_for(
        config,
        data_dir=data_dir or DEFAULT_DATA_DIR,
        synthetic=synthetic,
        synthetic_size=args.synthetic_size or _count(trained.get("synthetic_size")) or SYNTHETIC_SIZE,
    )
    if batch_size is not None:  # the evaluation's batches too (else at least 256: no lower)
        data.eval_batch_size = batch_size
    return data


def data_note(datamodule: CIFAR10DataModule, record: TrainedModel) -> str:
    """Which data a command on a checkpoint uses, and whether the checkpoint trained on it."""
    from sa_conv.data.fingerprint import data_difference

    now = datamodule.fingerprint()
    where = datamodule.data_dir or "synthetic images"
    counts = f"train {now['train']}, val {now['val']}, test {now['test']} images"
    line = f"data: {where} ({counts}, sha256 {str(now['sha256'])[:12]})"
    stored = record.data_fingerprint
    if stored is None and record.weights_file is not None:  # weights: model and config, no data record
        return f"{line}; shipped weights keep no fingerprint of the CIFAR-10 they trained on to compare with"
    if stored is None:
        return f"{line}; the checkpoint does not record its data"
    differs = data_difference(stored, now)
    return (
        f"{line}; not the data the checkpoint trained on: {differs}"
        if differs
        else f"{line}: the checkpoint's own"
    )


def _count(value: object) -> int | None:
    """A count a checkpoint recorded (None where it holds something else)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
