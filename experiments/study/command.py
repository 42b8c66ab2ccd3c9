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

from argparse import Namespace
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.cli import (
    DEFAULT_DATA_DIR,
    ArgumentParser,
    UserError,
    check_data_dir,
    computing,
    output_folder,
    positive_int,
)
from experiments.study.entries import STUDIES, Entry
from sa_conv.training.presets import SCALES

if TYPE_CHECKING:
    from experiments.study.unfinished import UnfinishedRun

__all__ = ["build_parser", "main", "runs_asked"]

COMMITTED_RESULTS = Path("results")  # the study's tables in the checkout (it runs from the checkout's root)


def build_parser() -> ArgumentParser:
    """The study's command line."""
    from sa_conv.models.weights_folder import weights_dir

    parser = ArgumentParser(prog="python -m experiments.study", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="tiny", choices=SCALES)
    parser.add_argument(
        "--data-dir", type=Path, help=f"ImageFolder tree or CIFAR-10 root (default: {DEFAULT_DATA_DIR})"
    )
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="synthetic data (a smoke test of the study; its --out, and --weights unless given, elsewhere "
        "than the committed results and weights)",
    )
    parser.add_argument("--synthetic-size", type=positive_int, default=512)
    parser.add_argument("--out", type=output_folder, default=COMMITTED_RESULTS)
    parser.add_argument("--figures", type=output_folder, default=Path("figures"))
    parser.add_argument("--only", nargs="+", metavar="NAME", help="a subset of the study's entries")
    parser.add_argument("--seeds", nargs="+", type=int, metavar="K", help="only these seeds of each entry")
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument(
        "--weights",
        type=output_folder,
        help="where finished runs' weights ship and unfinished runs' checkpoints are carried "
        f"(default: {weights_dir()}; OUT/weights with --synthetic)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--carry",
        action="store_true",
        help="train nothing: copy every unfinished run's newest resumable checkpoint to WEIGHTS/unfinished/, "
        "from where a study on any machine resumes it",
    )
    mode.add_argument(
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
    """Train (or read back, or resume) the runs asked for; write the tables, the weights and the figures."""
    args = build_parser().parse_args(argv)
    if args.data_dir is not None:
        check_data_dir(args.data_dir)
    if args.synthetic and args.out.resolve() == COMMITTED_RESULTS.resolve():
        raise UserError("--synthetic: name an --out folder (synthetic rows never go in results/)")
    entries, order = runs_asked(args)
    computing()  # the arguments are checked: now the heavy imports
    from experiments.study.figures import render_figures, scale_figures
    from experiments.study.report import report_unfinished
    from experiments.study.runs import StudySettings, finished, newest_resume, run_entry
    from experiments.study.tables import ResultsTables
    from experiments.study.weights import carry, ship_run
    from sa_conv.models.weights_folder import weights_dir

    weights = args.weights or (args.out / "weights" if args.synthetic else weights_dir())
    settings = StudySettings(
        scale=args.scale,
        data_dir=args.data_dir if args.data_dir is not None else DEFAULT_DATA_DIR,
        synthetic=args.synthetic,
        synthetic_size=args.synthetic_size,
        out=args.out,
        figures=args.figures,
        weights=weights,
        no_figures=args.no_figures,
    )
    scale = settings.scale
    if args.carry:  # before any table is read: carrying needs only the runs' checkpoints
        for entry, seed in order:
            if finished(entry, seed, settings) is None:
                carry(scale, entry.run_name(seed), newest_resume(entry, seed, settings), settings.weights)
        return 0
    table = [(e, s) for e in STUDIES[scale] for s in e.seeds]  # the tables cover every entry
    # shared with every other study of this scale: each write merges its rows into the file's, locked
    tables = ResultsTables.load(out=settings.out, scale=scale, table=table, weights=settings.weights)
    for entry, seed in table:  # entries left out by --only: their finished runs, read back
        if entry not in entries and (summary := finished(entry, seed, settings)) is not None:
            tables.add(entry, seed, summary)

    for entry, seed in order:
        found = finished(entry, seed, settings) if args.report else run_entry(entry, seed, settings)
        if found is None:
            continue
        tables.add(entry, seed, found)
        tables.write()  # the row first: what follows cannot lose it
        ship_run(f"{scale}/{entry.run_name(seed)}", found, tables.rows[(entry.name, seed)], settings.weights)
        if not settings.no_figures and found.layers is not None:
            render_figures(found, f"{scale}_{entry.run_name(seed)}", settings)
        tables.write()  # with the weights shipped
    unfinished: list[UnfinishedRun] = []  # the report's view of the runs still training
    if args.report:  # every run without a result: where it stands; the figures of those asked for
        unfinished.extend(report_unfinished(table, order, tables.rows, settings))
    tables.write(unfinished)
    if not settings.no_figures:
        scale_figures(settings, unfinished)
    print((settings.out / f"{scale}.md").read_text())
    return 0
