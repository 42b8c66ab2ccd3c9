"""The study's tables: one row per run (its accuracy, FLOPs, locality, history, per-image test results),
the committed rows it keeps, the Markdown table and the paired comparisons between models, and the
results files every study process of a scale shares (``ResultsTables``)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from statistics import mean

from experiments.cli import UserError
from experiments.study.entries import PAPER_TABLE, Entry, entry_config
from experiments.study.milestones import milestone_lines
from experiments.study.reruns import rerun_lines, with_replaced
from experiments.study.row import ROW_KEYS, LocalityPoint, StudyRow, rows_json
from experiments.study.unfinished import UnfinishedRun
from sa_conv.analysis.dynamics import sharpening
from sa_conv.analysis.flops import FlopCounts, analytic_flops
from sa_conv.analysis.maps import initial_of, layer_summary
from sa_conv.analysis.snapshots import LayerSummary, LocalitySnapshot
from sa_conv.analysis.statistics import accuracy_stderr, compare, per_image
from sa_conv.models import SAConfig
from sa_conv.models.weights import ManifestEntry, entry_file, manifest
from sa_conv.training.config import RunConfig, config_difference
from sa_conv.training.presets import preset
from sa_conv.training.summary import RunSummary
from sa_conv.training.trained import load_trained
from sa_conv.utils.files import lock_file_of, locked, merge_rows, write_json, write_text
from sa_conv.utils.json_values import is_json, json_kind
from sa_conv.utils.precisions import FLOAT32
from sa_conv.utils.quote import quoted
from sa_conv.utils.safe_load import CheckpointError
from sa_conv.utils.untrusted import UntrustedInputError, load_json, read_bounded

__all__ = [
    "ResultsTables",
    "committed_rows",
    "comparisons",
    "flops_of",
    "markdown",
    "row_of",
    "run_label",
    "seed_mean_lines",
]

Key = tuple[str, int]  # a run of the study: its entry's name and its seed


def flops_of(config: RunConfig) -> FlopCounts:
    """FLOP columns of a run: its training step (forward + backward, the trained path) and evaluation."""
    family = config.resolved_model_config
    return FlopCounts(
        train=analytic_flops(config.model, family, training=True),
        eval=analytic_flops(config.model, family, training=False, passes="forward"),
    )


def locality_curve(history: Sequence[LocalitySnapshot]) -> tuple[LocalityPoint, ...]:
    """The run's locality record, per recorded step and layer (``layer_summary`` of each snapshot)."""
    start = initial_of(history)
    return tuple(LocalityPoint(s.step, tuple(layer_summary(s, start))) for s in history)


def final_layers(history: Sequence[LocalitySnapshot]) -> tuple[LayerSummary, ...]:
    """The locality of each layer at the end of a record (none without one)."""
    return tuple(layer_summary(history[-1], initial_of(history))) if history else ()


def sharpening_events(history: Sequence[LocalitySnapshot]) -> tuple[dict[str, object], ...]:
    """The heads that sharpened over a record, as a row holds them."""
    return tuple(asdict(event) for event in sharpening(history))


def row_of(entry: Entry, seed: int, summary: RunSummary) -> StudyRow:
    """One row of the study's JSON."""
    config = RunConfig.from_dict(summary.config)
    history = summary.locality_history or []
    family = config.model_config if isinstance(config.model_config, SAConfig) else None
    images_per_s = summary.train_images_per_s
    flops = flops_of(config)
    return StudyRow(
        name=entry.name,
        model=entry.model,
        seed=seed,
        note=entry.note,
        protocol=summary.protocol,
        epochs=config.epochs,
        layers_count=family.layers if family is not None else None,
        heads=family.heads if family is not None else None,
        precision=summary.precision,
        bf16_products=summary.bf16_products,
        params=summary.params,
        train_flops_per_image=flops.train,
        eval_flops_per_image=flops.eval,
        test_acc=summary.test_acc,
        test_acc_stderr=accuracy_stderr(summary.test_acc, summary.n_test_images),
        n_test_images=summary.n_test_images,
        best_val_acc=summary.best_val_acc,
        # the training steps' time over the whole run, resumes included (not the evaluation)
        train_time_s=summary.train_step_seconds
        or (summary.n_train_images or 0) * summary.epochs_completed / max(images_per_s, 1e-9),
        train_images_per_s=images_per_s,
        # recomputed from the run's own record, so that a summary added later applies to finished runs
        layers=final_layers(history),
        locality_history=locality_curve(history),
        sharpening=sharpening_events(history),
        epochs_history=tuple(summary.history),
        run_dir=summary.run_dir,
        hardware=_machine(summary.hardware or {}),
        test_correct=summary.test_correct,
        absent=frozenset({"replaced"}),  # written once it replaces a row (``study.reruns``)
    )


