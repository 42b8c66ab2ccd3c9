"""What a run leaves behind besides its checkpoints: its summary (``RunSummary``, written as
``metrics.json`` and read back by the study), which test images its reported model gets right (per-image
results for paired tests, ``sa_conv.training.evaluation``), and its attention explorer page.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from sa_conv.analysis.explorer import explorer_data, write_explorer
from sa_conv.analysis.flops import FlopCounts
from sa_conv.analysis.maps import initial_of, layer_summary
from sa_conv.analysis.snapshots import LayerSummary, LocalitySnapshot, history_json, read_history
from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.training.callbacks import AttentionFigures, TrainingProgress
from sa_conv.training.checkpoints import module_from_checkpoint
from sa_conv.training.config import RunConfig
from sa_conv.training.epochs import EpochRecord, epochs_json, read_epochs
from sa_conv.training.evaluation import correct_on_test
from sa_conv.training.module import ImageClassifier
from sa_conv.training.precision import bf16_emulated
from sa_conv.utils.files import write_json
from sa_conv.utils.machine import hardware, peak_flops
from sa_conv.utils.precisions import BF16, FLOAT32, Precision
from sa_conv.utils.safe_load import CheckpointError, read_checkpoint
from sa_conv.utils.untrusted import load_json
from sa_conv.utils.version import __version__

__all__ = [
    "Measured",
    "ReportedAccuracy",
    "RunSummary",
    "reported_correct",
    "summarize",
    "write_run_explorer",
]

# keys metrics.json holds only where they apply (the protocol's accuracies, rank zero's per-image
# results, the attention record of a model with attention); every other key is always there
_WHERE_THEY_APPLY = frozenset(
    {"best_test_acc", "final_test_acc", "best_val_acc", "test_correct", "layers", "locality_history"}
)


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """A run's summary: what ``train`` returns and writes as ``metrics.json`` (``to_dict``, one key per
    field, in this order), and what the study reads back (``from_dict``, also of files written before a
    field existed: every field added since the first summaries has a default, and such a file written
    back gets no key it did not have unless its value was set since)."""

    run_dir: str
    model: str
    scale: str = "custom"
    protocol: str = "clean"
    config: dict[str, object]
    params: int
    train_flops_per_image: float | None = None  # the trained path, forward + backward
    eval_flops_per_image: float | None = None  # the evaluation path, forward
    n_train_images: int | None = None
    n_val_images: int = 0
    n_test_images: int
    epochs_completed: int
    global_steps: int
    wall_time_s: float | None = None  # of this process (a resumed run: since the resume)
    train_step_seconds: float | None = None  # steady-state training steps, over the whole run
    train_images_per_s: float  # every device together
    train_tflops: float | None = None
    mfu: float | None = None
    peak_tflops: float | None = None
    precision: Precision = FLOAT32
    bf16_products: str | None = None  # bf16 products: the device's own ("native"), or "emulated"
    peak_memory_gb: float | None = None
    devices: int = 1
    data: dict[str, object] | None = None  # where the data came from, and its fingerprint
    hardware: dict[str, object] | None = None
    sa_conv_version: str | None = None
    best_test_acc: float | None = None  # the paper's protocol: the best epoch's test accuracy
    final_test_acc: float | None = None  # the paper's protocol: the last epoch's
    test_acc: float  # the reported accuracy (the best checkpoint's, or the paper protocol's best)
    best_val_acc: float | None = None  # the clean protocol: the best checkpoint's validation accuracy
    test_correct: str | None = None  # per test image, in order: 1 right, 0 wrong (the reported model)
    history: list[EpochRecord] = field(default_factory=list)  # one record per epoch
    best_checkpoint: str | None = None
    commit: str | None = None
    layers: list[LayerSummary] | None = None  # locality per layer at the end
    locality_history: list[LocalitySnapshot] | None = None  # locality snapshots over training
    extra: dict[str, object] = field(default_factory=dict)  # keys of a file this version does not know
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False)  # keys a file lacked

    def to_dict(self) -> dict[str, object]:
        """The plain data of ``metrics.json``."""
        out = {}
        for f in _keys():
            value = getattr(self, f.name)
            unset = f.name in self.absent and value == _default(f)  # an older file's: still not there
            if not unset and not (value is None and f.name in _WHERE_THEY_APPLY):
                out[f.name] = value
        if self.layers is not None:
            out["layers"] = [layer.to_json() for layer in self.layers]
        if self.locality_history is not None:
            out["locality_history"] = history_json(self.locality_history)
        if "history" in out:
            out["history"] = epochs_json(self.history)
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, data: dict[str, object], source: str = "the run summary") -> RunSummary:
        """The summary of a ``metrics.json``'s data; keys it does not know are kept in ``extra``;
        ``ValueError`` names the keys every summary has that it lacks, or its malformed locality record."""
        needed = sorted(f.name for f in _keys() if f.name not in data and _default(f) is dataclasses.MISSING)
        if needed:
            raise ValueError(f"a run summary needs {', '.join(needed)}")
        names = {f.name for f in _keys()}
        # the records read by their readers below; the other fields are plain JSON values, taken as written
        known: dict[str, Any] = {k: v for k, v in data.items() if k in names}
        try:
            if known.get("layers") is not None:
                known["layers"] = [LayerSummary.from_json(layer) for layer in known["layers"]]
            if known.get("locality_history") is not None:
                known["locality_history"] = read_history(known["locality_history"], source)
            if "history" in known:
                known["history"] = read_epochs(known["history"], source)
        except (TypeError, ValueError, CheckpointError) as err:
            raise ValueError(str(err)) from None
        return cls(
            **known,
            extra={k: v for k, v in data.items() if k not in names},
            absent=frozenset(names - set(data)),
        )

    @classmethod
    def read(cls, path: Path) -> RunSummary:
        """A run's ``metrics.json``."""
        return cls.from_dict(load_json(path.read_text(), str(path)), str(path))

    def write(self, path: Path) -> None:
        """Write ``metrics.json`` (atomically)."""
        write_json(path, self.to_dict())


