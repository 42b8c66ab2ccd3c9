"""The study's runs: its settings, where each run lives, a finished run read back (with its per-image test
results), an unfinished one resumed (here, or from the checkpoint another machine carried), a new one
trained; out of memory, the command that trains the run alone at a lower batch."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from experiments.cli import UserError, flag
from experiments.cli.memory import MemoryUse
from experiments.study.entries import Entry, entry_config
from experiments.study.weights import carried_resume
from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.data.fingerprint import data_difference
from sa_conv.models.weights import weights_dir
from sa_conv.training.checkpoints import module_from_checkpoint
from sa_conv.training.config import RunConfig, RunOptions, config_difference, flat_options
from sa_conv.training.evaluation import correct_on_test
from sa_conv.training.resume import Resume, find_resume, version_of
from sa_conv.training.run import datamodule_for, train
from sa_conv.training.summary import RunSummary
from sa_conv.utils.safe_load import CheckpointError

__all__ = [
    "StudySettings",
    "alone_command",
    "finished",
    "newest_resume",
    "run_entry",
    "run_root",
    "with_test_correct",
]


@dataclass(frozen=True, kw_only=True)
class StudySettings:
    """What every step of a study reads: its scale, its data, where results, figures and weights go."""

    scale: str
    data_dir: Path
    synthetic: bool = False
    synthetic_size: int = 512
    out: Path = Path("results")
    figures: Path = Path("figures")
    weights: Path = field(default_factory=weights_dir)
    no_figures: bool = False

    def data(self, config: RunConfig) -> CIFAR10DataModule:
        """The data module of one of the study's runs."""
        return datamodule_for(
            config, data_dir=self.data_dir, synthetic=self.synthetic, synthetic_size=self.synthetic_size
        )


def warning(message: str) -> None:
    """A warning line on stderr."""
    print(message, file=sys.stderr)


def run_root(entry: Entry, seed: int, settings: StudySettings) -> Path:
    """The folder of one entry and seed's runs."""
    return settings.out / "runs" / settings.scale / entry.run_name(seed)


def finished(entry: Entry, seed: int, settings: StudySettings) -> RunSummary | None:
    """The summary of the newest finished run of one entry and seed with the study's config, if any."""
    config = entry_config(entry, settings.scale, seed).to_dict()
    root = run_root(entry, seed, settings)
    found = [(version_of(p), p) for p in root.glob(f"{entry.model}/version_*/metrics.json")]
    done = [p for _, p in sorted((v, p) for v, p in found if v is not None)]  # version_N folders only
    for path in reversed(done):
        try:
            summary = here(RunSummary.read(path), path.parent)
        except (OSError, ValueError) as err:  # ValueError: not JSON, or a summary's keys missing
            raise UserError(f"{path} is not a readable run summary ({err}); move it away to go on") from None
        if not config_difference(summary.config, config):
            print(f"== {entry.name} seed {seed}: finished, {path.parent}", flush=True)
            return with_test_correct(summary, path, settings)
    return None


def here(summary: RunSummary, run_dir: Path) -> RunSummary:
    """A run's summary with its paths in the folder it is read from (its metrics.json names them as they
    were where it trained: another working directory, another checkout)."""
    best = summary.best_checkpoint
    moved = str(run_dir / "checkpoints" / Path(best).name) if best else None
    return replace(summary, run_dir=str(run_dir), best_checkpoint=moved)


def with_test_correct(summary: RunSummary, path: Path, settings: StudySettings) -> RunSummary:
    """The run's summary with its per-image test results (computed once from its best checkpoint, and
    kept in its metrics.json, for runs written before they recorded them)."""
    best = summary.best_checkpoint or str(Path(summary.run_dir) / "checkpoints" / "last.ckpt")
    if summary.test_correct is not None or not Path(best).is_file():
        return summary
    module = module_from_checkpoint(best)
    data = settings.data(RunConfig.from_dict(summary.config))
    trained_on = (summary.data or {}).get("fingerprint")
    if isinstance(trained_on, dict) and data_difference(trained_on, data.fingerprint()):
        print(f"warning: {path.parent} trained on other data: no per-image results from it", file=sys.stderr)
        return summary
    summary = replace(summary, test_correct=correct_on_test(module.backbone, data, summary.precision))
    summary.write(path)
    return summary


def newest_resume(
    entry: Entry, seed: int, settings: StudySettings, *, warn: Callable[[str], Any] = warning
) -> Resume | None:
    """An unfinished run's newest resumable checkpoint: its own (under its run folder) or the one another
    machine carried here, whichever is further along (its own where they are level)."""
    config = entry_config(entry, settings.scale, seed)
    root = run_root(entry, seed, settings)
    own = find_resume("auto", root, config, warn=warn)
    try:
        carried = carried_resume(settings.scale, entry.run_name(seed), root, config, settings.weights)
    except CheckpointError as err:
        warn(f"warning: the carried checkpoint is left alone: {err}")
        return own
    return carried if carried is not None and (own is None or carried.step > own.step) else own


def run_entry(entry: Entry, seed: int, settings: StudySettings) -> RunSummary:
    """Train (or resume, or read back) one run; returns its summary."""
    summary = finished(entry, seed, settings)
    if summary is not None:
        return summary
    config = entry_config(entry, settings.scale, seed)
    root = run_root(entry, seed, settings)
    resume = newest_resume(entry, seed, settings)
    if resume is None:
        print(f"== {entry.name} seed {seed}: training", flush=True)
    elif resume.version is None:  # carried from another machine: continues in a new run folder here
        carried = f"carried from another machine, {resume.path}"
        print(f"== {entry.name} seed {seed}: resuming step {resume.step}, {carried}", flush=True)
    else:
        print(f"== {entry.name} seed {seed}: resuming step {resume.step}", flush=True)
    options = RunOptions(output_dir=root, progress="lines", figures_every=1000, snapshot_minutes=5)
    data = settings.data(config)

    def newest() -> Path | None:
        found = find_resume("auto", root, config, warn=lambda _message: None)
        return found.path if found is not None else None

    with MemoryUse(
        batch_size=config.data.batch_size,
        what=f"training {entry.name} seed {seed}",
        lower="lower it in a run of its own (a study trains every model at its preset's batch): "
        + alone_command(entry, seed, settings),
        resume="run the same command again (the study resumes from {checkpoint})",
        checkpoint=newest,
    ):
        return train(config, datamodule=data, options=options, resume=resume)


def alone_command(entry: Entry, seed: int, settings: StudySettings) -> str:
    """The ``experiments.run`` command that trains one run of the study alone, at batch size ``{n}``."""
    words = ["python -m experiments.run", entry.model, "--scale", settings.scale, "--seed", str(seed)]
    for name, value in flat_options(entry.overrides_for(seed)).items():
        if isinstance(value, bool):
            words.append(flag(name) if value else f"--no-{flag(name)[2:]}")
        elif name != "batch_size":
            shown = " ".join(map(str, value)) if isinstance(value, tuple | list) else value
            words += [flag(name), "none" if shown is None else str(shown)]
    words += ["--synthetic"] if settings.synthetic else ["--data-dir", str(settings.data_dir)]
    return " ".join([*words, "--batch-size {n}"])
