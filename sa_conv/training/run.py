"""One training run: a config in, a run folder out.

``train(config, datamodule=..., options=...)`` writes ``<output_dir>/<model>/version_N/``: ``config.yaml``
(the resolved ``RunConfig``, reusable to repeat the run), TensorBoard events, ``checkpoints/`` and
``metrics.json`` (``sa_conv.training.summary.RunSummary``). It reads top to bottom in named steps: settle
the precision and build the module, then the callbacks, the trainer, the projection, fit, test, and the
summary (what the run leaves behind is ``sa_conv.training.summary``'s).
"""

from __future__ import annotations

import os
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
from pytorch_lightning.utilities.exceptions import SIGTERMException

from sa_conv.analysis.flops import FlopCounts, run_flops
from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.data.sources import Source
from sa_conv.models.footprint import check_fits, footprint
from sa_conv.training.callbacks import AttentionFigures, TrainingProgress
from sa_conv.training.checkpoints import (
    AtomicCheckpointIO,
    InterruptCheckpoint,
    RelocatedResume,
    ResumableRNG,
    RunConfigRecord,
)
from sa_conv.training.config import RunConfig, RunOptions, dump_config
from sa_conv.training.epochs import EpochRecord
from sa_conv.training.module import ImageClassifier
from sa_conv.training.precision import (
    flush_denormals,
    precision_plugin,
    product_dtype,
    settle_precision,
    warn_slow_bf16,
)
from sa_conv.training.progress_bar import RunProgressBar
from sa_conv.training.resume import Resume, check_same_data
from sa_conv.training.signals import (
    RankRecord,
    RunInterruptedError,
    ddp_aware_strategy,
    peer_lost,
    sigint_as_sigterm,
    stopping_line,
)
from sa_conv.training.summary import (
    Measured,
    ReportedAccuracy,
    RunSummary,
    reported_correct,
    summarize,
    write_run_explorer,
)
from sa_conv.utils.allocator import keep_freed_memory
from sa_conv.utils.files import (
    DiskFullError,
    disk_full,
    is_disk_full,
    new_folders_removed_on_error,
    new_run_removed_on_error,
    prepare_output_dir,
    write_text,
)
from sa_conv.utils.machine import available_memory, matmul_flops_per_s, source_commit
from sa_conv.utils.pace import Pace, flop_projection
from sa_conv.utils.safe_load import safe_globals
from sa_conv.utils.schedule import schedule_length
from sa_conv.utils.version import __version__

__all__ = ["datamodule_for", "module_for", "train"]


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
    source: Source = "synthetic" if synthetic else "auto"
    return CIFAR10DataModule(
        config.data, data_dir=data_dir, source=source, synthetic_size=synthetic_size, seed=config.seed
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
) -> RunSummary:
    """Train (or resume) one run; returns the summary also written to ``metrics.json``.

    ``module``: start from these weights instead of fresh ones (fine-tuning). Raises ``RunInterruptedError``
    after SIGTERM / SIGINT (a checkpoint was saved), ``FloatingPointError`` on a NaN loss (the last
    good checkpoint is kept), ``DataError`` / ``CheckpointError`` / ``ValueError`` on bad input; a run
    that fails before writing a file leaves no new empty folder behind.
    """
    # about 70 lines: the run's steps, in order, read top to bottom in one place
    with new_folders_removed_on_error(options.output_dir):
        prepare_output_dir(options.output_dir)
        check_same_data(resume, datamodule.fingerprint)
        config = settle_precision(config, options.accelerator, resume.stored if resume else None)
        warn_slow_bf16(config, options.accelerator)
        flush_denormals()
        commit = source_commit()  # the code that trains it (from this start on, for a resumed run)
        if _on_gpu(options):  # TF32 tensor cores, or not
            torch.set_float32_matmul_precision("high" if config.tf32 else "highest")
        else:  # every CPU step makes the same large tensors: pages already faulted in, not fresh ones
            keep_freed_memory()
        if not options.allow_large:  # before anything of the model is allocated
            check_model_fits(config, options)
        pl.seed_everything(config.seed, workers=True, verbose=False)
        module = module if module is not None else module_for(config)
        module.epoch_batches = datamodule.train_batches  # the schedule's length, without a loader
        flops = run_flops(module.backbone, batch=config.data.batch_size)
        if options.compile:  # on every rank; in place: parameter names (and checkpoints) stay the same
            module.backbone.compile()
        logger = _logger(config, options, resume)
        run_dir = Path(logger.log_dir)
        with new_run_removed_on_error(run_dir):  # failed before its first checkpoint: no folder left
            callbacks = _callbacks(config, options, run_dir, datamodule, module, slow_hint)
            trainer = _trainer(config, options, logger, callbacks, run_dir)
            _announce(
                trainer, config, options, module, datamodule, run_dir, resume, flops, callbacks.progress
            )
            wall = _fit(trainer, module, datamodule, resume, run_dir, callbacks)
        # read now: testing a checkpoint restores the callbacks' states of that checkpoint
        measured = Measured.of(callbacks.progress, callbacks.figures, wall_time_s=wall)
        accuracy = _test(trainer, module, datamodule, config, callbacks, run_dir, measured.history)
        correct = None
        if trainer.is_global_zero:  # which test images the reported model gets right (paired tests)
            best, device = callbacks.best.best_model_path or None, trainer.strategy.root_device
            correct = reported_correct(best, module, datamodule, config.precision, device)
        summary = summarize(
            trainer,
            config,
            datamodule,
            module,
            run_dir=run_dir,
            flops=flops,
            measured=measured,
            accuracy=accuracy,
            test_correct=correct,
            best_checkpoint=None if options.fast_dev_run else callbacks.best.best_model_path or None,
            commit=commit,
        )
        if trainer.is_global_zero and not options.fast_dev_run:
            summary.write(run_dir / "metrics.json")
            if options.explore and module.backbone.has_attention:
                write_run_explorer(run_dir, datamodule, summary)
        return summary