def _keys() -> list[dataclasses.Field[Any]]:
    """The fields of ``RunSummary`` that are keys of metrics.json, in order."""
    return [f for f in dataclasses.fields(RunSummary) if f.name not in ("extra", "absent")]


def _default(f: dataclasses.Field[Any]) -> Any:
    """A field's default value (``dataclasses.MISSING``: it has none)."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


@dataclass(frozen=True, kw_only=True)
class ReportedAccuracy:
    """A run's test accuracy: the best checkpoint tested once (clean protocol: with its validation
    accuracy), or the paper protocol's best and final epoch on the test split."""

    test_acc: float
    best_val_acc: float | None = None
    best_test_acc: float | None = None
    final_test_acc: float | None = None


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What a run measured while it trained: its wall time, speed, per-epoch records and locality."""

    wall_time_s: float  # of this process
    images_per_s: float  # of the whole run, every device together
    step_seconds: float  # the whole run's timed training steps
    history: list[EpochRecord]
    snapshots: list[LocalitySnapshot]

    @classmethod
    def of(
        cls, progress: TrainingProgress, figures: AttentionFigures | None, *, wall_time_s: float
    ) -> Measured:
        """What the run's progress and attention record hold now."""
        return cls(
            wall_time_s=wall_time_s,
            images_per_s=progress.images_per_second,
            step_seconds=progress.seconds,
            history=list(progress.history),
            snapshots=list(figures.history) if figures is not None else [],
        )


