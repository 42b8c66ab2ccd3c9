"""One training run: a config in, a run folder out.

``train(config, datamodule=..., options=...)`` writes ``<output_dir>/<model>/version_N/``: ``config.yaml``
(the resolved ``RunConfig``, reusable to repeat the run), TensorBoard events, ``checkpoints/`` and
``metrics.json``. It reads top to bottom in named steps: settle the precision and build the module,
then the callbacks, the trainer, fit, test, and the summary.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.strategies import DDPStrategy
from pytorch_lightning.utilities.exceptions import SIGTERMException

from sa_conv import __version__
from sa_conv.analysis import layer_summary
from sa_conv.callbacks import AttentionFigures, TrainingProgress
from sa_conv.checkpointing import (
    AtomicCheckpointIO,
    CheckpointError,
    InterruptCheckpoint,
    ResumableRNG,
    RunConfigRecord,
    read_checkpoint,
)
from sa_conv.data import CIFAR10DataModule, data_difference
from sa_conv.explorer import explorer_data, write_explorer
from sa_conv.files import (
    DiskFullError,
    disk_full,
    is_disk_full,
    new_folders_removed_on_error,
    write_json,
    write_text,
)
from sa_conv.flops import counted_flops
from sa_conv.interrupts import RankLostError, RankRecord, RunInterruptedError, lost_ranks, sigint_as_sigterm
from sa_conv.lit import ImageClassifier
from sa_conv.machine import cpu_has_native_bf16, hardware, peak_flops, resolve_precision
from sa_conv.resume import Resume
from sa_conv.run_config import RunConfig, RunOptions, dump_config

__all__ = ["datamodule_for", "evaluate", "flush_denormals", "module_for", "settle_precision", "train"]


def module_for(config: RunConfig) -> ImageClassifier:
    """The LightningModule of a run: its model and optimizer parts (fresh weights from the global seed)."""
    val_name = "test" if config.data.protocol == "paper" else "val"
    return ImageClassifier(
        model=config.model, model_config=config.model_config, optim=config.optim, val_name=val_name
    )


def datamodule_for(
    config: RunConfig, *, data_dir: Path | None, synthetic: bool = False, synthetic_size: int = 512
) -> CIFAR10DataModule:
    """The DataModule of a run: its data part over the given data, split by the run's seed."""
    source = "synthetic" if synthetic else "auto"
    return CIFAR10DataModule(
        config.data, data_dir=data_dir, source=source, synthetic_size=synthetic_size, seed=config.seed
    )


