"""Accuracy of a checkpoint made by ``experiments.run``: ``python -m experiments.evaluate CKPT``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytorch_lightning as pl

from experiments.cli import ArgumentParser, UserError, main_guard
from experiments.run import DEFAULT_DATA_DIR
from sa_conv.data import CIFAR10DataModule
from sa_conv.lit import ImageClassifier, read_checkpoint


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m experiments.evaluate", description=__doc__)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument(
        "--data-dir", type=Path, help=f"ImageFolder tree or CIFAR-10 root (default {DEFAULT_DATA_DIR})"
    )
    parser.add_argument("--synthetic", action="store_true", help="evaluate on the synthetic data")
    parser.add_argument("--split", choices=("test", "val"), default="test")
    parser.add_argument("--seed", type=int, help="seed of the validation split (default: the run's)")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ckpt = read_checkpoint(args.checkpoint)
    module = ImageClassifier.from_checkpoint(ckpt)
    if args.data_dir is not None and not args.data_dir.is_dir():
        raise UserError(f"--data-dir {args.data_dir} does not exist")
    trained_on = ckpt.get("datamodule_hyper_parameters") or {}  # the run's data: the same validation split
    datamodule = CIFAR10DataModule(
        data_dir=args.data_dir or DEFAULT_DATA_DIR,
        source="synthetic" if args.synthetic else "auto",
        batch_size=args.batch_size,
        eval_batch_size=args.batch_size,
        val_size=trained_on.get("val_size", 5000),
        synthetic_size=trained_on.get("synthetic_size", 512),
        seed=trained_on.get("seed", 0) if args.seed is None else args.seed,
    )
    trainer = pl.Trainer(
        accelerator="auto", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    run = trainer.test if args.split == "test" else trainer.validate
    results = run(module, datamodule=datamodule, verbose=False)
    accuracy = float(results[0][f"{args.split}/acc"])
    dataset = datamodule.test_set if args.split == "test" else datamodule.val_set
    report = {
        "accuracy": accuracy,
        "n_images": len(dataset),
        "split": args.split,
        "model": module.hparams.model,
        "model_config": dict(module.hparams.model_config or {}),
        "params": sum(p.numel() for p in module.backbone.parameters()),
        "checkpoint": str(args.checkpoint),
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['model']}: {args.split} accuracy {accuracy:.4f} on {report['n_images']} images")
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