def summarize(
    trainer: pl.Trainer,
    config: RunConfig,
    datamodule: CIFAR10DataModule,
    module: ImageClassifier,
    *,
    run_dir: Path,
    flops: FlopCounts,
    measured: Measured,
    accuracy: ReportedAccuracy,
    test_correct: str | None,
    best_checkpoint: str | None,
    commit: str | None,
) -> RunSummary:
    """The summary of a run that has trained and tested."""
    # about 60 lines: one keyword per field of RunSummary, flat, so that a renamed field fails the type check
    device = trainer.strategy.root_device
    peak = peak_flops(device, config.precision)
    achieved = flops.train * measured.images_per_s  # images/s of every device together
    snapshots = measured.snapshots
    bf16 = "emulated" if bf16_emulated(device.type) else "native"
    return RunSummary(
        run_dir=str(run_dir),
        model=config.model,
        scale=config.scale,
        protocol=config.data.protocol,
        config=config.to_dict(),
        params=sum(p.numel() for p in module.backbone.parameters()),
        train_flops_per_image=flops.train,
        eval_flops_per_image=flops.eval,
        n_train_images=len(datamodule.split("train")),
        n_val_images=len(datamodule.split("val")) if config.data.protocol == "clean" else 0,
        n_test_images=len(datamodule.split("test")),
        epochs_completed=trainer.current_epoch,
        global_steps=trainer.global_step,
        wall_time_s=measured.wall_time_s,
        train_step_seconds=measured.step_seconds,
        train_images_per_s=measured.images_per_s,
        train_tflops=achieved / 1e12,
        mfu=achieved / (peak * trainer.world_size) if peak else None,
        peak_tflops=peak / 1e12 if peak else None,
        precision=config.precision,
        bf16_products=bf16 if config.precision == BF16 else None,
        peak_memory_gb=torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        devices=trainer.world_size,
        data={
            **{k: datamodule.hparams.get(k) for k in ("data_dir", "source", "synthetic_size")},
            "fingerprint": datamodule.fingerprint(),
        },
        hardware=hardware(),
        sa_conv_version=__version__,
        best_test_acc=accuracy.best_test_acc,
        final_test_acc=accuracy.final_test_acc,
        test_acc=accuracy.test_acc,
        best_val_acc=accuracy.best_val_acc,
        test_correct=test_correct,
        history=measured.history,
        best_checkpoint=best_checkpoint,
        commit=commit,
        layers=layer_summary(snapshots[-1], initial_of(snapshots)) if snapshots else None,
        locality_history=snapshots or None,
    )


def reported_correct(
    best_checkpoint: str | None,
    module: ImageClassifier,
    datamodule: CIFAR10DataModule,
    precision: Precision,
    device: torch.device,
) -> str:
    """Which test images the reported model (the best checkpoint, under either protocol; else the trained
    module) gets right, computed on ``device`` in the run's precision (Lightning has moved the module
    back to the CPU)."""
    backbone = module_from_checkpoint(best_checkpoint).backbone if best_checkpoint else module.backbone
    return correct_on_test(backbone, datamodule, precision, device)


def write_run_explorer(run_dir: Path, datamodule: CIFAR10DataModule, summary: RunSummary) -> None:
    """A run's ``explorer.html``: the attention explorer of its last checkpoint, on 8 test images."""
    last = run_dir / "checkpoints" / "last.ckpt"
    if not last.is_file():
        return
    ckpt = read_checkpoint(last)
    backbone = module_from_checkpoint(ckpt).backbone
    images, _ = datamodule.evaluation_images(8, normalized=False)
    source = "synthetic images" if datamodule.resolved_source() == "synthetic" else "test images"
    meta = {
        "model": summary.model,
        "config": summary.config,
        "checkpoint": str(last),
        "step": ckpt.get("global_step"),
        "test_acc": summary.test_acc,
        "test_note": "the run's reported accuracy (its best checkpoint)",
        "images_note": f"{len(images)} {source} of the run's data",
    }
    data = explorer_data(backbone, images, datamodule.normalize(images), meta=meta)
    write_explorer(run_dir / "explorer.html", data)
