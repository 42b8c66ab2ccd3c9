"""Train one model on CIFAR-10: ``python -m experiments.run MODEL [options]``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.loggers import TensorBoardLogger
from torch.utils.flop_counter import FlopCounterMode

from experiments.cli import ArgumentParser, UserError, hardware, main_guard, write_json_atomic
from experiments.presets import SCALES, RunConfig, preset
from sa_conv import __version__
from sa_conv.callbacks import AttentionFigures, EpochHistory, TrainingThroughput
from sa_conv.checkpointing import AtomicCheckpointIO, ResumableRNG, readable_checkpoint
from sa_conv.data import CIFAR10DataModule
from sa_conv.lit import ImageClassifier
from sa_conv.models import MODELS

DEFAULT_DATA_DIR = Path("data/cifar10")


def _count_or_fraction(text: str) -> int | float:
    """``"20"`` -> 20 batches, ``"0.1"`` -> a tenth of the epoch (Lightning's two meanings)."""
    return int(text) if text.isdigit() else float(text)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m experiments.run",
        description=f"Train a model on CIFAR-10. Models: {', '.join(MODELS)}. Scales: {', '.join(SCALES)} "
        "(paper = the paper's run.sh settings; tiny = minutes on 2 CPU cores).",
    )
    parser.add_argument("model", help=f"one of: {', '.join(MODELS)}")
    parser.add_argument("--scale", default="paper", help=f"preset scale: {', '.join(SCALES)} (default paper)")
    model = parser.add_argument_group("model (override the preset)")
    model.add_argument("--heads", type=int, help="attention heads per layer")
    model.add_argument("--layers", type=int, help="attention layers")
    model.add_argument("--hidden", type=int, help="hidden width")
    model.add_argument("--attn-dropout", type=float, help="dropout on attention probabilities")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=int)
    train.add_argument("--batch-size", type=int)
    train.add_argument("--lr", type=float)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--train-subset", type=int, help="train on the first N images of the train split")
    train.add_argument(
        "--limit-train-batches", type=float, help="Lightning: batches (int) or fraction per epoch"
    )
    train.add_argument("--fast-dev-run", action="store_true", help="Lightning: one batch of each stage")
    train.add_argument("--resume", nargs="?", const="latest", help="resume from PATH, or the latest run")
    train.add_argument("--checkpoint-every", type=int, help="also save last.ckpt every N training steps")
    train.add_argument("--max-time", help="Lightning: stop after this long, DD:HH:MM:SS (e.g. a GPU lease)")
    data = parser.add_argument_group("data")
    data.add_argument(
        "--data-dir",
        type=Path,
        help=f"an ImageFolder tree (train/, test/) or a torchvision CIFAR-10 root (default: download to "
        f"{DEFAULT_DATA_DIR})",
    )
    data.add_argument("--synthetic", action="store_true", help="synthetic images (smoke runs, tests)")
    data.add_argument("--synthetic-size", type=int, default=512, help="number of synthetic training images")
    hw = parser.add_argument_group("hardware")
    hw.add_argument("--accelerator", default="auto", help="cpu, gpu or auto")
    hw.add_argument("--devices", default="1", help="number of devices (or 'auto')")
    hw.add_argument("--strategy", default="auto", help="e.g. ddp")
    hw.add_argument("--precision", help="default: bf16-mixed on GPU, 32-true on CPU")
    hw.add_argument("--compile", action="store_true", help="torch.compile the model (opt-in)")
    figs = parser.add_argument_group("figures")
    figs.add_argument("--no-figures", action="store_true", help="do not log attention figures to TensorBoard")
    figs.add_argument("--figures-every", type=int, default=5, help="log attention figures every N epochs")
    parser.add_argument("--output-dir", type=Path, default=Path("runs"))
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def resolve_config(args: Any) -> RunConfig:
    """The preset of the model and scale, with the command line's overrides."""
    config = preset(args.model, args.scale)
    overrides = {
        "heads": args.heads,
        "layers": args.layers,
        "hidden": args.hidden,
        "attn_dropout": args.attn_dropout,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if args.model == "resnet18" and overrides:
        raise UserError(f"resnet18 has no option {', '.join('--' + k.replace('_', '-') for k in overrides)}")
    return config.replace(
        model_config={**config.model_config, **overrides},
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        train_subset=args.train_subset,
    )


def flops_per_image(model: torch.nn.Module) -> int:
    """Forward FLOPs of one 32x32 image as the model computes it in eval mode (matmuls and einsums)."""
    was_training = model.training
    model.eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.zeros(1, 3, 32, 32, device=next(model.parameters()).device))
    model.train(was_training)
    return counter.get_total_flops()


