"""The study: every model on the same CIFAR-10 data and budget, evaluated, with its attention figures.

    python -m experiments.study [--scale tiny|small|paper] [--data-dir DIR] [--out results/]
                                [--figures figures/] [--only NAME ...]

Writes ``<out>/<scale>.md`` and ``<out>/<scale>.json`` after every run (under the lock
``<out>/.<scale>.lock``, merged with the rows other studies of the scale wrote meanwhile); runs live under
``<out>/runs/<scale>/<name>-seed<k>/``. A finished run (its ``metrics.json`` exists) is read back, an
unfinished one resumes from its newest checkpoint, so a killed study continues where it was. A row of
the committed ``<scale>.json`` whose run is not here (another machine's, an earlier clone's) is kept,
marked as not re-checked: the tables never lose results they cannot rebuild.

``--report`` trains nothing: it reads the finished runs back and, for every run without a result, says
where it stands at its newest checkpoint (step, epochs, accuracy, locality per layer) and draws that
checkpoint's figures under the run's figure names, their titles marked "unfinished" (a finished run
replaces them).
"""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from experiments.cli import (
    DEFAULT_DATA_DIR,
    ArgumentParser,
    UserError,
    check_data_dir,
    flag,
    main_guard,
    output_folder,
    positive_int,
)
from experiments.memory import MemoryUse
from experiments.presets import SCALES
from experiments.studies import STUDIES, Entry, entry_config
from experiments.study_tables import ResultsTables
from experiments.study_weights import carried_resume, carry, ship_run
from sa_conv.analysis.curves import learning_curves, locality_by_layer
from sa_conv.analysis.maps import figures_of, history_of, initial_of, layer_summary, lr_schedule_of
from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.data.fingerprint import data_difference
from sa_conv.models.weights import weights_dir
from sa_conv.training.checkpoints import module_from_checkpoint
from sa_conv.training.config import RunConfig, RunOptions, config_difference, flat_options
from sa_conv.training.evaluation import correct_on_test
from sa_conv.training.resume import find_resume
from sa_conv.training.run import datamodule_for, train
from sa_conv.training.summary import RunSummary
from sa_conv.utils.files import save_png
from sa_conv.utils.safe_load import read_checkpoint


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


def run_root(entry: Entry, seed: int, settings: StudySettings) -> Path:
    """The folder of one entry and seed's runs."""
    return settings.out / "runs" / settings.scale / f"{entry.name}-seed{seed}"


def finished(entry: Entry, seed: int, settings: StudySettings) -> RunSummary | None:
    """The summary of the newest finished run of one entry and seed with the study's config, if any."""
    config = entry_config(entry, settings.scale, seed).to_dict()
    root = run_root(entry, seed, settings)
    done = sorted(root.glob(f"{entry.model}/version_*/metrics.json"), key=lambda p: int(p.parent.name[8:]))
    for path in reversed(done):
        summary = RunSummary.read(path)
        if not config_difference(summary.config, config):
            print(f"== {entry.name} seed {seed}: finished, {path.parent}", flush=True)
            return with_test_correct(summary, path, settings)
    return None


def with_test_correct(summary: RunSummary, path: Path, settings: StudySettings) -> RunSummary:
    """The run's summary with its per-image test results (computed once from its best checkpoint, and
    kept in its metrics.json, for runs written before they recorded them)."""
    best = summary.best_checkpoint or str(Path(summary.run_dir) / "checkpoints" / "last.ckpt")
    if summary.test_correct is not None or not Path(best).is_file():
        return summary
    module = module_from_checkpoint(best)
    data = settings.data(RunConfig.from_dict(summary.config))
    trained_on = (summary.data or {}).get("fingerprint")
    if trained_on is not None and data_difference(trained_on, data.fingerprint()):
        print(f"warning: {path.parent} trained on other data: no per-image results from it", file=sys.stderr)
        return summary
    summary = replace(summary, test_correct=correct_on_test(module.backbone, data, summary.precision))
    summary.write(path)
    return summary


def run_entry(entry: Entry, seed: int, settings: StudySettings) -> RunSummary:
    """Train (or resume, or read back) one run; returns its summary."""
    summary = finished(entry, seed, settings)
    if summary is not None:
        return summary
    config = entry_config(entry, settings.scale, seed)
    root = run_root(entry, seed, settings)
    resume = find_resume("auto", root, config, warn=lambda m: print(m, file=sys.stderr))
    if resume is None:  # a run another machine began and carried here
        resume = carried_resume(settings.scale, f"{entry.name}-seed{seed}", root, config, settings.weights)
    print(f"== {entry.name} seed {seed}: {'resuming' if resume else 'training'}", flush=True)
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
    for name, value in flat_options(entry.overrides).items():
        if isinstance(value, bool):
            words.append(flag(name) if value else f"--no-{flag(name)[2:]}")
        elif name != "batch_size":
            shown = " ".join(map(str, value)) if isinstance(value, tuple | list) else value
            words += [flag(name), "none" if shown is None else str(shown)]
    words += ["--synthetic"] if settings.synthetic else ["--data-dir", str(settings.data_dir)]
    return " ".join([*words, "--batch-size {n}"])