def _machine(hw: Mapping[str, object]) -> str:
    """The machine of a run, in words (CPU, cores, GPU)."""
    return f"{hw.get('cpu', '?')} ({hw.get('cpu_count', '?')} cores), {hw.get('gpu') or 'no GPU'}"


def file_rows(path: Path, table: Sequence[tuple[Entry, int]]) -> dict[Key, StudyRow]:
    """The rows of a results JSON, as the file has them, by (name, seed): every row one of the study's
    runs, once. A file the study could not write back whole (not a list of rows; a row that is not one,
    of no run of the study, twice, or lacking a column) is refused in one ``UserError`` that names it;
    the file is left as it is."""
    if not path.is_file():
        return {}
    try:
        rows = load_json(read_bounded(path, str(path)), str(path))
    except UntrustedInputError as err:
        raise UserError(f"{err}; {_LEFT}") from None
    except OSError as err:
        raise UserError(f"{path} is not a readable results JSON ({err.strerror}); {_LEFT}") from None
    if not isinstance(rows, list):
        raise UserError(f"{path} must be a list of rows, not {json_kind(rows)}; {_LEFT}")
    keys = {(e.name, s) for e, s in table}
    found: dict[Key, StudyRow] = {}
    for number, row in enumerate(rows, 1):
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("name"), str)
            or not is_json(row.get("seed"), int)
        ):
            raise UserError(
                f"{path}: row {number} is not a run's row (an object with a name and an integer seed): "
                f"{quoted(row)}; {_LEFT}"
            )
        key = (row["name"], row["seed"])
        what = f"{path}: row {number} ({quoted(key[0])} seed {key[1]})"
        if key not in keys:
            raise UserError(f"{what} is no run of this study; {_LEFT}")
        if key in found:
            raise UserError(f"{what} repeats an earlier row; {_LEFT}")
        if lacking := [k for k in ROW_KEYS if k not in row]:
            raise UserError(f"{what} lacks {', '.join(lacking)}; {_LEFT}")
        try:
            found[key] = StudyRow.from_json(row)
        except ValueError as err:
            raise UserError(f"{what}: {err}; {_LEFT}") from None
    return found


_LEFT = "the file is left as it is: restore it from the repository, or move it away to rebuild it"


def committed_rows(
    path: Path, table: Sequence[tuple[Entry, int]], scale: str, weights: Path | None = None
) -> dict[Key, StudyRow]:
    """The rows of a committed results JSON for the study's entries, marked as not re-checked here, with
    their FLOP columns recomputed from the entry's config (the committed count may predate its fix) and,
    given the ``weights`` folder, their locality recomputed from the record their shipped weights carry
    (so that a summary added later applies to runs whose folders are gone)."""
    entries = {(e.name, s): e for e, s in table}
    shipped = manifest(weights) if weights is not None else {}
    kept = {}
    for key, row in file_rows(path, table).items():
        config = entry_config(entries[key], scale, key[1])
        extra = {k: v for k, v in row.extra.items() if k != "flops_per_image"}  # an older column, dropped
        name = f"{scale}/{key[0]}-seed{key[1]}"
        entry = shipped.get(name)
        if weights is not None and entry is not None and same_run(name, entry, row, config):
            row = shipped_locality(name, entry, weights, row)
        flops = flops_of(config)
        absent = row.absent - {"train_flops_per_image", "eval_flops_per_image", "rechecked"}
        kept[key] = replace(
            row,
            train_flops_per_image=flops.train,
            eval_flops_per_image=flops.eval,
            rechecked=False,
            extra=extra,
            absent=absent,
        )
    return kept


