"""One training run: a config in, a run folder out.

``train(config, data=..., options=...)`` writes ``<output_dir>/<model>/version_N/``: ``config.yaml``
(the resolved ``RunConfig``, reusable to repeat the run), TensorBoard events, ``checkpoints/`` and
``metrics.json``. Checkpoints resume exactly and carry their config, so a resume is checked against
the command that asks for it (``find_resume``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint, ThroughputMonitor
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities.exceptions import SIGTERMException

from sa_conv import __version__
from sa_conv.callbacks import AttentionFigures, TrainingProgress, layer_summary
from sa_conv.checkpointing import (
    AtomicCheckpointIO,
    CheckpointError,
    InterruptCheckpoint,
    ResumableRNG,
    RunConfigRecord,
    read_checkpoint,
    run_config_of,
)
from sa_conv.config import coerce, config_from_dict, config_to_dict, field_types
from sa_conv.data import CIFAR10DataModule, Protocol
from sa_conv.files import new_folders_removed_on_error, write_json, write_text
from sa_conv.flops import counted_flops
from sa_conv.lit import ImageClassifier, Schedule
from sa_conv.machine import PRECISIONS, cpu_has_native_bf16, hardware, resolve_precision
from sa_conv.models import MODELS, model_config

__all__ = [
    "PRECISIONS",
    "RunConfig",
    "RunInterruptedError",
    "RunOptions",
    "config_difference",
    "find_resume",
    "hardware",
    "train",
]


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything that decides a run's result, given its data (every field is a flag of experiments.run).

    ``model_config`` is resolved on construction: the model's registry defaults with the given
    overrides, every field written out, so that a saved config repeats the run exactly.
    """

    model: str
    scale: str = "custom"  # the preset this config started from (a label)
    model_config: dict[str, Any] = field(default_factory=dict)
    epochs: int = 300
    batch_size: int = 100
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    schedule: Schedule = "warmup-cosine"
    warmup: float = 0.05  # warmup-cosine: fraction of the steps with a linear warm-up
    milestones: tuple[float, ...] = (80 / 300, 150 / 300, 250 / 300)  # multistep: fractions of training
    gamma: float = 0.1  # multistep: lr factor at each milestone
    protocol: Protocol = "clean"  # clean: hold out val_size images; paper: train on all, test each epoch
    val_size: int = 5000
    train_subset: int | None = None  # train on the first N images of the training split
    augment: bool = True  # random crop 32 (padding 4) and horizontal flip
    limit_train_batches: int | float | None = None  # Lightning: batches (int) or fraction (float) per epoch
    precision: str = "auto"  # auto: bf16-mixed on a GPU or a CPU with native bf16, else 32-true
    seed: int = 0

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; valid models: {', '.join(MODELS)}")
        family = field_types(
            MODELS[self.model].family
        )  # typed as the model's config says (YAML gives lists, ints)
        typed = {k: coerce(v, family[k], k) if k in family else v for k, v in self.model_config.items()}
        resolved = dataclasses.asdict(model_config(self.model, **typed))
        object.__setattr__(self, "model_config", resolved)
        checks = [
            ("epochs", self.epochs >= 1, "a positive integer"),
            ("batch_size", self.batch_size >= 1, "a positive integer"),
            ("lr", 0 < self.lr < math.inf, "positive and finite"),
            ("momentum", 0 <= self.momentum < 1, "in [0, 1)"),
            ("weight_decay", 0 <= self.weight_decay < math.inf, ">= 0 and finite"),
            ("warmup", 0 <= self.warmup < 1, "in [0, 1)"),
            ("gamma", 0 < self.gamma <= 1, "in (0, 1]"),
            ("val_size", self.val_size >= 0, ">= 0"),
            ("train_subset", self.train_subset is None or self.train_subset >= 1, "a positive integer"),
            ("milestones", all(0 < m < 1 for m in self.milestones), "fractions of training in (0, 1)"),
            ("milestones", list(self.milestones) == sorted(self.milestones), "in increasing order"),
            ("precision", self.precision in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
            ("protocol", self.protocol in ("clean", "paper"), "clean or paper"),
            ("schedule", self.schedule in ("warmup-cosine", "multistep"), "warmup-cosine or multistep"),
        ]
        limit = self.limit_train_batches
        checks.append(
            (
                "limit_train_batches",
                limit is None
                or (isinstance(limit, int) and limit >= 1)
                or (isinstance(limit, float) and 0 < limit <= 1),
                "a number of batches >= 1 or a fraction in (0, 1]",
            )
        )
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what config.yaml and checkpoints hold)."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """The config of plain data (a config.yaml); unknown or ill-typed options name themselves."""
        return config_from_dict(cls, data, what="the run config")

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` (``model_config`` entries are merged, not replaced)."""
        if "model_config" in changes:
            changes["model_config"] = {**self.model_config, **changes["model_config"]}
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a run executes, without changing its result: hardware, checkpoints, figures, logging."""

    output_dir: Path
    accelerator: str = "auto"
    devices: int | str = 1
    strategy: str = "auto"
    compile: bool = False  # torch.compile the backbone
    max_time: str | None = None  # Lightning: stop after DD:HH:MM:SS
    fast_dev_run: bool = False  # Lightning: one batch of each stage, nothing written
    checkpoint_every: int | None = None  # also a snapshot every N training steps
    snapshot_minutes: float = 10.0  # a snapshot every this many minutes of training (0: none)
    figures_every: int | None = 5  # attention figures every N epochs (None: no attention record)
    history_every: int | None = None  # locality snapshots every N steps (default: about 40 per run)
    progress: Literal["auto", "bar", "lines"] = "auto"  # auto: a bar on a terminal, lines in a log

    def __post_init__(self) -> None:
        checks = [
            (
                "checkpoint_every",
                self.checkpoint_every is None or self.checkpoint_every >= 1,
                "a positive integer",
            ),
            ("snapshot_minutes", 0 <= self.snapshot_minutes < math.inf, ">= 0 minutes (0: none)"),
            (
                "figures_every",
                self.figures_every is None or self.figures_every >= 1,
                "a positive integer or none",
            ),
            ("history_every", self.history_every is None or self.history_every >= 1, "a positive integer"),
            ("accelerator", self.accelerator in ACCELERATORS, f"one of {', '.join(ACCELERATORS)}"),
            (
                "devices",
                self.devices == "auto" or (isinstance(self.devices, int) and self.devices >= 1),
                "a positive integer or auto",
            ),
            (
                "max_time",
                self.max_time is None
                or re.fullmatch(r"\d{1,2}:\d{2}:\d{2}:\d{2}", self.max_time) is not None,
                "DD:HH:MM:SS",
            ),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")
        check_devices(self.accelerator, self.devices)


ACCELERATORS = ("auto", "cpu", "gpu", "cuda")


def check_devices(accelerator: str, devices: int | str) -> None:
    """More devices than the machine has: one clear error instead of a hang or a process storm."""
    if not isinstance(devices, int):
        return
    import os

    gpu = accelerator in ("gpu", "cuda")
    if gpu and not torch.cuda.is_available():
        raise ValueError(f"accelerator {accelerator}: this machine has no GPU")
    gpu = gpu or (accelerator == "auto" and torch.cuda.is_available())
    available = torch.cuda.device_count() if gpu else (os.cpu_count() or 1)
    if devices > available:
        raise ValueError(f"devices {devices}: this machine has {available} {'GPUs' if gpu else 'CPU cores'}")


class RunInterruptedError(RuntimeError):
    """The run was stopped by SIGTERM or SIGINT; a checkpoint to resume from was saved."""

    def __init__(self, run_dir: Path, checkpoint: Path, step: int, signal: str) -> None:
        super().__init__(f"{signal} at step {step}: saved {checkpoint}")
        self.run_dir, self.checkpoint, self.step, self.signal = run_dir, checkpoint, step, signal


def config_difference(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """``name=stored (now: wanted)`` for every option that differs, model options by their own name."""

    def flat(config: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in config.items() if k != "model_config"}
        out.update(config.get("model_config", {}))
        return out

    # a config saved before an option existed ran with that option's default
    with contextlib.suppress(ValueError, TypeError):
        stored = RunConfig.from_dict(stored).to_dict()
    a, b = flat(stored), flat(wanted)
    if b.get("precision") == "auto":  # auto asks for whatever precision the run resolved to
        b["precision"] = a.get("precision")
    return [f"{k}={a.get(k)!r} (now: {b.get(k)!r})" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _checkpoints(run_dir: Path) -> list[Path]:
    """A run's checkpoints, newest first (Lightning's SLURM requeue checkpoints included)."""
    found = [*run_dir.glob("checkpoints/*.ckpt"), *run_dir.glob("hpc_ckpt_*.ckpt")]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def find_resume(
    spec: str, root: Path, config: RunConfig, *, warn: Any = print
) -> tuple[Path, int | None] | None:
    """The checkpoint to resume and its run's version under ``root`` (None for a checkpoint from
    elsewhere: its training continues in a new run folder).

    ``spec``: a checkpoint path, ``latest`` (the newest readable checkpoint of the newest run under
    ``root/<model>`` with this config; one must exist) or ``auto`` (the same, or None: start a new run).
    A checkpoint of another config is refused with the options that differ; an unreadable one is skipped
    with a warning (``latest``) or refused (a path).
    """
    wanted = config.to_dict()

    def check(path: Path, ckpt: dict[str, Any]) -> None:
        stored = run_config_of(ckpt)
        if stored is None:
            raise CheckpointError(f"{path} holds no run config (not written by experiments.run)")
        differs = config_difference(stored, wanted)
        if differs:
            raise CheckpointError(f"{path} is a run with other options: {'; '.join(differs)}")

    if spec not in ("latest", "auto"):
        path = Path(spec)
        check(path, read_checkpoint(path))
        inside = (root / config.model).resolve() in path.resolve().parents
        return path, _version_of(path) if inside else None
    runs = sorted(
        (root / config.model).glob("version_*"),
        key=lambda p: _version_of(p / "checkpoints") or -1,
        reverse=True,
    )
    mismatch = None
    for run in runs:
        for path in _checkpoints(run):
            try:
                ckpt = read_checkpoint(path)
            except CheckpointError as err:
                warn(f"warning: skipping {err}")
                continue
            try:
                check(path, ckpt)
            except CheckpointError as err:
                mismatch = mismatch or err
                break  # this run has another config: look at older runs
            return path, _version_of(path)
    if spec == "auto":
        return None
    if mismatch is not None:
        raise CheckpointError(
            f"no run of {config.model} under {root} has this config; the newest: {mismatch}"
        )
    raise CheckpointError(f"no run of {config.model} with a readable checkpoint under {root / config.model}")


def _version_of(path: Path) -> int | None:
    for parent in path.parents:
        if parent.name.startswith("version_") and parent.name[8:].isdigit():
            return int(parent.name[8:])
    return None


@contextlib.contextmanager
def _sigint_as_sigterm() -> Iterator[dict[str, str]]:
    """A first Ctrl-C stops like SIGTERM (at the end of the step, with a checkpoint); a second one
    interrupts at once. Yields which signal arrived."""
    received = {"signal": "SIGTERM"}

    def handler(signum: int, frame: Any) -> None:
        received["signal"] = "SIGINT"
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # before Lightning's handler is in
            raise KeyboardInterrupt
        signal.raise_signal(signal.SIGTERM)

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield received
        return
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)


def datamodule_for(
    config: RunConfig, *, data_dir: Path | None, synthetic: bool = False, synthetic_size: int = 512
) -> CIFAR10DataModule:
    """The data module of a run: the config's split, batch and augmentation over the given data."""
    return CIFAR10DataModule(
        data_dir=data_dir,
        source="synthetic" if synthetic else "auto",
        synthetic_size=synthetic_size,
        batch_size=config.batch_size,
        val_size=config.val_size,
        train_subset=config.train_subset,
        protocol=config.protocol,
        augment=config.augment,
        seed=config.seed,
    )