def evaluate(module: ImageClassifier, datamodule: CIFAR10DataModule, split: str = "test") -> float:
    """Accuracy of ``module`` on a split (``test`` or ``val``) of ``datamodule``, on one device."""
    trainer = pl.Trainer(
        accelerator="auto", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    run = trainer.test if split == "test" else trainer.validate
    name = "test" if split == "test" else module.hparams.val_name
    return float(run(module, datamodule=datamodule, verbose=False)[0][f"{name}/acc"])


def settle_precision(config: RunConfig, accelerator: str, stored: dict[str, Any] | None = None) -> RunConfig:
    """The config with its precision decided: a resumed run keeps its own (``stored``, its checkpoint's
    config) whatever this machine would pick; a new run resolves ``auto`` for this machine."""
    if stored is None or config.precision != "auto":
        return config.replace(precision=resolve_precision(config.precision, accelerator))
    precision = stored.get("precision", "auto")
    if precision == "auto":  # written before runs recorded their precision: what auto meant here then
        precision = resolve_precision("auto", accelerator)
    return config.replace(precision=precision)


def flush_denormals() -> None:
    """Flush float32 denormals to zero on the CPU (x86 FTZ/DAZ), for the whole process.

    A quadratic head's softmax has tails e^-(alpha d^2) far below 1e-38: denormal numbers, on which x86
    arithmetic takes a slow microcode path. Flushed, the 6-layer CPU-scale step runs 1.5x faster in float32;
    what changes is below 1.2e-38 (the smallest normal float32), nothing a probability or a gradient of
    this model resolves. No effect on GPUs (and on CPUs without the mode it does nothing)."""
    torch.set_flush_denormal(True)


def warn_slow_bf16(config: RunConfig, accelerator: str) -> None:
    """bf16 on a CPU without native bf16 (a resumed run keeps its precision): several times slower."""
    gpu = torch.cuda.is_available() and accelerator != "cpu"
    if config.precision == "bf16-mixed" and not gpu and not cpu_has_native_bf16():
        print(
            "warning: this run trains in bf16-mixed and this CPU has no native bf16 (AVX-512 BF16, AMX): it "
            "will be several times slower here",
            file=sys.stderr,
        )


@dataclass
class _Callbacks:
    """The callbacks a run reads back after fitting."""

    all: list[pl.Callback]
    best: ModelCheckpoint
    interrupt: InterruptCheckpoint
    progress: TrainingProgress
    figures: AttentionFigures | None
    ranks: RankRecord


def train(
    config: RunConfig,
    *,
    datamodule: CIFAR10DataModule,
    options: RunOptions,
    resume: Resume | None = None,
    module: ImageClassifier | None = None,
    slow_hint: str = "",
) -> dict[str, Any]:
    """Train (or resume) one run; returns the summary also written to ``metrics.json``.

    ``module``: start from these weights instead of fresh ones (fine-tuning). Raises ``RunInterruptedError``
    after SIGTERM / SIGINT (a checkpoint was saved), ``FloatingPointError`` on a NaN loss (the last
    good checkpoint is kept), ``DataError`` / ``CheckpointError`` / ``ValueError`` on bad input; a run
    that fails before writing a file leaves no new empty folder behind.
    """
    with new_folders_removed_on_error(options.output_dir):
        _check_output_dir(options.output_dir)
        _check_same_data(resume, datamodule)
        config = settle_precision(config, options.accelerator, resume.stored if resume else None)
        warn_slow_bf16(config, options.accelerator)
        flush_denormals()
        if torch.cuda.is_available() and options.accelerator != "cpu":  # TF32 tensor cores, or not
            torch.set_float32_matmul_precision("high" if config.tf32 else "highest")
        pl.seed_everything(config.seed, workers=True, verbose=False)
        module = module if module is not None else module_for(config)
        flops = _flops(module, config)
        logger = TensorBoardLogger(
            save_dir=str(options.output_dir),
            name=config.model,
            version=resume.version if resume else None,
            default_hp_metric=False,
        )
        run_dir = Path(logger.log_dir)
        callbacks = _callbacks(config, options, run_dir, datamodule, module, slow_hint)
        trainer = _trainer(config, options, logger, callbacks, run_dir)
        _announce(trainer, config, options, module, run_dir, resume, flops)
        wall = _fit(trainer, module, datamodule, resume, run_dir, callbacks)
        # taken now: testing a checkpoint restores the callbacks' states of that checkpoint
        history = list(callbacks.progress.history)
        snapshots = list(callbacks.figures.history) if callbacks.figures is not None else []
        rate = callbacks.progress.images_per_second
        steps_seconds = callbacks.progress.seconds
        test = _test(trainer, module, datamodule, config, callbacks, run_dir, history)
        summary = {
            **_summary(trainer, config, datamodule, module, run_dir, flops, wall, rate, steps_seconds),
            **test,
            "history": history,
            "best_checkpoint": _best_path(callbacks, options),
        }
        if snapshots:
            summary["layers"] = layer_summary(snapshots[-1])
            summary["locality_history"] = snapshots
        if trainer.is_global_zero and not options.fast_dev_run:
            write_json(run_dir / "metrics.json", summary)
            if options.explore and module.backbone.has_attention:
                _explore(run_dir, datamodule, summary)
        return summary


def _check_output_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise ValueError(f"output directory {path} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".sa-conv-write-test-{time.time_ns()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"output directory {path} is not writable ({err.strerror or err})") from None


def _check_same_data(resume: Resume | None, datamodule: CIFAR10DataModule) -> None:
    """A resume on other data than the run trained on is refused (the same data moved elsewhere is not)."""
    if resume is None or resume.data is None:  # checkpoints written before they recorded their data
        return
    differs = data_difference(resume.data, datamodule.fingerprint())
    if differs:
        raise CheckpointError(
            f"{resume.path} trained on other data: {differs}; resume it with the data it trained on "
            "(--data-dir), or start a new run"
        )


def _flops(module: ImageClassifier, config: RunConfig) -> dict[str, float]:
    """FLOPs per image of the trained path (forward + backward) and of evaluation (forward)."""
    batch = config.data.batch_size
    train_flops = counted_flops(module.backbone, training=True, batch=batch)
    module.flops_per_batch = train_flops * batch  # Lightning's name for it (its throughput utilities)
    return {
        "train": train_flops,
        "eval": counted_flops(module.backbone, training=False, passes="forward", batch=batch),
    }


def _callbacks(
    config: RunConfig,
    options: RunOptions,
    run_dir: Path,
    datamodule: CIFAR10DataModule,
    module: ImageClassifier,
    slow_hint: str,
) -> _Callbacks:
    """Checkpoints (best, last, snapshots, interrupt), progress, RNG and config records, attention record."""
    ckpt_dir = run_dir / "checkpoints"
    eval_name = module.hparams.val_name
    steps = _steps_per_epoch(config, datamodule, options)
    # at epoch ends after every epoch-end hook has run (save_on_train_epoch_end): they resume exactly
    best = ModelCheckpoint(
        dirpath=ckpt_dir,
        filename="best-epoch{epoch:03d}",
        monitor=f"{eval_name}/acc",
        mode="max",
        save_on_train_epoch_end=True,
        auto_insert_metric_name=False,
    )
    interrupt = InterruptCheckpoint(dirpath=ckpt_dir, filename="interrupted")
    latest = [_latest(ckpt_dir, "last", save_on_train_epoch_end=True)]  # every epoch (best's save_last: not)
    if options.snapshot_minutes > 0:
        interval = timedelta(minutes=options.snapshot_minutes)
        latest.append(_latest(ckpt_dir, "snapshot", train_time_interval=interval))
    if options.checkpoint_every:
        latest.append(_latest(ckpt_dir, "step", every_n_train_steps=options.checkpoint_every))
    lines = options.progress == "lines" or (options.progress == "auto" and not sys.stdout.isatty())
    progress = TrainingProgress(lines=lines, slow_hint=slow_hint, log_every=min(50, max(1, steps // 10)))
    figures = None
    if options.figures_every is not None and module.backbone.has_attention:
        # locality snapshots about 40 times over the run
        every = options.history_every or max(1, round(config.epochs * steps / 40))
        figures = AttentionFigures(every_n_epochs=options.figures_every, history_every_n_steps=every)
    ranks = RankRecord(options.output_dir / ".ranks")
    extra = [LearningRateMonitor(logging_interval="step"), progress, ResumableRNG(), ranks]
    extra.append(RunConfigRecord(config.to_dict()))
    everything = [best, *latest, interrupt, *extra, *([figures] if figures else [])]
    return _Callbacks(everything, best, interrupt, progress, figures, ranks)


def _latest(folder: Path, name: str, **when: Any) -> ModelCheckpoint:
    """A checkpoint ``<folder>/<name>.ckpt`` overwritten at each of ``when`` (Lightning's triggers)."""
    return ModelCheckpoint(dirpath=folder, filename=name, enable_version_counter=False, **when)


def _steps_per_epoch(config: RunConfig, datamodule: CIFAR10DataModule, options: RunOptions) -> int:
    """Training steps of one epoch, as the run's limit leaves them."""
    world_size = options.devices if isinstance(options.devices, int) else 1
    steps = datamodule.train_batches(world_size)
    limit = config.limit_train_batches
    if isinstance(limit, int):
        return min(steps, limit)
    return max(1, int(steps * limit)) if isinstance(limit, float) else steps


def _trainer(
    config: RunConfig, options: RunOptions, logger: TensorBoardLogger, callbacks: _Callbacks, run_dir: Path
) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=config.epochs,
        accelerator=options.accelerator,
        devices=options.devices,
        strategy=_strategy(options),
        precision=config.precision,
        logger=logger,
        callbacks=callbacks.all,
        limit_train_batches=config.limit_train_batches,
        max_time=options.max_time,
        fast_dev_run=options.fast_dev_run,
        log_every_n_steps=callbacks.progress.log_every,
        num_sanity_val_steps=1,
        enable_model_summary=False,  # our own line says parameters and FLOPs (Lightning's counts 0 FLOPs)
        enable_progress_bar=not callbacks.progress.lines,
        default_root_dir=str(run_dir),  # Lightning's SLURM requeue checkpoints (hpc_ckpt_N.ckpt) go here
        use_distributed_sampler=False,  # the data module shards every split across ranks itself
        plugins=[AtomicCheckpointIO()],
    )


def _strategy(options: RunOptions) -> str | DDPStrategy:
    """Lightning's strategy; DDP with the run's timeout, so that a dead rank ends the others in time."""
    if options.strategy == "ddp":
        return DDPStrategy(timeout=timedelta(minutes=options.ddp_timeout))
    return options.strategy


def _announce(
    trainer: pl.Trainer,
    config: RunConfig,
    options: RunOptions,
    module: ImageClassifier,
    run_dir: Path,
    resume: Resume | None,
    flops: dict[str, float],
) -> None:
    """Write config.yaml and say what runs, where, in what precision."""
    if not trainer.is_global_zero:
        return
    if not options.fast_dev_run:  # a smoke test writes nothing
        write_text(run_dir / "config.yaml", dump_config(config))
    n_params = sum(p.numel() for p in module.backbone.parameters())
    print(f"sa-conv {__version__} | model {config.model} | scale {config.scale} | run dir {run_dir}")
    print(
        f"parameters: {n_params:,} | GFLOP per image: {flops['train'] / 1e9:.3f} training step "
        f"(forward + backward), {flops['eval'] / 1e9:.3f} evaluation (forward) | precision {config.precision}"
    )
    if resume is not None:
        print(f"resuming from {resume.path}")
    if options.compile:
        module.backbone.compile()  # in place: parameter names (and checkpoints) stay the same


def _fit(
    trainer: pl.Trainer,
    module: ImageClassifier,
    datamodule: CIFAR10DataModule,
    resume: Resume | None,
    run_dir: Path,
    callbacks: _Callbacks,
) -> float:
    """Fit (or resume); a requested stop becomes ``RunInterruptedError``. Returns the wall seconds."""
    start = time.perf_counter()
    with sigint_as_sigterm() as received:
        try:
            # weights_only=False: our checkpoints carry RNG and data-loader states (our own files)
            trainer.fit(
                module,
                datamodule=datamodule,
                ckpt_path=str(resume.path) if resume else None,
                weights_only=False,
            )
        except SIGTERMException:
            path = callbacks.interrupt.path
            raise RunInterruptedError(run_dir, path, trainer.global_step, received["signal"]) from None
        except OSError as err:  # TensorBoard's writer thread reports a full disk without a file name
            if is_disk_full(err) and not isinstance(err, DiskFullError):
                raise disk_full(run_dir, "run's TensorBoard events, in the run folder") from None
            raise
        except RuntimeError as err:
            if trainer.world_size > 1:
                _peer_lost(trainer, callbacks, err)
            raise
    return time.perf_counter() - start


def _peer_lost(trainer: pl.Trainer, callbacks: _Callbacks, err: RuntimeError) -> None:
    """A distributed run whose collective failed: name the rank that is gone (or the wait that timed out)
    and how to go on, in one line (``RankLostError``)."""
    me, world = trainer.global_rank, trainer.world_size
    gone = lost_ranks(callbacks.ranks, world, me)
    text = str(err).lower()
    timed_out = "timeout" in text or "timed out" in text
    if not gone and not timed_out and "peer" not in text and "connection" not in text:
        return  # another error: it speaks for itself
    if gone:
        who = ", ".join(f"rank {r}" for r in gone)
        what = f"{who} of {world} is gone (its process ended: killed, out of memory, or a lost node)"
    else:
        what = f"a peer of rank {me} of {world} stopped answering (a dead rank or a lost node)"
    raise RankLostError(
        f"{what}; rank {me} stopped too. Resume the run with the same command and --resume"
    ) from None


def _best_path(callbacks: _Callbacks, options: RunOptions) -> str | None:
    best = callbacks.best.best_model_path
    return best if best and not options.fast_dev_run else None


def _test(
    trainer: pl.Trainer,
    module: ImageClassifier,
    datamodule: CIFAR10DataModule,
    config: RunConfig,
    callbacks: _Callbacks,
    run_dir: Path,
    history: list[dict[str, Any]],
) -> dict[str, float]:
    """The test accuracy: the best checkpoint tested once (clean protocol), or the paper's protocol's
    best and final test accuracy of the epochs (its validation loop ran on the test split)."""
    if config.data.protocol == "paper":
        evaluated = [h["test_acc"] for h in history if "test_acc" in h]
        best = max(evaluated, default=float("nan"))
        final = evaluated[-1] if evaluated else float("nan")
        return {"best_test_acc": best, "final_test_acc": final, "test_acc": best}
    best_path = callbacks.best.best_model_path or None
    with sigint_as_sigterm() as received:
        try:
            results = trainer.test(
                module, datamodule=datamodule, ckpt_path=best_path, verbose=False, weights_only=False
            )
        except SIGTERMException:  # training is complete: a resume only tests and writes metrics.json
            last = run_dir / "checkpoints" / "last.ckpt"
            raise RunInterruptedError(run_dir, last, trainer.global_step, received["signal"]) from None
    score = callbacks.best.best_model_score
    return {
        "test_acc": float(results[0]["test/acc"]) if results else float("nan"),
        "best_val_acc": float(score) if score is not None else float("nan"),
    }


def _explore(run_dir: Path, datamodule: CIFAR10DataModule, summary: dict[str, Any]) -> None:
    """``explorer.html``: the attention explorer of the last checkpoint, on 8 test images."""
    last = run_dir / "checkpoints" / "last.ckpt"
    if not last.is_file():
        return
    ckpt = read_checkpoint(last)
    backbone = ImageClassifier.from_checkpoint(ckpt).backbone
    images, _ = datamodule.evaluation_images(8, normalized=False)
    source = "synthetic images" if datamodule.resolved_source() == "synthetic" else "test images"
    meta = {
        "model": summary["model"],
        "config": summary["config"],
        "checkpoint": str(last),
        "step": ckpt.get("global_step"),
        "test_acc": summary.get("test_acc"),
        "test_note": "the run's reported accuracy (its best checkpoint)",
        "images_note": f"{len(images)} {source} of the run's data",
    }
    data = explorer_data(backbone, images, datamodule.normalize(images), meta=meta)
    write_explorer(run_dir / "explorer.html", data)


def _summary(
    trainer: pl.Trainer,
    config: RunConfig,
    datamodule: CIFAR10DataModule,
    module: ImageClassifier,
    run_dir: Path,
    flops: dict[str, float],
    wall: float,
    images_per_s: float,
    step_seconds: float,
) -> dict[str, Any]:
    """What ``metrics.json`` says of the run besides its accuracy and its records."""
    device = trainer.strategy.root_device
    peak = peak_flops(device, config.precision)
    achieved = flops["train"] * images_per_s  # images/s of every device together
    return {
        "run_dir": str(run_dir),
        "model": config.model,
        "scale": config.scale,
        "protocol": config.data.protocol,
        "config": config.to_dict(),
        "params": sum(p.numel() for p in module.backbone.parameters()),
        "train_flops_per_image": flops["train"],  # the trained path, forward + backward
        "eval_flops_per_image": flops["eval"],  # the evaluation path, forward
        "n_train_images": len(datamodule.train_set),
        "n_val_images": len(datamodule.val_set) if config.data.protocol == "clean" else 0,
        "n_test_images": len(datamodule.test_set),
        "epochs_completed": trainer.current_epoch,
        "global_steps": trainer.global_step,
        "wall_time_s": wall,  # of this process (a resumed run: since the resume)
        "train_step_seconds": step_seconds,  # steady-state training steps, over the whole run
        "train_images_per_s": images_per_s,  # every device together
        "train_tflops": achieved / 1e12,
        "mfu": achieved / (peak * trainer.world_size) if peak else None,
        "peak_tflops": peak / 1e12 if peak else None,
        "precision": config.precision,
        "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "devices": trainer.world_size,
        "data": {
            **{k: datamodule.hparams.get(k) for k in ("data_dir", "source", "synthetic_size")},
            "fingerprint": datamodule.fingerprint(),
        },
        "hardware": hardware(),
        "sa_conv_version": __version__,
    }