def render_figures(summary: RunSummary, prefix: str, settings: StudySettings) -> None:
    """Every attention figure of a finished run, from its last checkpoint and its own locality history."""
    done = summary.epochs_completed == summary.config["epochs"]  # its last step ends the schedule
    draw_figures(
        read_checkpoint(Path(summary.run_dir) / "checkpoints" / "last.ckpt"),
        summary.config,
        prefix,
        settings,
        history=summary.locality_history,
        total_steps=summary.global_steps if done else None,
    )


def draw_figures(
    ckpt: dict[str, Any],
    config: dict[str, Any],
    prefix: str,
    settings: StudySettings,
    *,
    history: list[dict[str, Any]] | None,
    total_steps: int | None = None,
    title: str | None = None,
) -> None:
    """The attention figures of one (loaded) checkpoint, written as ``<figures>/<prefix>_<figure>.png``."""
    backbone = module_from_checkpoint(ckpt).backbone.eval()
    images, _ = settings.data(RunConfig.from_dict(config)).evaluation_images(100)
    settings.figures.mkdir(parents=True, exist_ok=True)
    lr = lr_schedule_of(ckpt, total_steps)
    for tag, value in figures_of(backbone, images, history=history, lr=lr, name=title or prefix):
        if not isinstance(value, float):
            save_png(value, settings.figures / f"{prefix}_{tag.split('/', 1)[1]}.png")