def same_run(name: str, entry: ManifestEntry, row: StudyRow, config: RunConfig) -> bool:
    """Whether the manifest's ``entry`` shipped the run of ``row`` (the same test accuracy and config);
    where it did not, a warning says why the row keeps its committed locality."""
    differs = config_difference(entry.config, config.to_dict())
    if entry.test_acc != row.test_acc:
        differs.insert(0, f"test_acc={quoted(entry.test_acc)} (row: {quoted(row.test_acc)})")
    if differs:
        print(
            f"warning: the shipped {name} is another run ({', '.join(differs)}); its row keeps its "
            "committed locality",
            file=sys.stderr,
        )
    return not differs


def shipped_locality(name: str, entry: ManifestEntry, weights: Path, row: StudyRow) -> StudyRow:
    """``row`` with a shipped run's ``layers``, ``locality_history`` and ``sharpening`` columns, from the
    locality record in the weights file of its manifest ``entry`` (as it was where it carries no record,
    or where the file is missing, unreadable or malformed)."""
    try:
        history = load_trained(entry_file(name, entry, weights)).history or []
    except CheckpointError as err:
        print(f"warning: {err}; its row keeps its committed locality", file=sys.stderr)
        return row
    if not history:
        return row
    return replace(
        row,
        layers=final_layers(history),
        locality_history=locality_curve(history),
        sharpening=sharpening_events(history),
        absent=row.absent - {"layers", "locality_history", "sharpening"},
    )


def run_label(entry: Entry, seed: int) -> str:
    """A run as the tables name it: its entry, seed and note."""
    return f"{entry.name} seed {seed}" + (f" ({entry.note})" if entry.note else "")


@dataclass(kw_only=True)
class ResultsTables:
    """A scale's results files, ``<out>/<scale>.json`` and ``<out>/<scale>.md``, which every study process
    of that scale writes (two ``--only`` studies at once, a ``--report`` beside a training study).

    Each write takes the scale's lock (``<out>/.<scale>.lock``), reads the file's rows again, merges this
    process's into them (its own runs' rows replace the file's, rows another process wrote are kept:
    ``merge_rows``) and replaces both files atomically; a writer killed mid-write leaves the previous
    complete files and, once it is gone, the lock to the next.
    """

    out: Path
    scale: str
    table: Sequence[tuple[Entry, int]]
    rows: dict[Key, StudyRow] = field(default_factory=dict)  # this process's view, in table order
    own: set[Key] = field(default_factory=set)  # the rows it built from run folders
    seen: dict[Key, StudyRow] = field(default_factory=dict)  # the file's rows as it last read or wrote them

    @classmethod
    def load(
        cls, *, out: Path, scale: str, table: Sequence[tuple[Entry, int]], weights: Path | None = None
    ) -> ResultsTables:
        """The tables of a scale, starting from the file's rows (marked as not re-checked here; their
        locality recomputed from the shipped ``weights``, when given)."""
        path = out / f"{scale}.json"
        return cls(
            out=out,
            scale=scale,
            table=table,
            rows=committed_rows(path, table, scale, weights),
            seen=file_rows(path, table),
        )

    @property
    def json_path(self) -> Path:
        """The scale's results JSON (its Markdown beside it, of the same stem)."""
        return self.out / f"{self.scale}.json"

    def add(self, entry: Entry, seed: int, summary: RunSummary) -> None:
        """The row of a run this process read back or trained (newer than the file's row of that run)."""
        self.rows[(entry.name, seed)] = row_of(entry, seed, summary)
        self.own.add((entry.name, seed))

    def write(self, unfinished: Sequence[UnfinishedRun] = ()) -> list[StudyRow]:
        """Merge this process's rows into the file's and write the JSON and the Markdown (with the runs
        without a result, and where ``unfinished`` ones stand), under the lock; returns the rows."""
        with locked(lock_file_of(self.json_path)):
            current = file_rows(self.json_path, self.table)
            merged = merge_rows(current, self.rows, own=self.own, seen=self.seen)
            for key in self.own:  # a re-run keeps what the file's row of its run recorded, as it is now
                merged[key] = with_replaced(merged[key], current.get(key))
            keys = [(e.name, s) for e, s in self.table]
            self.rows = {key: merged[key] for key in keys if key in merged}
            rows = list(self.rows.values())
            missing = [run_label(e, s) for e, s in self.table if (e.name, s) not in self.rows]
            for stale in self.out.glob(f".{self.scale}.*.tmp"):  # a killed writer's (only we write now)
                stale.unlink(missing_ok=True)
            md = markdown(rows, self.scale, missing, unfinished)  # before either file: they agree
            write_json(self.json_path, rows_json(rows))
            write_text(self.out / f"{self.scale}.md", md)
            # as the file holds them
            self.seen = {
                key: StudyRow.from_json(json.loads(json.dumps(row.to_json())))
                for key, row in self.rows.items()
            }
        return rows


