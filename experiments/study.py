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
from collections.abc import Sequence
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
from sa_conv.data.datamodule import data_difference
from sa_conv.models.weights import weights_dir
from sa_conv.training.config import RunConfig, RunOptions, config_difference, flat_options
from sa_conv.training.evaluation import correct_on_test
from sa_conv.training.module import ImageClassifier
from sa_conv.training.resume import find_resume
from sa_conv.training.run import datamodule_for, train
from sa_conv.utils.files import save_png, write_json
from sa_conv.utils.safe_load import read_checkpoint


def run_root(entry: Entry, seed: int, args: Any) -> Path:
    """The folder of one entry and seed's runs."""
    return args.out / "runs" / args.scale / f"{entry.name}-seed{seed}"


def finished(entry: Entry, seed: int, args: Any) -> dict[str, Any] | None:
    """The metrics of the newest finished run of one entry and seed with the study's config, if any."""
    config = entry_config(entry, args.scale, seed).to_dict()
    root = run_root(entry, seed, args)
    done = sorted(root.glob(f"{entry.model}/version_*/metrics.json"), key=lambda p: int(p.parent.name[8:]))
    for path in reversed(done):
        metrics = json.loads(path.read_text())
        if not config_difference(metrics["config"], config):
            print(f"== {entry.name} seed {seed}: finished, {path.parent}", flush=True)
            return with_test_correct(metrics, path, args)
    return None


def with_test_correct(metrics: dict[str, Any], path: Path, args: Any) -> dict[str, Any]:
    """The run's metrics with its per-image test results (computed once from its best checkpoint, and
    kept in its metrics.json, for runs written before they recorded them)."""
    best = metrics.get("best_checkpoint") or str(Path(metrics["run_dir"]) / "checkpoints" / "last.ckpt")
    if "test_correct" in metrics or not Path(best).is_file():
        return metrics
    module = ImageClassifier.from_checkpoint(best)
    config = RunConfig.from_dict(metrics["config"])
    data = datamodule_for(
        config, data_dir=args.data_dir, synthetic=args.synthetic, synthetic_size=args.synthetic_size
    )
    trained_on = (metrics.get("data") or {}).get("fingerprint")
    if trained_on is not None and data_difference(trained_on, data.fingerprint()):
        print(f"warning: {path.parent} trained on other data: no per-image results from it", file=sys.stderr)
        return metrics
    metrics["test_correct"] = correct_on_test(module.backbone, data, metrics.get("precision", "32-true"))
    write_json(path, metrics)
    return metrics


def run_entry(entry: Entry, seed: int, args: Any) -> dict[str, Any]:
    """Train (or resume, or read back) one run; returns its metrics."""
    metrics = finished(entry, seed, args)
    if metrics is not None:
        return metrics
    config = entry_config(entry, args.scale, seed)
    root = run_root(entry, seed, args)
    resume = find_resume("auto", root, config, warn=lambda m: print(m, file=sys.stderr))
    if resume is None:  # a run another machine began and carried here
        resume = carried_resume(args.scale, f"{entry.name}-seed{seed}", root, config, args.weights)
    print(f"== {entry.name} seed {seed}: {'resuming' if resume else 'training'}", flush=True)
    options = RunOptions(output_dir=root, progress="lines", figures_every=1000, snapshot_minutes=5)
    data = datamodule_for(
        config, data_dir=args.data_dir, synthetic=args.synthetic, synthetic_size=args.synthetic_size
    )

    def newest() -> Path | None:
        found = find_resume("auto", root, config, warn=lambda _message: None)
        return found.path if found is not None else None

    with MemoryUse(
        batch_size=config.data.batch_size,
        what=f"training {entry.name} seed {seed}",
        lower="lower it in a run of its own (a study trains every model at its preset's batch): "
        + alone_command(entry, seed, args),
        resume="run the same command again (the study resumes from {checkpoint})",
        checkpoint=newest,
    ):
        return train(config, datamodule=data, options=options, resume=resume)