def module_for(config: RunConfig) -> ImageClassifier:
    """The LightningModule of a run (fresh weights from the config's seed)."""
    return ImageClassifier(
        model=config.model,
        model_config=config.model_config,
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
        schedule=config.schedule,
        warmup=config.warmup,
        milestones=config.milestones,
        gamma=config.gamma,
        val_name="test" if config.protocol == "paper" else "val",
    )


def settle_precision(config: RunConfig, accelerator: str, stored: dict[str, Any] | None = None) -> RunConfig:
    """The config with its precision decided: a resumed run keeps its own (``stored``, its checkpoint's
    config) whatever this machine would pick; a new run resolves ``auto`` for this machine."""
    if stored is None or config.precision != "auto":
        return config.replace(precision=resolve_precision(config.precision, accelerator))
    precision = stored.get("precision", "auto")
    if precision == "auto":  # written before runs recorded their precision: auto meant bf16 on GPUs only
        precision = "bf16-mixed" if torch.cuda.is_available() and accelerator != "cpu" else "32-true"
    gpu = torch.cuda.is_available() and accelerator != "cpu"
    if precision == "bf16-mixed" and not gpu and not cpu_has_native_bf16():
        print(
            "warning: this run trains in bf16-mixed (its checkpoints' precision) and this CPU has no native "
            "bf16: it will be several times slower here",
            file=sys.stderr,
        )
    return config.replace(precision=precision)


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


