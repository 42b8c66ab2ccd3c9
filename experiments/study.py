"""The study: every model on the same CIFAR-10 data and budget, evaluated, with its attention figures.

    python -m experiments.study [--scale tiny|small|paper] [--data-dir DIR] [--out results/]
                                [--figures figures/] [--only NAME ...]

Writes ``<out>/<scale>.md`` and ``<out>/<scale>.json`` after every run; runs live under
``<out>/runs/<scale>/<name>-seed<k>/``. A finished run (its ``metrics.json`` exists) is read back, an
unfinished one resumes from its newest checkpoint, so a killed study continues where it was. A row of
the committed ``<scale>.json`` whose run is not here (another machine's, an earlier clone's) is kept,
marked as not re-checked: the tables never lose results they cannot rebuild.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.cli import DEFAULT_DATA_DIR, ArgumentParser, UserError, check_data_dir, main_guard
from experiments.presets import SCALES, preset
from sa_conv.analysis import figures_of, layer_summary, lr_schedule_of
from sa_conv.checkpointing import read_checkpoint
from sa_conv.curves import learning_curves, locality_by_layer
from sa_conv.files import save_png, write_json, write_text
from sa_conv.flops import analytic_flops
from sa_conv.lit import ImageClassifier
from sa_conv.machine import hardware
from sa_conv.resume import find_resume
from sa_conv.run_config import RunConfig, RunOptions, config_difference
from sa_conv.training import datamodule_for, train


@dataclass(frozen=True)
class Entry:
    """One model of a study: its name in the table, the model, overrides of the scale's preset, seeds."""

    name: str
    model: str
    seeds: tuple[int, ...] = (0,)
    overrides: dict[str, Any] = field(default_factory=dict)
    note: str = ""


STUDIES: dict[str, tuple[Entry, ...]] = {
    "tiny": (
        Entry("resnet18", "resnet18", (0, 1)),
        Entry("quadratic", "quadratic", (0, 1)),
        Entry("quadratic-16heads", "quadratic", (0,), {"model_config": {"heads": 16}}),
        Entry("gaussian", "gaussian", (0, 1)),
        Entry("learned", "learned", (0, 1)),
        Entry("learned-content", "learned-content", (0,)),
        Entry("composite", "composite", (0,)),
        Entry("mixed", "mixed", (0,)),
    ),
    "small": (
        Entry("quadratic", "quadratic", (0, 1)),
        Entry("learned", "learned", (0, 1)),
        Entry("resnet18", "resnet18", (0,)),
        Entry("gaussian", "gaussian", (0,)),
        # content attention is ~6x slower per image: the largest budget that fits in about two hours
        Entry("learned-content", "learned-content", (0,), {"epochs": 6}, note="6 epochs (budget), not 15"),
    ),
    "small6": (
        Entry("quadratic", "quadratic", (0, 1)),
        Entry("quadratic-16heads", "quadratic", (0, 1), {"model_config": {"heads": 16}}),
        Entry("learned", "learned", (0,)),
    ),
    "paper": tuple(Entry(m, m) for m in ("resnet18", "quadratic", "gaussian", "learned", "learned-content")),
}
PAPER_TABLE = {  # the paper's Table 1: accuracy (%), parameters (M)
    "resnet18": (93.8, 11.2),
    "quadratic": (93.8, 12.1),
    "learned": (91.8, 12.3),
    "learned-content": (87.1, 29.5),
}


def entry_config(entry: Entry, scale: str, seed: int) -> RunConfig:
    """The run config of one entry and seed."""
    return preset(entry.model, scale).replace(seed=seed, **entry.overrides)


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
            return metrics
    return None


def run_entry(entry: Entry, seed: int, args: Any) -> dict[str, Any]:
    """Train (or resume, or read back) one run; returns its metrics."""
    metrics = finished(entry, seed, args)
    if metrics is not None:
        return metrics
    config = entry_config(entry, args.scale, seed)
    root = run_root(entry, seed, args)
    resume = find_resume("auto", root, config, warn=lambda m: print(m, file=sys.stderr))
    print(f"== {entry.name} seed {seed}: {'resuming' if resume else 'training'}", flush=True)
    options = RunOptions(output_dir=root, progress="lines", figures_every=1000, snapshot_minutes=5)
    data = datamodule_for(
        config, data_dir=args.data_dir, synthetic=args.synthetic, synthetic_size=args.synthetic_size
    )
    return train(config, datamodule=data, options=options, resume=resume)