def alone_command(entry: Entry, seed: int, args: Any) -> str:
    """The ``experiments.run`` command that trains one run of the study alone, at batch size ``{n}``."""
    words = ["python -m experiments.run", entry.model, "--scale", args.scale, "--seed", str(seed)]
    for name, value in flat_options(entry.overrides).items():
        if isinstance(value, bool):
            words.append(flag(name) if value else f"--no-{flag(name)[2:]}")
        elif name != "batch_size":
            shown = " ".join(map(str, value)) if isinstance(value, tuple | list) else value
            words += [flag(name), "none" if shown is None else str(shown)]
    words += ["--synthetic"] if args.synthetic else ["--data-dir", str(args.data_dir)]
    return " ".join([*words, "--batch-size {n}"])


def render_figures(metrics: dict[str, Any], prefix: str, args: Any) -> None:
    """Every attention figure of a finished run, from its last checkpoint and its own locality history."""
    done = metrics["epochs_completed"] == metrics["config"]["epochs"]  # its last step ends the schedule
    draw_figures(
        read_checkpoint(Path(metrics["run_dir"]) / "checkpoints" / "last.ckpt"),
        metrics["config"],
        prefix,
        args,
        history=metrics.get("locality_history"),
        total_steps=metrics["global_steps"] if done else None,
    )


def draw_figures(
    ckpt: dict[str, Any],
    config: dict[str, Any],
    prefix: str,
    args: Any,
    *,
    history: list[dict[str, Any]] | None,
    total_steps: int | None = None,
    title: str | None = None,
) -> None:
    """The attention figures of one (loaded) checkpoint, written as ``<figures>/<prefix>_<figure>.png``."""
    backbone = ImageClassifier.from_checkpoint(ckpt).backbone.eval()
    data = datamodule_for(
        RunConfig.from_dict(config),
        data_dir=args.data_dir,
        synthetic=args.synthetic,
        synthetic_size=args.synthetic_size,
    )
    images, _ = data.evaluation_images(100)
    args.figures.mkdir(parents=True, exist_ok=True)
    lr = lr_schedule_of(ckpt, total_steps)
    for tag, value in figures_of(backbone, images, history=history, lr=lr, name=title or prefix):
        if not isinstance(value, float):
            save_png(value, args.figures / f"{prefix}_{tag.split('/', 1)[1]}.png")


