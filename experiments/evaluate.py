"""Accuracy of a checkpoint made by ``experiments.run``: ``python -m experiments.evaluate CKPT``.

By default it evaluates on the data the checkpoint was trained on (its folder, split and seed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from experiments.cli import (
    ArgumentParser,
    computing,
    data_flags,
    data_note,
    datamodule_of_checkpoint,
    main_guard,
    positive_int,
    trained_model,
)
from experiments.cli.memory import MemoryUse


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m experiments.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    data_flags(parser, default_note="the checkpoint's own data")
    parser.add_argument("--split", choices=("test", "val"), default="test")
    parser.add_argument("--batch-size", type=positive_int, default=500, help="batch size (default: 500)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    computing()  # the arguments are checked: now the heavy imports
    from sa_conv.training.evaluation import evaluate

    record, module = trained_model(args.checkpoint)
    datamodule = datamodule_of_checkpoint(record, args, batch_size=args.batch_size)
    if args.split == "val" and datamodule.config.protocol == "paper":
        raise ValueError("the run used the paper's protocol: it has no validation split (use --split test)")
    note = data_note(datamodule, record)
    print(note, file=sys.stderr)
    with MemoryUse(batch_size=args.batch_size):
        accuracy = evaluate(module, datamodule, args.split)
    dataset = datamodule.test_set if args.split == "test" else datamodule.val_set
    report = {
        "accuracy": accuracy,
        "n_images": len(dataset) if dataset is not None else 0,
        "split": args.split,
        "model": module.hparams["model"],
        "model_config": dict(module.hparams["model_config"] or {}),
        "params": sum(p.numel() for p in module.backbone.parameters()),
        "checkpoint": str(args.checkpoint),
        "data": note,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['model']}: {args.split} accuracy {accuracy:.4f} on {report['n_images']} images")
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