def render_figures(metrics: dict[str, Any], prefix: str, args: Any) -> None:
    """Every attention figure of a finished run, from its last checkpoint and its own locality history."""
    ckpt = read_checkpoint(Path(metrics["run_dir"]) / "checkpoints" / "last.ckpt")
    backbone = ImageClassifier.from_checkpoint(ckpt).backbone.eval()
    data = datamodule_for(
        RunConfig.from_dict(metrics["config"]),
        data_dir=args.data_dir,
        synthetic=args.synthetic,
        synthetic_size=args.synthetic_size,
    )
    images, _ = data.evaluation_images(100)
    args.figures.mkdir(parents=True, exist_ok=True)
    history, lr = metrics.get("locality_history"), lr_schedule_of(ckpt)
    for tag, value in figures_of(backbone, images, history=history, lr=lr, name=prefix):
        if not isinstance(value, float):
            save_png(value, args.figures / f"{prefix}_{tag.split('/', 1)[1]}.png")


# the studies drawn together in the scale figures: a scale's runs and, beside them, its relatives'
RELATED_SCALES = {"small": ("small", "small6"), "small6": ("small6", "small")}


def scale_figures(args: Any) -> list[Path]:
    """The figures across a scale's runs (and its related scales'), from the committed tables: locality
    layer by layer of every attention run, and the learning curves of every run that recorded them."""
    rows = []
    for scale in RELATED_SCALES.get(args.scale, (args.scale,)):
        path = args.out / f"{scale}.json"
        if path.is_file():
            rows += [(scale, row) for row in json.loads(path.read_text())]
    written = []

    def label(scale: str, r: dict[str, Any]) -> str:
        return f"{r['name']} s{r['seed']} ({scale}, {len(r['layers']) or '-'} layers)"

    attention = [{"label": label(sc, r), "layers": r["layers"]} for sc, r in rows if r.get("layers")]
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


def standard_error(accuracy: float, n: int) -> float:
    """Binomial standard error of an accuracy measured on ``n`` images."""
    return math.sqrt(max(accuracy * (1 - accuracy), 0.0) / max(n, 1))


def flops_of(config: RunConfig) -> dict[str, int]:
    """GFLOP columns of a run: its training step (forward + backward, the trained path) and evaluation."""
    family = config.model_config
    return {
        "train_flops_per_image": analytic_flops(config.model, family, training=True),
        "eval_flops_per_image": analytic_flops(config.model, family, training=False, passes="forward"),
    }