def in_progress(entry: Entry, seed: int, args: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """An unfinished run at its newest checkpoint (epochs done, its last per-epoch accuracy, the locality
    of its last snapshot) and that checkpoint, or None when it has none: a state of training, not a result."""
    config = entry_config(entry, args.scale, seed)
    resume = find_resume(
        "auto", run_root(entry, seed, args), config, warn=lambda m: print(m, file=sys.stderr)
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
    args: Any,
) -> list[dict[str, Any]]:
    """Where every run of the study without a result stands, drawing the figures of those in ``order``
    (a run with a result, committed or read back, is never drawn over)."""
    states = []
    for entry, seed in table:
        if (entry.name, seed) in results or (found := in_progress(entry, seed, args)) is None:
            continue
        state, ckpt = found
        states.append(state)
        if not args.no_figures and state["layers"] and (entry, seed) in order:
            prefix = f"{args.scale}_{entry.name}-seed{seed}"
            at = f"epoch {state['epochs_completed']} of {state['epochs']}, unfinished"
            history = state["locality_history"]
            draw_figures(ckpt, state["config"], prefix, args, history=history, title=f"{prefix} ({at})")
    return states


# the studies drawn together in the scale figures: a scale's runs and, beside them, its relatives'
RELATED_SCALES = {"small": ("small", "small6"), "small6": ("small6", "small")}


def scale_figures(args: Any, unfinished: Sequence[dict[str, Any]] = ()) -> list[Path]:
    """The figures across a scale's runs (and its related scales'), from the committed tables: locality
    layer by layer of every attention run, and the learning curves of every run that recorded them; the
    scale's unfinished runs beside them, labelled with the epoch they stand at."""
    rows = []
    for scale in RELATED_SCALES.get(args.scale, (args.scale,)):
        path = args.out / f"{scale}.json"
        if path.is_file():
            rows += [(scale, row) for row in json.loads(path.read_text())]
    written = []

    def label(scale: str, r: dict[str, Any]) -> str:
        depth = f", {len(r['layers'])} layers" if r["layers"] else ""  # attention layers; none in a ResNet
        return f"{r['name']} s{r['seed']} ({scale}{depth})"

    attention = [{"label": label(sc, r), "layers": r["layers"]} for sc, r in rows if r.get("layers")]
    for u in (u for u in unfinished if u["layers"]):
        at = f"epoch {u['epochs_completed']}/{u['epochs']}, unfinished"
        attention.append({"label": f"{u['name']} s{u['seed']} ({args.scale}, {at})", "layers": u["layers"]})
    if attention:
        path = args.figures / f"{args.scale}_locality_by_layer.png"
        save_png(
            locality_by_layer(attention, title=f"locality layer by layer, {args.scale} and beside it"), path
        )
        written.append(path)
    curves = [
        {"label": label(sc, r), "epochs": r["epochs_history"]} for sc, r in rows if r.get("epochs_history")
    ]
    if curves:
        path = args.figures / f"{args.scale}_learning_curves.png"
        save_png(
            learning_curves(curves, title=f"validation accuracy per epoch, {args.scale} and beside it"), path
        )
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    if args.data_dir is not None:
        check_data_dir(args.data_dir)
    else:
        args.data_dir = DEFAULT_DATA_DIR
    entries = [e for e in STUDIES[args.scale] if not args.only or e.name in args.only]
    if args.only and len(entries) != len(set(args.only)):
        unknown = sorted(set(args.only) - {e.name for e in STUDIES[args.scale]})
        raise UserError(f"--only: no entry {', '.join(unknown)} at scale {args.scale}")
    order = [(e, s) for e in entries for s in e.seeds if not args.seeds or s in args.seeds]
    if args.seeds and (absent := sorted(set(args.seeds) - {s for e in entries for s in e.seeds})):
        have = "; ".join(f"{e.name}: {', '.join(map(str, e.seeds))}" for e in entries)
        raise UserError(f"--seeds: no run has seed {', '.join(map(str, absent))} (the seeds: {have})")
    table = [(e, s) for e in STUDIES[args.scale] for s in e.seeds]  # the tables cover every entry
    # shared with every other study of this scale: each write merges its rows into the file's, locked
    tables = ResultsTables.load(out=args.out, scale=args.scale, table=table)
    for entry, seed in table:  # entries left out by --only: their finished runs, read back
        if entry not in entries and (metrics := finished(entry, seed, args)) is not None:
            tables.add(entry, seed, metrics)

    if args.carry:
        for entry, seed in order:
            if finished(entry, seed, args) is None:
                config = entry_config(entry, args.scale, seed)
                resume = find_resume("auto", run_root(entry, seed, args), config, warn=lambda _m: None)
                carry(args.scale, f"{entry.name}-seed{seed}", resume, args.weights)
        return 0
    for entry, seed in order:
        metrics = finished(entry, seed, args) if args.report else run_entry(entry, seed, args)
        if metrics is None:
            continue
        tables.add(entry, seed, metrics)
        row = tables.rows[(entry.name, seed)]
        ship_run(f"{args.scale}/{entry.name}-seed{seed}", metrics, row, args.weights)
        if not args.no_figures and "layers" in metrics:
            render_figures(metrics, f"{args.scale}_{entry.name}-seed{seed}", args)
        tables.write()  # the finished runs, and every run without a result yet
    unfinished: list[dict[str, Any]] = []  # the report's view of the runs still training
    if args.report:  # every run without a result: where it stands; the figures of those asked for
        unfinished.extend(report_unfinished(table, order, tables.rows, args))
    tables.write(unfinished)
    if not args.no_figures:
        scale_figures(args, unfinished)
    print((args.out / f"{args.scale}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
