"""One training run: a config in, a run folder out.

``train(config, datamodule=..., options=...)`` writes ``<output_dir>/<model>/version_N/``: ``config.yaml``
(the resolved ``RunConfig``, reusable to repeat the run), TensorBoard events, ``checkpoints/`` and
``metrics.json``. It reads top to bottom in named steps: settle the precision and build the module,
then the callbacks, the trainer, fit, test, and the summary. (About 430 lines: the steps stay in one
module so that the run reads in one place, in order.)
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
from pytorch_lightning.strategies import DDPStrategy
from pytorch_lightning.utilities.exceptions import SIGTERMException

from sa_conv import __version__
from sa_conv.analysis.explorer import explorer_data, write_explorer
from sa_conv.analysis.flops import counted_flops
from sa_conv.analysis.maps import initial_of, layer_summary
from sa_conv.data.datamodule import CIFAR10DataModule, data_difference
from sa_conv.training.callbacks import AttentionFigures, TrainingProgress
from sa_conv.training.checkpoints import (
    AtomicCheckpointIO,
    InterruptCheckpoint,
    RelocatedResume,
    ResumableRNG,
    RunConfigRecord,
)
from sa_conv.training.config import RunConfig, RunOptions, dump_config
from sa_conv.training.evaluation import correct_on_test
from sa_conv.training.module import ImageClassifier
from sa_conv.training.precision import (
    bf16_emulated,
    flush_denormals,
    precision_plugin,
    settle_precision,
    warn_slow_bf16,
)
from sa_conv.training.resume import Resume
from sa_conv.training.signals import RankRecord, RunInterruptedError, peer_lost, sigint_as_sigterm
from sa_conv.utils.allocator import keep_freed_memory
from sa_conv.utils.files import (
    DiskFullError,
    disk_full,
    is_disk_full,
    new_folders_removed_on_error,
    write_json,
    write_text,
)
from sa_conv.utils.machine import hardware, peak_flops, source_commit
from sa_conv.utils.safe_load import CheckpointError, read_checkpoint, safe_globals

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
    source = "synthetic" if synthetic else "auto"
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
        commit = source_commit()  # the code that trains it (from this start on, for a resumed run)
        if _on_gpu(options):  # TF32 tensor cores, or not
            torch.set_float32_matmul_precision("high" if config.tf32 else "highest")
        else:  # every CPU step makes the same large tensors: pages already faulted in, not fresh ones
            keep_freed_memory()
        pl.seed_everything(config.seed, workers=True, verbose=False)
        module = module if module is not None else module_for(config)
        flops = _flops(module, config)
        if options.compile:  # on every rank; in place: parameter names (and checkpoints) stay the same
            module.backbone.compile()
        logger = _logger(config, options, resume)
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
        if trainer.is_global_zero:  # which test images the reported model gets right (paired tests)
            test["test_correct"] = _test_correct(trainer, callbacks, module, datamodule, config)
        summary = {
            **_summary(trainer, config, datamodule, module, run_dir, flops, wall, rate, steps_seconds),
            **test,
            "history": history,
            "best_checkpoint": _best_path(callbacks, options),
            "commit": commit,
        }
        if snapshots:
            summary["layers"] = layer_summary(snapshots[-1], initial_of(snapshots))
            summary["locality_history"] = snapshots
        if trainer.is_global_zero and not options.fast_dev_run:
            write_json(run_dir / "metrics.json", summary)
            if options.explore and module.backbone.has_attention:
                write_run_explorer(run_dir, datamodule, summary)
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
    progress = TrainingProgress(lines=lines, slow_hint=slow_hint, log_every=min(50, max(1, steps // 10)))
    figures = None
    if options.figures_every is not None and module.backbone.has_attention:
        # locality snapshots about 40 times over the run
        every = options.history_every or max(1, round(config.epochs * steps / 40))
        figures = AttentionFigures(every_n_epochs=options.figures_every, history_every_n_steps=every)
    ranks = RankRecord(options.output_dir / ".ranks")
    extra = [LearningRateMonitor(logging_interval="step"), progress, ResumableRNG(), RelocatedResume(), ranks]
    extra.append(RunConfigRecord(config.to_dict()))
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
        strategy=_strategy(options),
        precision=None if contract else config.precision,  # bf16-mixed: the project's contract
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


def _strategy(options: RunOptions) -> str | DDPStrategy:
    """Lightning's strategy; DDP with the run's timeout, so that a dead rank ends the others in time (with
    NCCL, a failed collective raises in Python instead of aborting the process: not yet tried on GPUs)."""
    if options.strategy == "ddp":
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")  # abort the communicators, raise
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
            with safe_globals():
                results = trainer.test(
                    module, datamodule=datamodule, ckpt_path=best_path, verbose=False, weights_only=True
                )
        except SIGTERMException:  # training is complete: a resume only tests and writes metrics.json
            last = run_dir / "checkpoints" / "last.ckpt"
            raise RunInterruptedError(run_dir, last, trainer.global_step, received["signal"]) from None
    score = callbacks.best.best_model_score
    return {
        "test_acc": float(results[0]["test/acc"]) if results else float("nan"),
        "best_val_acc": float(score) if score is not None else float("nan"),
    }


def _test_correct(
    trainer: pl.Trainer,
    callbacks: _Callbacks,
    module: ImageClassifier,
    datamodule: CIFAR10DataModule,
    config: RunConfig,
) -> str:
    """Which test images the reported model (the best checkpoint, under either protocol) gets right,
    computed on the run's device in its precision (Lightning has moved the module back to the CPU)."""
    best = callbacks.best.best_model_path
    backbone = ImageClassifier.from_checkpoint(best).backbone if best else module.backbone
    return correct_on_test(backbone, datamodule, config.precision, trainer.strategy.root_device)


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
        # bf16 products: the device's own, or emulated exactly in float32 (a CPU without native bf16)
        "bf16_products": (
            ("emulated" if bf16_emulated(device.type) else "native")
            if config.precision == "bf16-mixed"
            else None
        ),
        "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "devices": trainer.world_size,
        "data": {
            **{k: datamodule.hparams.get(k) for k in ("data_dir", "source", "synthetic_size")},
            "fingerprint": datamodule.fingerprint(),
        },
        "hardware": hardware(),
        "sa_conv_version": __version__,
    }


def write_run_explorer(run_dir: Path, datamodule: CIFAR10DataModule, summary: dict[str, Any]) -> None:
    """A run's ``explorer.html``: the attention explorer of its last checkpoint, on 8 test images."""
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