def markdown(
    rows: Sequence[StudyRow],
    scale: str,
    missing: Sequence[str] = (),
    unfinished: Sequence[UnfinishedRun] = (),
) -> str:
    """The results table of a scale, the runs not finished (and where the unfinished ones stand), and the
    per-layer locality table."""
    base = preset("quadratic", scale)
    command = f"python -m experiments.study --scale {scale} --data-dir DIR"
    sa, data = base.resolved_model_config, base.data
    assert isinstance(sa, SAConfig)  # the quadratic preset
    budget = (
        f"Budget, the same for every model unless noted: {base.epochs} epochs, batch {data.batch_size}, "
        f"protocol {data.protocol} ({data.val_size} validation images held out), "
        f"{data.train_subset or 'all'} training images; SA models {sa.layers} layers of width "
        f"{sa.hidden}, {sa.heads} heads. Accuracy on the test split with its binomial standard error."
    )
    machines = sorted({r.hardware or "not recorded (rows marked *)" for r in rows})
    machine = f"Hardware: {'; '.join(machines) or '-'}; images/s as measured during each run."
    lines = [
        f"# Study at `{scale}` scale",
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
        "| model | seed | precision | params | GFLOP train step / eval | training (min) | images/s "
        "| test acc | paper acc (params) |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        paper = PAPER_TABLE.get(r.name)
        note = f" ({r.note})" if r.note else ""
        mark = "" if r.rechecked else "*"
        precision = r.precision if "precision" not in r.absent else FLOAT32
        lines.append(
            f"| {r.name}{note}{mark} | {r.seed} | {precision} | {r.params / 1e6:.3f}M | "
            f"{_giga(r.train_flops_per_image)} / {_giga(r.eval_flops_per_image)} | "
            f"{r.train_time_s / 60:.0f} | {r.train_images_per_s:.0f} | "
            f"{100 * r.test_acc:.1f} +- {100 * r.test_acc_stderr:.1f}% | "
            f"{f'{paper[0]}% ({paper[1]}M)' if paper else '-'} |"
        )
    if missing:
        lines += ["", "Not finished (no result yet): " + ", ".join(missing) + "."]
    if unfinished:
        lines += [
            "",
            "Where the unfinished runs stand at their newest checkpoint (training states, not results):",
            "",
        ]
        lines += [progress_line(u) for u in unfinished]
    sections = [*seed_mean_lines(rows), *locality_lines(rows), *milestone_lines(rows, base.epochs)]
    return "\n".join([*lines, *sections, *comparisons(rows), *rerun_lines(rows)]) + "\n"


def _giga(flops: float | None) -> str:
    """A FLOP column in GFLOP (``-`` where a row has none)."""
    return "-" if flops is None else f"{flops / 1e9:.3f}"


def progress_line(state: UnfinishedRun) -> str:
    """Where one unfinished run stands: its step, epochs, last validation accuracy, locality per layer."""
    done, total = state.epochs_completed, state.epochs
    line = f"- {state.name} seed {state.seed}: step {state.step}, {done} of {total} epochs done"
    if state.epoch_acc is not None:
        line += f"; {state.epoch_split} accuracy {100 * state.epoch_acc:.1f}% after epoch {done}"
    if state.layers:
        line += f"; locality at step {state.snapshot_step}: " + "; ".join(locality_cells(state.layers))
    return line


def by_model(rows: Sequence[StudyRow]) -> dict[str, list[StudyRow]]:
    """The rows grouped by model (entry name), seeds in table order."""
    groups: dict[str, list[StudyRow]] = {}
    for r in rows:
        groups.setdefault(r.name, []).append(r)
    return groups


def seed_mean_lines(rows: Sequence[StudyRow]) -> list[str]:
    """Per model with two or more seeds: the mean test accuracy over its seeds with their spread, and the
    per-layer locality averaged over the seeds."""
    seeded = {name: runs for name, runs in by_model(rows).items() if len(runs) >= 2}
    if not seeded:
        return []
    lines = [
        "",
        "Mean over seeds (models with two or more; each seed's own values are in the table above and the "
        "locality below; sharp heads are averaged, not pooled):",
        "",
    ]
    for name, runs in seeded.items():
        accs = [100 * r.test_acc for r in runs]
        seeds = ", ".join(str(r.seed) for r in runs)
        line = (
            f"- {name} (seeds {seeds}): test accuracy {mean(accs):.1f}% "
            f"(seeds {min(accs):.1f} to {max(accs):.1f})"
        )
        depths = {len(r.layers) for r in runs}
        if len(depths) == 1 and (depth := depths.pop()):
            line += "; " + "; ".join(layer_mean_cell(i, [r.layers[i] for r in runs]) for i in range(depth))
        lines.append(line)
    return lines


def layer_mean_cell(i: int, layers: Sequence[LayerSummary]) -> str:
    """One layer's locality averaged over seeds: mean distance, sharp heads, median alpha."""
    cell = (
        f"layer {i + 1}: {mean(x.mean_distance for x in layers):.2f} px, "
        f"{mean(x.sharp_heads for x in layers):.1f}/{layers[0].heads} sharp"
    )
    alphas = [x.median_alpha for x in layers]
    if all(a is not None for a in alphas):
        cell += f", alpha {mean(a for a in alphas if a is not None):.2f}"
    return cell


def locality_lines(rows: Sequence[StudyRow]) -> list[str]:
    """Per run and layer: mean attention distance, sharp heads and their distinct taps, median alpha."""
    lines = [
        "",
        "Locality per layer at the end of training (interior queries): mean attention distance in token "
        "pixels, sharp heads (>= 0.5 of their mass on one pixel) and the distinct taps they attend to, "
        "median alpha of Gaussian heads; where recorded, the overlap of the heads' half-mass regions (mean "
        "pairwise Jaccard index: 0 disjoint, 1 the same pixels), the pixels they cover together, and the "
        "median distance the heads' centres moved from their initialization and how much farther from the "
        "query they ended (median; negative: nearer):",
        "",
    ]
    for r in rows:
        if cells := locality_cells(r.layers):
            lines.append(f"- {r.name} seed {r.seed}: " + "; ".join(cells))
    return lines


def locality_cells(layers: Sequence[LayerSummary]) -> list[str]:
    """One phrase per layer: mean distance, sharp heads on their distinct taps, median alpha."""
    cells = []
    for i, layer in enumerate(layers):
        alpha = f", alpha {layer.median_alpha:.2f}" if layer.median_alpha is not None else ""
        taps = layer.sharp_distinct_taps
        distinct = f" on {taps} distinct taps" if taps is not None else ""
        if layer.sharp_taps:
            distinct += f" {tap_list(layer.sharp_taps)}"
        sharp = f"{layer.sharp_heads}/{layer.heads} sharp{distinct}"
        motion = ""
        if layer.overlap is not None:
            motion += f", overlap {layer.overlap:.2f}, coverage {layer.coverage} px"
        if layer.median_displacement is not None:
            motion += f", centres moved {layer.median_displacement:.2f} px (median)"
        if layer.median_outward is not None:
            motion += f", {layer.median_outward:+.2f} px outward (median)"
        cells.append(f"layer {i + 1}: {layer.mean_distance:.2f} px, {sharp}{alpha}{motion}")
    return cells


def tap_list(taps: Sequence[Sequence[int]]) -> str:
    """Sharp heads' taps as (dy, dx), a shared tap once with its head count: "(0, 0) x2, (-1, 1)"."""
    counts = Counter((dy, dx) for dy, dx in taps)
    cells = [f"({dy}, {dx})" + (f" x{n}" if n > 1 else "") for (dy, dx), n in sorted(counts.items())]
    return "[" + ", ".join(cells) + "]"


def comparisons(rows: Sequence[StudyRow], alpha: float = 0.05, min_seeds: int = 2) -> list[str]:
    """Every pair of entries whose runs all recorded their per-image test results: the seeds' accuracies,
    McNemar's exact test for every pair of seeds, the paired bootstrap interval of the difference of the
    seed means, and an ordering only where every one of them agrees and each entry has ``min_seeds``
    seeds (with fewer, the seed-to-seed spread is not measured)."""
    complete = {k: v for k, v in by_model(rows).items() if all(r.test_correct for r in v)}
    if len(complete) < 2:
        return []
    out = [
        "",
        "Paired comparisons on the same test images (McNemar's exact test for every pair of seeds, and the "
        "95% bootstrap interval of the difference of the seed means, resampling test images and seeds); an "
        f"ordering is claimed only where every seed of one is above every seed of the other, every McNemar "
        f"p < {alpha}, the interval excludes 0 and each has at least {min_seeds} seeds (with fewer, the "
        "seed-to-seed spread is not measured):",
        "",
    ]
    names = list(complete)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            sizes = {len(r.test_correct or "") for r in complete[a] + complete[b]}
            if len(sizes) > 1:  # tested on other images: nothing to pair
                out.append(
                    f"- {a} vs {b}: tested on different test sets ({', '.join(map(str, sorted(sizes)))} "
                    "images): not paired"
                )
                continue
            ra = [per_image(r.test_correct or "") for r in complete[a]]
            rb = [per_image(r.test_correct or "") for r in complete[b]]
            acc_a, acc_b = [r.test_acc for r in complete[a]], [r.test_acc for r in complete[b]]
            pair = compare(ra, rb, acc_a, acc_b, alpha=alpha, min_seeds=min_seeds)
            diff, low, high, ps = pair.difference, pair.low, pair.high, pair.p_values
            first, second = (a, b) if diff > 0 else (b, a)
            verdict = f"**{first} above {second}**" if pair.ordered else "no ordering claimed"
            if pair.cleared and not pair.seeded:
                verdict += f" (the tests clear it; with under {min_seeds} seeds the seed spread is not in it)"
            out.append(
                f"- {a} ({', '.join(f'{100 * x:.1f}' for x in acc_a)}%) vs {b} "
                f"({', '.join(f'{100 * x:.1f}' for x in acc_b)}%): difference of means {100 * diff:+.1f} "
                f"points, 95% interval [{100 * low:+.1f}, {100 * high:+.1f}]; McNemar p "
                f"{', '.join(f'{p:.2g}' for p in ps)}: {verdict}"
            )
    return out
