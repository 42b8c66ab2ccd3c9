"""The study: every model on the same CIFAR-10 data and budget, evaluated, with its attention figures.

    python -m experiments.study [--scale tiny] [--data-dir DIR] [--out results/] [--figures figures/]

Writes ``<out>/<scale>.md`` and ``<out>/<scale>.json``; runs live under ``<out>/runs/<scale>/``. A model
whose run finished (its ``metrics.json`` exists) is skipped on a re-run, so a killed study resumes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from experiments import figures, run
from experiments.cli import (
    ArgumentParser,
    UserError,
    hardware,
    main_guard,
    write_json_atomic,
)
from experiments.presets import SCALES, preset

# (name in the table, model, extra run options)
STUDY: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("resnet18", "resnet18", ()),
    ("quadratic", "quadratic", ()),
    ("quadratic-16heads", "quadratic", ("--heads", "16")),
    ("gaussian", "gaussian", ()),
    ("learned", "learned", ()),
    ("learned-content", "learned-content", ()),
    ("composite", "composite", ()),
    ("mixed", "mixed", ()),
)
PAPER_TABLE = {
    "resnet18": (93.8, 11.2),
    "quadratic": (93.8, 12.1),
    "learned": (91.8, 12.3),
    "learned-content": (87.1, 29.5),
}


def finished_run(root: Path) -> Path | None:
    """The newest finished run (with metrics.json) under ``root``."""
    done = sorted(root.glob("*/version_*/metrics.json"), key=lambda p: int(p.parent.name.split("_")[1]))
    return done[-1] if done else None


def study_one(name: str, model: str, extra: tuple[str, ...], args: Any) -> dict[str, Any]:
    """Train (unless finished), render figures, and collect one row of the table."""
    root = args.out / "runs" / args.scale / name
    metrics_path = finished_run(root)
    if metrics_path is None:
        print(f"== {name}: training", flush=True)
        argv = [model, "--scale", args.scale, "--output-dir", str(root), "--seed", str(args.seed), *extra]
        argv += ["--data-dir", str(args.data_dir)] if args.data_dir else []
        argv += ["--synthetic"] if args.synthetic else []
        argv += ["--epochs", str(args.epochs)] if args.epochs else []
        argv += ["--figures-every", "1000"]  # figures at the end of training only
        if main_guard(run.main)(argv) != 0:
            raise UserError(f"the {name} run failed; fix it and re-run the study (finished models are kept)")
        metrics_path = finished_run(root)
    else:
        print(f"== {name}: finished run found at {metrics_path.parent}, skipped", flush=True)
    metrics = json.loads(metrics_path.read_text())
    row: dict[str, Any] = {
        "name": name,
        "model": model,
        "params": metrics["params"],
        "flops_per_image": metrics["flops_per_image"],
        "train_time_s": metrics["wall_time_s"],
        "train_images_per_s": metrics["train_images_per_s"],
        "test_acc": metrics["test_acc"],
        "best_val_acc": metrics["best_val_acc"],
        "n_test_images": metrics["n_test_images"],
        "epochs": metrics["epochs_completed"],
        "run_dir": str(metrics_path.parent),
    }
    if model != "resnet18" and not args.no_figures:
        prefix = f"{args.scale}_{name}"
        argv = [metrics["best_checkpoint"], "--out", str(args.figures), "--name", prefix, "--images", "100"]
        argv += ["--data-dir", str(args.data_dir)] if args.data_dir else []
        argv += ["--synthetic"] if args.synthetic else []
        if main_guard(figures.main)(argv) != 0:
            raise UserError(f"rendering the figures of {name} failed")
        scalars = json.loads((args.figures / f"{prefix}_locality.json").read_text())
        layers = sorted({int(k.split("/")[1][5:]) for k in scalars})
        row["mean_distance"] = [scalars[f"locality/layer{i}/mean_distance"] for i in layers]
        row["localized_fraction"] = [scalars[f"locality/layer{i}/localized_fraction"] for i in layers]
    return row


def markdown(rows: list[dict[str, Any]], args: Any, config: Any) -> str:
    """The results table and the per-layer locality table."""
    lines = [
        f"# Study at `{args.scale}` scale",
        "",
        f"Command: `python -m experiments.study --scale {args.scale}"
        + (f" --data-dir {args.data_dir}" if args.data_dir else "")
        + (f" --epochs {args.epochs}" if args.epochs else "")
        + "`",
        "",
        f"Data and budget, the same for every model: {config}.",
        f"Hardware: {hardware()['cpu']} ({hardware()['cpu_count']} cores), "
        + (hardware().get("gpu") or "no GPU")
        + ".",
        "",
        "| model | params | GFLOPs/image | train time (s) | train images/s | test acc | paper acc (params) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        paper = PAPER_TABLE.get(r["name"])
        paper_text = f"{paper[0]}% ({paper[1]}M)" if paper else "-"
        lines.append(
            f"| {r['name']} | {r['params'] / 1e6:.3f}M | {r['flops_per_image'] / 1e9:.3f} | "
            f"{r['train_time_s']:.0f} | {r['train_images_per_s']:.0f} | {100 * r['test_acc']:.1f}% | "
            f"{paper_text} |"
        )
    lines += [
        "",
        "Locality per layer (mean attention distance in token pixels; fraction of localized heads, "
        "spread <= 1 pixel around their centroid):",
        "",
    ]
    for r in rows:
        if "mean_distance" in r:
            dist = ", ".join(f"{d:.2f}" for d in r["mean_distance"])
            loc = ", ".join(f"{f:.2f}" for f in r["localized_fraction"])
            lines.append(f"- {r['name']}: distance [{dist}]; localized [{loc}]")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.study", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="tiny", choices=SCALES)
    parser.add_argument("--data-dir", type=Path, help="ImageFolder tree or CIFAR-10 root (default: download)")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--figures", type=Path, default=Path("figures"))
    parser.add_argument("--epochs", type=int, help="override the scale's epochs for every model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", nargs="+", choices=[n for n, _, _ in STUDY], help="a subset of the study")
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument("--synthetic", action="store_true", help="synthetic data (a smoke test of the study)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_args(argv)
    if args.data_dir is not None and not args.data_dir.is_dir():
        raise UserError(f"--data-dir {args.data_dir} does not exist")
    base = preset("quadratic", args.scale)
    config = (
        f"{args.epochs or base.epochs} epochs, batch {base.batch_size}, "
        f"{base.train_subset or 'all'} training images, {base.val_size} validation images, seed {args.seed}"
    )
    rows = [study_one(n, m, e, args) for n, m, e in STUDY if not args.models or n in args.models]
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        args.out / f"{args.scale}.json",
        {"scale": args.scale, "config": config, "hardware": hardware(), "rows": rows},
    )
    (args.out / f"{args.scale}.md").write_text(markdown(rows, args, config))
    print((args.out / f"{args.scale}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