def locality_curve(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's locality record, per recorded step and layer (``layer_summary`` of each snapshot)."""
    return [{"step": s["step"], "layers": layer_summary(s)} for s in history]


def row_of(entry: Entry, seed: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """One row of the study's JSON."""
    config = RunConfig.from_dict(metrics["config"])
    history = metrics.get("locality_history") or []
    return {
        "name": entry.name,
        "model": entry.model,
        "seed": seed,
        "note": entry.note,
        "protocol": metrics["protocol"],
        "epochs": metrics["config"]["epochs"],
        "layers_count": getattr(config.model_config, "layers", None),
        "heads": getattr(config.model_config, "heads", None),
        "precision": metrics.get("precision", "32-true"),
        "params": metrics["params"],
        **flops_of(config),
        "test_acc": metrics["test_acc"],
        "test_acc_stderr": standard_error(metrics["test_acc"], metrics["n_test_images"]),
        "n_test_images": metrics["n_test_images"],
        "best_val_acc": metrics.get("best_val_acc"),
        # the training steps' time over the whole run, resumes included (not the evaluation)
        "train_time_s": metrics.get("train_step_seconds")
        or metrics["n_train_images"] * metrics["epochs_completed"] / max(metrics["train_images_per_s"], 1e-9),
        "train_images_per_s": metrics["train_images_per_s"],
        # recomputed from the run's own record, so that a summary added later applies to finished runs
        "layers": layer_summary(history[-1]) if history else [],
        "locality_history": locality_curve(history),
        "epochs_history": metrics.get("history", []),
        "run_dir": metrics["run_dir"],
        "rechecked": True,
    }


def committed_rows(path: Path, table: Sequence[tuple[Entry, int]], scale: str) -> dict[tuple[str, int], Any]:
    """The rows of a committed results JSON for the study's entries, marked as not re-checked here, with
    their FLOP columns recomputed from the entry's config (the committed count may predate its fix)."""
    if not path.is_file():
        return {}
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        raise UserError(f"{path} is not a readable results JSON; move it away to rebuild it") from None
    entries = {(e.name, s): e for e, s in table}
    kept = {}
    for row in rows if isinstance(rows, list) else []:
        key = (row.get("name"), row.get("seed"))
        if key in entries:
            config = entry_config(entries[key], scale, key[1])
            row = {k: v for k, v in row.items() if k != "flops_per_image"}
            kept[key] = {**row, **flops_of(config), "rechecked": False}
    return kept


def markdown(rows: list[dict[str, Any]], args: Any, missing: Sequence[str] = ()) -> str:
    """The results table, the runs not finished, and the per-layer locality table."""
    base = preset("quadratic", args.scale)
    command = f"python -m experiments.study --scale {args.scale}" + (
        f" --data-dir {args.data_dir}" if args.data_dir else ""
    )
    hw = hardware()
    sa, data = base.model_config, base.data
    budget = (
        f"Budget, the same for every model unless noted: {base.epochs} epochs, batch {data.batch_size}, "
        f"protocol {data.protocol} ({data.val_size} validation images held out), "
        f"{data.train_subset or 'all'} training images; SA models {sa.layers} layers of width "
        f"{sa.hidden}, {sa.heads} heads. Accuracy on the test split with its binomial standard error."
    )
    machine = (
        f"Hardware: {hw['cpu']} ({hw['cpu_count']} cores), {hw.get('gpu') or 'no GPU'}; "
        "images/s as measured during each run."
    )
    lines = [
        f"# Study at `{args.scale}` scale",
        "",
        f"Command: `{command}`",
        "",
        budget,
        machine,
        "",
        "GFLOP per image: the training step (forward + backward, on the path training takes) and "
        "evaluation (forward). Rows marked * come from the committed table: their runs are not here to "
        "re-check.",
        "",
        "| model | seed | precision | params | GFLOP train step / eval | steps (min) | images/s | test acc "
        "| paper acc (params) |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        paper = PAPER_TABLE.get(r["name"])
        note = f" ({r['note']})" if r["note"] else ""
        mark = "" if r.get("rechecked", True) else "*"
        lines.append(
            f"| {r['name']}{note}{mark} | {r['seed']} | {r.get('precision', '32-true')} | "
            f"{r['params'] / 1e6:.3f}M | "
            f"{r['train_flops_per_image'] / 1e9:.3f} / {r['eval_flops_per_image'] / 1e9:.3f} | "
            f"{r['train_time_s'] / 60:.0f} | {r['train_images_per_s']:.0f} | "
            f"{100 * r['test_acc']:.1f} +- {100 * r['test_acc_stderr']:.1f}% | "
            f"{f'{paper[0]}% ({paper[1]}M)' if paper else '-'} |"
        )
    if missing:
        lines += ["", "Not finished (no result yet): " + ", ".join(missing) + "."]
    lines += [
        "",
        "Locality per layer at the end of training (interior queries): mean attention distance in token "
        "pixels, sharp heads (>= 0.5 of their mass on one pixel), median alpha of Gaussian heads:",
        "",
    ]
    for r in rows:
        cells = []
        for i, layer in enumerate(r["layers"]):
            alpha = f", alpha {layer['median_alpha']:.2f}" if "median_alpha" in layer else ""
            distinct = (
                f" at {layer['sharp_distinct_taps']} distinct taps" if "sharp_distinct_taps" in layer else ""
            )
            sharp = f"{layer['sharp_heads']}/{layer['heads']} sharp{distinct}"
            cells.append(f"layer {i + 1}: {layer['mean_distance']:.2f} px, {sharp}{alpha}")
        if cells:
            lines.append(f"- {r['name']} seed {r['seed']}: " + "; ".join(cells))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.study", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="tiny", choices=SCALES)
    parser.add_argument(
        "--data-dir", type=Path, help=f"ImageFolder tree or CIFAR-10 root (default: {DEFAULT_DATA_DIR})"
    )
    parser.add_argument("--synthetic", action="store_true", help="synthetic data (a smoke test of the study)")
    parser.add_argument("--synthetic-size", type=int, default=512)
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--figures", type=Path, default=Path("figures"))
    parser.add_argument("--only", nargs="+", metavar="NAME", help="a subset of the study's entries")
    parser.add_argument("--seeds", nargs="+", type=int, metavar="K", help="only these seeds of each entry")
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument(
        "--report", action="store_true", help="tables and figures of the finished runs; train nothing"
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
    table = [(e, s) for e in STUDIES[args.scale] for s in e.seeds]  # the tables cover every entry
    results = committed_rows(args.out / f"{args.scale}.json", table, args.scale)
    for entry, seed in table:  # entries left out by --only: their finished runs, read back
        if entry not in entries and (metrics := finished(entry, seed, args)) is not None:
            results[(entry.name, seed)] = row_of(entry, seed, metrics)

    def label(entry: Entry, seed: int) -> str:
        return f"{entry.name} seed {seed}" + (f" ({entry.note})" if entry.note else "")

    def write() -> None:  # the finished runs, and every run without a result yet
        rows = [results[(e.name, s)] for e, s in table if (e.name, s) in results]
        missing = [label(e, s) for e, s in table if (e.name, s) not in results]
        write_json(args.out / f"{args.scale}.json", rows)
        write_text(args.out / f"{args.scale}.md", markdown(rows, args, missing))

    for entry, seed in order:
        metrics = finished(entry, seed, args) if args.report else run_entry(entry, seed, args)
        if metrics is None:
            continue
        results[(entry.name, seed)] = row_of(entry, seed, metrics)
        if not args.no_figures and "layers" in metrics:
            render_figures(metrics, f"{args.scale}_{entry.name}-seed{seed}", args)
        write()
    write()
    if not args.no_figures:
        scale_figures(args)
    print((args.out / f"{args.scale}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