def in_progress(
    entry: Entry, seed: int, settings: StudySettings
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """An unfinished run at its newest checkpoint (epochs done, its last per-epoch accuracy, the locality
    of its last snapshot) and that checkpoint, or None when it has none: a state of training, not a result."""
    config = entry_config(entry, settings.scale, seed)
    resume = find_resume(
        "auto", run_root(entry, seed, settings), config, warn=lambda m: print(m, file=sys.stderr)
    )
    if resume is None:
        return None
    ckpt = read_checkpoint(resume.path)
    progress = (ckpt.get("callbacks") or {}).get("TrainingProgress") or {}
    epochs = progress.get("history") or []
    snapshots = history_of(ckpt) or []
    split = "validation" if config.data.protocol == "clean" else "test"  # what each epoch evaluates
    state = {
        "name": entry.name,
        "seed": seed,
        "config": config.to_dict(),
        "step": ckpt["global_step"],
        "epochs_completed": len(epochs),
        "epochs": config.epochs,
        "epoch_split": split,
        "epoch_acc": epochs[-1].get("val_acc" if split == "validation" else "test_acc") if epochs else None,
        "snapshot_step": snapshots[-1]["step"] if snapshots else None,
        "layers": layer_summary(snapshots[-1], initial_of(snapshots)) if snapshots else [],
        "locality_history": snapshots,
    }
    return state, ckpt


def report_unfinished(
    table: list[tuple[Entry, int]],
    order: list[tuple[Entry, int]],
    results: dict[tuple[str, int], Any],
    settings: StudySettings,
) -> list[dict[str, Any]]:
    """Where every run of the study without a result stands, drawing the figures of those in ``order``
    (a run with a result, committed or read back, is never drawn over)."""
    states = []
    for entry, seed in table:
        if (entry.name, seed) in results or (found := in_progress(entry, seed, settings)) is None:
            continue
        state, ckpt = found
        states.append(state)
        if not settings.no_figures and state["layers"] and (entry, seed) in order:
            prefix = f"{settings.scale}_{entry.name}-seed{seed}"
            at = f"epoch {state['epochs_completed']} of {state['epochs']}, unfinished"
            history = state["locality_history"]
            draw_figures(ckpt, state["config"], prefix, settings, history=history, title=f"{prefix} ({at})")
    return states


# the studies drawn together in the scale figures: a scale's runs and, beside them, its relatives'
RELATED_SCALES = {"small": ("small", "small6"), "small6": ("small6", "small")}


def scale_figures(settings: StudySettings, unfinished: Sequence[dict[str, Any]] = ()) -> list[Path]:
    """The figures across a scale's runs (and its related scales'), from the committed tables: locality
    layer by layer of every attention run, and the learning curves of every run that recorded them; the
    scale's unfinished runs beside them, labelled with the epoch they stand at."""
    rows = []
    scale_now, figures = settings.scale, settings.figures
    for scale in RELATED_SCALES.get(scale_now, (scale_now,)):
        path = settings.out / f"{scale}.json"
        if path.is_file():
            rows += [(scale, row) for row in json.loads(path.read_text())]
    written = []

    def label(scale: str, r: dict[str, Any]) -> str:
        depth = f", {len(r['layers'])} layers" if r["layers"] else ""  # attention layers; none in a ResNet
        return f"{r['name']} s{r['seed']} ({scale}{depth})"

    attention = [{"label": label(sc, r), "layers": r["layers"]} for sc, r in rows if r.get("layers")]
    for u in (u for u in unfinished if u["layers"]):
        at = f"epoch {u['epochs_completed']}/{u['epochs']}, unfinished"
        attention.append({"label": f"{u['name']} s{u['seed']} ({scale_now}, {at})", "layers": u["layers"]})
    if attention:
        path = figures / f"{scale_now}_locality_by_layer.png"
        save_png(
            locality_by_layer(attention, title=f"locality layer by layer, {scale_now} and beside it"), path
        )
        written.append(path)
    curves = [
        {"label": label(sc, r), "epochs": r["epochs_history"]} for sc, r in rows if r.get("epochs_history")
    ]
    if curves:
        path = figures / f"{scale_now}_learning_curves.png"
        save_png(
            learning_curves(curves, title=f"validation accuracy per epoch, {scale_now} and beside it"), path
        )
        written.append(path)
    return written


def build_parser() -> ArgumentParser:
    """The study's command line."""
    parser = ArgumentParser(prog="python -m experiments.study", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="tiny", choices=SCALES)
    parser.add_argument(
        "--data-dir", type=Path, help=f"ImageFolder tree or CIFAR-10 root (default: {DEFAULT_DATA_DIR})"
    )
    parser.add_argument("--synthetic", action="store_true", help="synthetic data (a smoke test of the study)")
    parser.add_argument("--synthetic-size", type=positive_int, default=512)
    parser.add_argument("--out", type=output_folder, default=Path("results"))
    parser.add_argument("--figures", type=output_folder, default=Path("figures"))
    parser.add_argument("--only", nargs="+", metavar="NAME", help="a subset of the study's entries")
    parser.add_argument("--seeds", nargs="+", type=int, metavar="K", help="only these seeds of each entry")
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument(
        "--weights",
        type=output_folder,
        default=weights_dir(),
        help="where finished runs' weights ship and unfinished runs' checkpoints are carried "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--carry",
        action="store_true",
        help="train nothing: copy every unfinished run's newest resumable checkpoint to WEIGHTS/unfinished/, "
        "from where a study on any machine resumes it",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="tables and figures of the finished runs, where the unfinished ones stand; train nothing",
    )
    return parser


def runs_asked(args: Namespace) -> tuple[list[Entry], list[tuple[Entry, int]]]:
    """The entries ``--only`` names (every one without it) and the runs of them ``--seeds`` keeps."""
    entries = [e for e in STUDIES[args.scale] if not args.only or e.name in args.only]
    if args.only and len(entries) != len(set(args.only)):
        unknown = sorted(set(args.only) - {e.name for e in STUDIES[args.scale]})
        raise UserError(f"--only: no entry {', '.join(unknown)} at scale {args.scale}")
    order = [(e, s) for e in entries for s in e.seeds if not args.seeds or s in args.seeds]
    if args.seeds and (absent := sorted(set(args.seeds) - {s for e in entries for s in e.seeds})):
        have = "; ".join(f"{e.name}: {', '.join(map(str, e.seeds))}" for e in entries)
        raise UserError(f"--seeds: no run has seed {', '.join(map(str, absent))} (the seeds: {have})")
    return entries, order


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.data_dir is not None:
        check_data_dir(args.data_dir)
    settings = StudySettings(
        scale=args.scale,
        data_dir=args.data_dir if args.data_dir is not None else DEFAULT_DATA_DIR,
        synthetic=args.synthetic,
        synthetic_size=args.synthetic_size,
        out=args.out,
        figures=args.figures,
        weights=args.weights,
        no_figures=args.no_figures,
    )
    entries, order = runs_asked(args)
    scale = settings.scale
    table = [(e, s) for e in STUDIES[scale] for s in e.seeds]  # the tables cover every entry
    # shared with every other study of this scale: each write merges its rows into the file's, locked
    tables = ResultsTables.load(out=settings.out, scale=scale, table=table)
    for entry, seed in table:  # entries left out by --only: their finished runs, read back
        if entry not in entries and (summary := finished(entry, seed, settings)) is not None:
            tables.add(entry, seed, summary)

    if args.carry:
        for entry, seed in order:
            if finished(entry, seed, settings) is None:
                config = entry_config(entry, scale, seed)
                resume = find_resume("auto", run_root(entry, seed, settings), config, warn=lambda _m: None)
                carry(scale, f"{entry.name}-seed{seed}", resume, settings.weights)
        return 0
    for entry, seed in order:
        found = finished(entry, seed, settings) if args.report else run_entry(entry, seed, settings)
        if found is None:
            continue
        tables.add(entry, seed, found)
        row = tables.rows[(entry.name, seed)]
        ship_run(f"{scale}/{entry.name}-seed{seed}", found, row, settings.weights)
        if not settings.no_figures and found.layers is not None:
            render_figures(found, f"{scale}_{entry.name}-seed{seed}", settings)
        tables.write()  # the finished runs, and every run without a result yet
    unfinished: list[dict[str, Any]] = []  # the report's view of the runs still training
    if args.report:  # every run without a result: where it stands; the figures of those asked for
        unfinished.extend(report_unfinished(table, order, tables.rows, settings))
    tables.write(unfinished)
    if not settings.no_figures:
        scale_figures(settings, unfinished)
    print((settings.out / f"{scale}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