def find_resume(spec: str | None, output_dir: Path, model: str) -> tuple[Path | None, int | None]:
    """The checkpoint to resume and the logger version it belongs to.

    ``latest``: the newest readable checkpoint of the newest run of ``model`` (an unreadable one, e.g.
    cut short by a kill, is skipped with a warning).
    """
    if spec is None:
        return None, None
    if spec == "latest":
        runs = sorted((output_dir / model).glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
        runs = [r for r in runs if list((r / "checkpoints").glob("*.ckpt"))]
        if not runs:
            raise UserError(f"--resume: no run of {model} with a checkpoint under {output_dir / model}")
        path = None
        for candidate in sorted(
            (runs[-1] / "checkpoints").glob("*.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True
        ):
            if readable_checkpoint(candidate):
                path = candidate
                break
            print(f"warning: skipping unreadable checkpoint {candidate}", file=sys.stderr)
        if path is None:
            raise UserError(f"--resume: no readable checkpoint in {runs[-1] / 'checkpoints'}")
    else:
        path = Path(spec)
        if not path.is_file():
            raise UserError(f"--resume: checkpoint {path} does not exist")
        if not readable_checkpoint(path):
            raise UserError(f"--resume: {path} is not a readable checkpoint")
    version_dir = path.parent.parent
    version = int(version_dir.name.split("_")[1]) if version_dir.name.startswith("version_") else None
    return path, version


def check_devices(accelerator: str, devices: int | str) -> None:
    """More devices than the machine has: one clear error instead of a hang or a process storm."""
    if not isinstance(devices, int):
        return
    if devices <= 0:
        raise UserError(f"--devices must be positive, got {devices}")
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    available = torch.cuda.device_count() if gpu else (os.cpu_count() or 1)
    if devices > available:
        kind = "GPUs" if gpu else "CPU cores"
        raise UserError(f"--devices {devices}: this machine has {available} {kind}")


def make_datamodule(args: Any, config: RunConfig) -> CIFAR10DataModule:
    """The data module the command line asks for; a given --data-dir must exist and hold data."""
    if args.synthetic:
        return CIFAR10DataModule(
            source="synthetic",
            batch_size=config.batch_size,
            seed=config.seed,
            synthetic_size=args.synthetic_size,
        )
    data_dir = args.data_dir
    if data_dir is not None:
        if not data_dir.is_dir():
            raise UserError(f"--data-dir {data_dir} does not exist")
        if not any(data_dir.iterdir()):
            raise UserError(f"--data-dir {data_dir} is empty")
    return CIFAR10DataModule(
        data_dir=data_dir or DEFAULT_DATA_DIR,
        batch_size=config.batch_size,
        val_size=config.val_size,
        train_subset=config.train_subset,
        seed=config.seed,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = resolve_config(args)
    pl.seed_everything(config.seed, workers=True, verbose=False)
    resume, version = find_resume(args.resume, args.output_dir, config.model)
    module = ImageClassifier(
        model=config.model,
        model_config=config.model_config,
        lr=config.lr,
        weight_decay=config.weight_decay,
        schedule=config.schedule,
    )
    datamodule = make_datamodule(args, config)
    n_params = sum(p.numel() for p in module.backbone.parameters())
    flops = flops_per_image(module.backbone)
    precision = args.precision or (
        "bf16-mixed" if torch.cuda.is_available() and args.accelerator != "cpu" else "32-true"
    )
    devices: int | str = int(args.devices) if args.devices.isdigit() else args.devices
    check_devices(args.accelerator, devices)

    logger = TensorBoardLogger(
        save_dir=str(args.output_dir), name=config.model, version=version, default_hp_metric=False
    )
    checkpoint = ModelCheckpoint(
        dirpath=Path(logger.log_dir) / "checkpoints",
        filename="best-epoch{epoch:03d}",
        monitor="val/acc",
        mode="max",
        save_top_k=1,
        save_last=True,
        auto_insert_metric_name=False,
    )
    callbacks: list[pl.Callback] = [checkpoint]
    if args.checkpoint_every:  # mid-epoch snapshots for resuming (last.ckpt only)
        callbacks.append(
            ModelCheckpoint(
                dirpath=checkpoint.dirpath,
                filename="step",
                every_n_train_steps=args.checkpoint_every,
                save_last=True,
            )
        )
    throughput, history = TrainingThroughput(), EpochHistory()
    callbacks += [LearningRateMonitor(logging_interval="step"), throughput, history, ResumableRNG()]
    if not args.no_figures and hasattr(module.backbone, "attention_maps"):
        callbacks.append(AttentionFigures(every_n_epochs=args.figures_every))
    trainer = pl.Trainer(
        max_epochs=config.epochs,
        accelerator=args.accelerator,
        devices=devices,
        strategy=args.strategy,
        precision=precision,
        logger=logger,
        callbacks=callbacks,
        limit_train_batches=args.limit_train_batches,
        max_time=args.max_time,
        fast_dev_run=args.fast_dev_run,
        log_every_n_steps=10,
        use_distributed_sampler=False,  # the data module shards every split across ranks itself
        plugins=[AtomicCheckpointIO()],
    )
    if trainer.is_global_zero:
        print(
            f"sa-conv {__version__} | model {config.model} | scale {config.scale} | run dir {logger.log_dir}"
        )
        print(f"config: {config}")
        print(f"parameters: {n_params:,} | forward FLOPs per image: {flops / 1e9:.3f} GFLOP")

    if args.compile:
        module.backbone.compile()  # in place: parameter names (and checkpoints) stay the same
    start = time.perf_counter()
    # weights_only=False: our checkpoints carry RNG and data-loader states (our own files, trusted)
    trainer.fit(module, datamodule=datamodule, ckpt_path=str(resume) if resume else None, weights_only=False)
    wall = time.perf_counter() - start
    best = checkpoint.best_model_path if checkpoint.best_model_path and not args.fast_dev_run else None
    test_results = trainer.test(
        module, datamodule=datamodule, ckpt_path=best, verbose=False, weights_only=False
    )
    test_acc = float(test_results[0]["test/acc"]) if test_results else float("nan")
    best_val = float(checkpoint.best_model_score) if checkpoint.best_model_score is not None else float("nan")

    if trainer.is_global_zero:
        summary = {
            "model": config.model,
            "scale": config.scale,
            "config": {**config.__dict__},
            "params": n_params,
            "flops_per_image": flops,
            "best_val_acc": best_val,
            "test_acc": test_acc,
            "n_test_images": len(datamodule.test_set) if datamodule.test_set is not None else None,
            "epochs_completed": trainer.current_epoch,
            "global_steps": trainer.global_step,
            "wall_time_s": wall,
            "train_images_per_s": throughput.images_per_second,
            "train_tflops": 3
            * flops
            * throughput.images_per_second
            / 1e12,  # forward + backward ~ 3x forward
            "history": history.history,
            "best_checkpoint": best,
            "precision": str(trainer.precision),
            "devices": trainer.world_size,
            "hardware": hardware(),
            "sa_conv_version": __version__,
        }
        write_json_atomic(Path(logger.log_dir) / "metrics.json", summary)
        print(
            f"done: best val acc {best_val:.4f} | test acc {test_acc:.4f} | wall {wall:.1f} s | "
            f"{throughput.images_per_second:.1f} train images/s ({summary['train_tflops']:.3f} TFLOP/s) | "
            f"{logger.log_dir}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