def check_model_fits(config: RunConfig, options: RunOptions) -> None:
    """``ModelTooLargeError`` when the model, its training state and its activations at the run's batch
    (estimated from the config: ``sa_conv.models.footprint``) exceed the memory of the device it trains
    on."""
    device = torch.device("cuda" if _on_gpu(options) else "cpu")
    fp = footprint(config.model, config.resolved_model_config, config.data.batch_size)
    check_fits(fp, available_memory(device), what=f"the {config.model} model", lift="pass --allow-large")


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
    eval_name = module.val_name
    world_size = options.devices if isinstance(options.devices, int) else 1
    steps = datamodule.train_batches(world_size, config.limit_train_batches)
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
    evaluated = len(datamodule.split(datamodule.evaluated_split()))
    progress = TrainingProgress(
        lines=lines,
        pace=Pace(eval_images=evaluated, test_images=len(datamodule.split("test"))),
        total_steps=module.total_steps,
        slow_hint=slow_hint,
        log_every=min(50, max(1, steps // 10)),
    )
    figures = None
    if options.figures_every is not None and module.backbone.has_attention:
        split = "val" if len(datamodule.split("val")) else "test"  # test images under the paper's protocol
        figures = AttentionFigures(
            backbone=module.backbone,
            image_source=lambda n: datamodule.evaluation_images(n, split=split)[0],
            lr_schedule=module.lr_schedule,
            every_n_epochs=options.figures_every,
            # locality snapshots about 40 times over the run
            history_every_n_steps=options.history_every or max(1, round(config.epochs * steps / 40)),
        )
    ranks = RankRecord(options.output_dir / ".ranks")
    extra = [LearningRateMonitor(logging_interval="step"), progress, ResumableRNG(), RelocatedResume(), ranks]
    extra.append(RunConfigRecord(config.to_dict()))
    if not lines:
        extra.append(RunProgressBar())
    everything = [best, *latest, interrupt, *extra, *([figures] if figures else [])]
    return _Callbacks(everything, best, interrupt, progress, figures, ranks)


def _on_gpu(options: RunOptions) -> bool:
    """Whether the run trains on CUDA GPUs."""
    return torch.cuda.is_available() and options.accelerator != "cpu"


def _latest(folder: Path, name: str, **when: Any) -> ModelCheckpoint:
    """A checkpoint ``<folder>/<name>.ckpt`` overwritten at each of ``when`` (Lightning's triggers)."""
    return ModelCheckpoint(dirpath=folder, filename=name, enable_version_counter=False, **when)


def _trainer(
    config: RunConfig, options: RunOptions, logger: TensorBoardLogger, callbacks: _Callbacks, run_dir: Path
) -> pl.Trainer:
    contract = precision_plugin(config.precision, "cuda" if _on_gpu(options) else "cpu")
    return pl.Trainer(
        max_epochs=config.epochs,
        accelerator=options.accelerator,
        devices=options.devices,
        strategy=ddp_aware_strategy(options.strategy, options.ddp_timeout),
        # bf16-mixed: the project's contract; the precision's name was checked by RunConfig
        precision=None if contract else config.precision,  # type: ignore[arg-type]
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
        plugins=[AtomicCheckpointIO(), *([contract] if contract else [])],
    )


def _logger(config: RunConfig, options: RunOptions, resume: Resume | None) -> TensorBoardLogger:
    """The run's TensorBoard logger, whose version names the run folder: the ranks a DDP run launches
    are told rank 0's (else each would take the next free version for itself)."""
    version = resume.version if resume else None
    if os.environ.get("LOCAL_RANK", "0") != "0" and _VERSION in os.environ:
        version = int(os.environ[_VERSION])
    logger = TensorBoardLogger(
        save_dir=str(options.output_dir), name=config.model, version=version, default_hp_metric=False
    )
    os.environ[_VERSION] = str(logger.version)  # read only by the ranks this process starts
    return logger


_VERSION = "SA_CONV_RUN_VERSION"


def _announce(
    trainer: pl.Trainer,
    config: RunConfig,
    options: RunOptions,
    module: ImageClassifier,
    datamodule: CIFAR10DataModule,
    run_dir: Path,
    resume: Resume | None,
    flops: FlopCounts,
    progress: TrainingProgress,
) -> None:
    """Write config.yaml and say what runs, where, in what precision, and (at once: a first step may take
    minutes) how long it takes at least: its counted FLOPs at the rate of one large matrix product here,
    measured now in a fraction of a second (the measured speed corrects it after the first steps). The
    projected step is also what a first Ctrl-C waits for, before a step is timed."""
    if trainer.is_global_zero:
        if not options.fast_dev_run:  # a smoke test writes nothing
            write_text(run_dir / "config.yaml", dump_config(config))
        print(f"sa-conv {__version__} | model {config.model} | scale {config.scale} | run dir {run_dir}")
        n_params = sum(p.numel() for p in module.backbone.parameters())
        print(
            f"parameters: {n_params:,} | GFLOP per image: {flops.train / 1e9:.3f} training step "
            f"(forward + backward), {flops.eval / 1e9:.3f} evaluation (forward) | precision "
            f"{config.precision}"
        )
        if resume is not None:
            print(f"resuming from {resume.path}")
    if options.fast_dev_run:
        return
    world, pace = trainer.world_size, progress.pace
    batches = datamodule.train_batches(world, trainer.limit_train_batches)
    total = schedule_length(batches, max_epochs=trainer.max_epochs, max_steps=trainer.max_steps)
    if resume is not None and resume.step >= total and trainer.is_global_zero:
        print(f"the run had finished training (step {resume.step:,} of {total:,}): it is tested again")
    device = trainer.strategy.root_device
    rate = matmul_flops_per_s(device, product_dtype(config.precision, device.type)) * world
    seconds = flop_projection(
        steps_left=max(total - (resume.step if resume else 0), 0),
        batches_per_epoch=batches,
        epoch_images=min(len(datamodule.split("train")), batches * config.data.batch_size * world),
        eval_images=pace.eval_images,
        test_images=pace.test_images if config.data.protocol == "clean" else 0,
        train_flops=flops.train,
        eval_flops=flops.eval,
        flop_rate=rate,
    )
    pace.projected_step_seconds = config.data.batch_size * world * flops.train / rate
    if trainer.is_global_zero:
        progress.projected(seconds, rate)


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
    acknowledge = lambda: stopping_line(callbacks.progress.pace.step_seconds())  # noqa: E731
    with sigint_as_sigterm(acknowledge) as received:
        try:
            with safe_globals():  # read without running code, as every checkpoint is
                trainer.fit(
                    module,
                    datamodule=datamodule,
                    ckpt_path=str(resume.path) if resume else None,
                    weights_only=True,
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
                lost = peer_lost(callbacks.ranks, trainer.global_rank, trainer.world_size, err)
                if lost is not None:
                    raise lost from None
            raise
    return time.perf_counter() - start


def _test(
    trainer: pl.Trainer,
    module: ImageClassifier,
    datamodule: CIFAR10DataModule,
    config: RunConfig,
    callbacks: _Callbacks,
    run_dir: Path,
    history: list[EpochRecord],
) -> ReportedAccuracy:
    """The test accuracy: the best checkpoint tested once (clean protocol), or the paper's protocol's
    best and final test accuracy of the epochs (its validation loop ran on the test split)."""
    if config.data.protocol == "paper":
        evaluated = [h.test_acc for h in history if h.test_acc is not None]
        best = max(evaluated, default=float("nan"))
        final = evaluated[-1] if evaluated else float("nan")
        return ReportedAccuracy(best_test_acc=best, final_test_acc=final, test_acc=best)
    best_path = callbacks.best.best_model_path or None
    acknowledge = lambda: "stopping the test; Ctrl-C again to abort at once"  # noqa: E731
    with sigint_as_sigterm(acknowledge) as received:
        try:
            with safe_globals():
                results = trainer.test(
                    module, datamodule=datamodule, ckpt_path=best_path, verbose=False, weights_only=True
                )
        except SIGTERMException:  # training is complete: a resume only tests and writes metrics.json
            last = run_dir / "checkpoints" / "last.ckpt"
            raise RunInterruptedError(run_dir, last, trainer.global_step, received["signal"]) from None
    score = callbacks.best.best_model_score
    return ReportedAccuracy(
        test_acc=float(results[0]["test/acc"]) if results else float("nan"),
        best_val_acc=float(score) if score is not None else float("nan"),
    )