def train(
    config: RunConfig,
    *,
    datamodule: CIFAR10DataModule,
    options: RunOptions,
    resume: Path | None = None,
    version: int | None = None,
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
        return _train(config, datamodule, options, resume, version, module, slow_hint)


def _train(
    config: RunConfig,
    datamodule: CIFAR10DataModule,
    options: RunOptions,
    resume: Path | None,
    version: int | None,
    module: ImageClassifier | None,
    slow_hint: str,
) -> dict[str, Any]:
    _check_output_dir(options.output_dir)
    pl.seed_everything(config.seed, workers=True, verbose=False)
    module = module if module is not None else module_for(config)
    backbone = module.backbone
    n_params = sum(p.numel() for p in backbone.parameters())
    train_flops = counted_flops(backbone, training=True, batch=config.batch_size)  # the trained path
    eval_flops = counted_flops(backbone, training=False, passes="forward", batch=config.batch_size)
    module.flops_per_batch = train_flops * config.batch_size  # Lightning's ThroughputMonitor
    stored = run_config_of(read_checkpoint(resume)) if resume is not None else None
    config = settle_precision(config, options.accelerator, stored)
    precision = config.precision
    logger = TensorBoardLogger(
        save_dir=str(options.output_dir), name=config.model, version=version, default_hp_metric=False
    )
    run_dir = Path(logger.log_dir)
    ckpt_dir = run_dir / "checkpoints"
    eval_name = "test" if config.protocol == "paper" else "val"
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
    callbacks: list[pl.Callback] = [
        best,
        _latest(ckpt_dir, "last", save_on_train_epoch_end=True),  # every epoch (best's save_last is not)
        interrupt,
    ]
    if options.snapshot_minutes > 0:
        interval = timedelta(minutes=options.snapshot_minutes)
        callbacks.append(_latest(ckpt_dir, "snapshot", train_time_interval=interval))
    if options.checkpoint_every:
        callbacks.append(_latest(ckpt_dir, "step", every_n_train_steps=options.checkpoint_every))
    lines = options.progress == "lines" or (options.progress == "auto" and not sys.stdout.isatty())
    progress = TrainingProgress(lines=lines, slow_hint=slow_hint)
    callbacks += [
        LearningRateMonitor(logging_interval="step"),
        ThroughputMonitor(batch_size_fn=lambda batch: len(batch[1])),
        progress,
        ResumableRNG(),
        RunConfigRecord(config.to_dict()),
    ]
    figures = None
    if options.figures_every is not None and backbone.has_attention:
        figures = AttentionFigures(
            every_n_epochs=options.figures_every,
            history_every_n_steps=options.history_every
            or _default_history_every(
                config, datamodule, options.devices if isinstance(options.devices, int) else 1
            ),
        )
        callbacks.append(figures)
    trainer = pl.Trainer(
        max_epochs=config.epochs,
        accelerator=options.accelerator,
        devices=options.devices,
        strategy=options.strategy,
        precision=precision,
        logger=logger,
        callbacks=callbacks,
        limit_train_batches=config.limit_train_batches,
        max_time=options.max_time,
        fast_dev_run=options.fast_dev_run,
        log_every_n_steps=10,
        enable_model_summary=False,  # our own line says parameters and FLOPs (Lightning's counts 0 FLOPs)
        enable_progress_bar=not lines,
        default_root_dir=str(run_dir),  # Lightning's SLURM requeue checkpoints (hpc_ckpt_N.ckpt) go here
        use_distributed_sampler=False,  # the data module shards every split across ranks itself
        plugins=[AtomicCheckpointIO()],
    )
    if trainer.is_global_zero:
        if not options.fast_dev_run:  # a smoke test writes nothing
            write_text(run_dir / "config.yaml", yaml.safe_dump(config.to_dict(), sort_keys=False))
        print(f"sa-conv {__version__} | model {config.model} | scale {config.scale} | run dir {run_dir}")
        print(
            f"parameters: {n_params:,} | GFLOP per image: {train_flops / 1e9:.3f} training step "
            f"(forward + backward), {eval_flops / 1e9:.3f} evaluation (forward) | precision {precision}"
        )
        if resume is not None:
            print(f"resuming from {resume}")
    if options.compile:
        backbone.compile()  # in place: parameter names (and checkpoints) stay the same
    start = time.perf_counter()
    with _sigint_as_sigterm() as received:
        try:
            # weights_only=False: our checkpoints carry RNG and data-loader states (our own files)
            trainer.fit(
                module, datamodule=datamodule, ckpt_path=str(resume) if resume else None, weights_only=False
            )
        except SIGTERMException:
            step = trainer.global_step
            raise RunInterruptedError(run_dir, interrupt.path, step, received["signal"]) from None
    wall = time.perf_counter() - start
    best_path = best.best_model_path if best.best_model_path and not options.fast_dev_run else None
    # taken now: testing a checkpoint restores the callbacks' states of that checkpoint
    history, images_per_s, step_seconds = list(progress.history), progress.images_per_second, progress.seconds
    snapshots = list(figures.history) if figures is not None else []
    if config.protocol == "paper":  # the validation loop was the test split, every epoch
        evaluated = [h["test_acc"] for h in history if "test_acc" in h]
        test = {
            "best_test_acc": max(evaluated, default=float("nan")),
            "final_test_acc": evaluated[-1] if evaluated else float("nan"),
        }
        test["test_acc"] = test["best_test_acc"]
    else:
        with _sigint_as_sigterm() as received:
            try:
                results = trainer.test(
                    module, datamodule=datamodule, ckpt_path=best_path, verbose=False, weights_only=False
                )
            except SIGTERMException:  # training is complete: a resume only tests and writes metrics.json
                last = ckpt_dir / "last.ckpt"
                raise RunInterruptedError(run_dir, last, trainer.global_step, received["signal"]) from None
        test = {
            "test_acc": float(results[0]["test/acc"]) if results else float("nan"),
            "best_val_acc": float(best.best_model_score)
            if best.best_model_score is not None
            else float("nan"),
        }
    summary = {
        "run_dir": str(run_dir),
        "model": config.model,
        "scale": config.scale,
        "protocol": config.protocol,
        "config": config.to_dict(),
        "params": n_params,
        "train_flops_per_image": train_flops,  # the trained path, forward + backward
        "eval_flops_per_image": eval_flops,  # the evaluation path, forward
        **test,
        "n_train_images": len(datamodule.train_set),
        "n_val_images": len(datamodule.val_set) if config.protocol == "clean" else 0,
        "n_test_images": len(datamodule.test_set),
        "epochs_completed": trainer.current_epoch,
        "global_steps": trainer.global_step,
        "wall_time_s": wall,  # of this process (a resumed run: since the resume)
        "train_step_seconds": step_seconds,  # forward, backward and update, over the whole run
        "train_images_per_s": images_per_s,
        "train_tflops": train_flops * images_per_s / 1e12,
        "history": history,
        "best_checkpoint": best_path,
        "precision": precision,
        "devices": trainer.world_size,
        "data": {k: datamodule.hparams.get(k) for k in ("data_dir", "source", "synthetic_size")},
        "hardware": hardware(),
        "sa_conv_version": __version__,
    }
    if snapshots:
        summary["layers"] = layer_summary(snapshots[-1])
        summary["locality_history"] = snapshots
    if trainer.is_global_zero and not options.fast_dev_run:
        write_json(run_dir / "metrics.json", summary)
    return summary


def _latest(folder: Path, name: str, **when: Any) -> ModelCheckpoint:
    """A checkpoint ``<folder>/<name>.ckpt`` overwritten at each of ``when`` (Lightning's triggers)."""
    return ModelCheckpoint(dirpath=folder, filename=name, enable_version_counter=False, **when)


def _default_history_every(config: RunConfig, datamodule: CIFAR10DataModule, world_size: int) -> int:
    """Locality snapshots about 40 times over the run."""
    datamodule.setup()
    steps_per_epoch = math.ceil(len(datamodule.train_set) / config.batch_size / world_size)
    limit = config.limit_train_batches
    if isinstance(limit, int):
        steps_per_epoch = min(steps_per_epoch, limit)
    elif isinstance(limit, float):
        steps_per_epoch = max(1, int(steps_per_epoch * limit))
    return max(1, round(config.epochs * steps_per_epoch / 40))


def load_config(path: Path) -> RunConfig:
    """A RunConfig from a YAML file (a run's config.yaml or one written by --print-config)."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"config file {path} is a directory") from None
    except UnicodeDecodeError:
        raise ValueError(f"config file {path} is not a text (YAML) file") from None
    except yaml.YAMLError as err:
        raise ValueError(f"config file {path} is not valid YAML ({str(err).splitlines()[0]})") from None
    if data is None:
        raise ValueError(f"config file {path} is empty")
    return RunConfig.from_dict(data)
