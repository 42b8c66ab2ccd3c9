"""The study's tables: one row per run (its accuracy, FLOPs, locality, history, per-image test results),
the committed rows it keeps, the Markdown table and the paired comparisons between models, and the
results files every study process of a scale shares (``ResultsTables``)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

from experiments.cli import UserError
from experiments.presets import preset
from experiments.study.entries import PAPER_TABLE, Entry, entry_config
from experiments.study.milestones import milestone_lines
from experiments.study.reruns import rerun_lines, with_replaced
from sa_conv.analysis.dynamics import sharpening
from sa_conv.analysis.flops import analytic_flops
from sa_conv.analysis.maps import initial_of, layer_summary
from sa_conv.analysis.snapshots import LocalitySnapshot
from sa_conv.analysis.statistics import accuracy_stderr, compare, per_image
from sa_conv.models import SAConfig
from sa_conv.models.weights import ManifestEntry, entry_file, manifest
from sa_conv.training.config import RunConfig, config_difference
from sa_conv.training.epochs import epochs_json
from sa_conv.training.summary import RunSummary
from sa_conv.training.trained import load_trained
from sa_conv.utils.files import lock_file_of, locked, merge_rows, write_json, write_text
from sa_conv.utils.json_values import is_json, json_kind
from sa_conv.utils.quote import quoted
from sa_conv.utils.safe_load import CheckpointError
from sa_conv.utils.untrusted import UntrustedInputError, finite_number, load_json, read_bounded

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


def flops_of(config: RunConfig) -> dict[str, int]:
    """GFLOP columns of a run: its training step (forward + backward, the trained path) and evaluation."""
    family = config.resolved_model_config
    return {
        "train_flops_per_image": analytic_flops(config.model, family, training=True),
        "eval_flops_per_image": analytic_flops(config.model, family, training=False, passes="forward"),
    }


def locality_curve(history: Sequence[LocalitySnapshot]) -> list[dict[str, Any]]:
    """The run's locality record, per recorded step and layer (``layer_summary`` of each snapshot)."""
    start = initial_of(history)
    return [{"step": s.step, "layers": [r.to_json() for r in layer_summary(s, start)]} for s in history]


def final_layers(history: Sequence[LocalitySnapshot]) -> list[dict[str, Any]]:
    """The locality of each layer at the end of a record (none without one)."""
    return [r.to_json() for r in layer_summary(history[-1], initial_of(history))] if history else []


def row_of(entry: Entry, seed: int, summary: RunSummary) -> dict[str, Any]:
    """One row of the study's JSON."""
    config = RunConfig.from_dict(summary.config)
    history = summary.locality_history or []
    family = config.model_config if isinstance(config.model_config, SAConfig) else None
    images_per_s = summary.train_images_per_s
    return {
        "name": entry.name,
        "model": entry.model,
        "seed": seed,
        "note": entry.note,
        "protocol": summary.protocol,
        "epochs": config.epochs,
        "layers_count": family.layers if family is not None else None,
        "heads": family.heads if family is not None else None,
        "precision": summary.precision,
        "bf16_products": summary.bf16_products,  # emulated on a CPU without native bf16
        "params": summary.params,
        **flops_of(config),
        "test_acc": summary.test_acc,
        "test_acc_stderr": accuracy_stderr(summary.test_acc, summary.n_test_images),
        "n_test_images": summary.n_test_images,
        "best_val_acc": summary.best_val_acc,
        # the training steps' time over the whole run, resumes included (not the evaluation)
        "train_time_s": summary.train_step_seconds
        or (summary.n_train_images or 0) * summary.epochs_completed / max(images_per_s, 1e-9),
        "train_images_per_s": images_per_s,
        # recomputed from the run's own record, so that a summary added later applies to finished runs
        "layers": final_layers(history),
        "locality_history": locality_curve(history),
        "sharpening": [asdict(event) for event in sharpening(history)],
        "epochs_history": epochs_json(summary.history),
        "run_dir": summary.run_dir,
        "hardware": _machine(summary.hardware or {}),
        "test_correct": summary.test_correct,
        "rechecked": True,
    }


def _machine(hw: dict[str, Any]) -> str:
    """The machine of a run, in words (CPU, cores, GPU)."""
    return f"{hw.get('cpu', '?')} ({hw.get('cpu_count', '?')} cores), {hw.get('gpu') or 'no GPU'}"


# what every row of a results JSON has (the tables read them; the FLOP columns are recomputed)
ROW_KEYS = (
    "name",
    "seed",
    "note",
    "params",
    "train_time_s",
    "train_images_per_s",
    "test_acc",
    "test_acc_stderr",
)


def file_rows(path: Path, table: Sequence[tuple[Entry, int]]) -> dict[Key, Any]:
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
    found: dict[Key, Any] = {}
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
        if problem := row_problem(row):
            raise UserError(f"{what}: {problem}; {_LEFT}")
        found[key] = row
    return found


_LEFT = "the file is left as it is: restore it from the repository, or move it away to rebuild it"

# the numbers of a row the tables compute with, and the range each must lie in
ROW_NUMBERS = {
    "params": (0.0, 1e13),
    "train_time_s": (0.0, 1e9),
    "train_images_per_s": (0.0, 1e9),
    "test_acc": (0.0, 1.0),
    "test_acc_stderr": (0.0, 1.0),
}


def row_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with a results row's values the tables read (numbers out of range, locality that is
    not per-layer objects), or None."""
    for key, (low, high) in ROW_NUMBERS.items():
        try:
            finite_number(row[key], quoted(key), low=low, high=high)
        except UntrustedInputError as err:
            return str(err)
    if not isinstance(row["note"], str):
        return f"its note is {quoted(row['note'])}, not a string"
    for key in ("layers", "locality_history", "epochs_history"):
        value = row.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, dict) for v in value)):
            return f"its {key!r} is {quoted(value)}, not a list of objects"
    return None


def committed_rows(
    path: Path, table: Sequence[tuple[Entry, int]], scale: str, weights: Path | None = None
) -> dict[Key, Any]:
    """The rows of a committed results JSON for the study's entries, marked as not re-checked here, with
    their FLOP columns recomputed from the entry's config (the committed count may predate its fix) and,
    given the ``weights`` folder, their locality recomputed from the record their shipped weights carry
    (so that a summary added later applies to runs whose folders are gone)."""
    entries = {(e.name, s): e for e, s in table}
    shipped = manifest(weights) if weights is not None else {}
    kept = {}
    for key, row in file_rows(path, table).items():
        config = entry_config(entries[key], scale, key[1])
        row = {k: v for k, v in row.items() if k != "flops_per_image"}
        name = f"{scale}/{key[0]}-seed{key[1]}"
        entry = shipped.get(name)
        if weights is not None and entry is not None and same_run(name, entry, row, config):
            row |= shipped_locality(name, entry, weights)
        kept[key] = {**row, **flops_of(config), "rechecked": False}
    return kept


def same_run(name: str, entry: ManifestEntry, row: dict[str, Any], config: RunConfig) -> bool:
    """Whether the manifest's ``entry`` shipped the run of ``row`` (the same test accuracy and config);
    where it did not, a warning says why the row keeps its committed locality."""
    differs = config_difference(entry.config, config.to_dict())
    if entry.test_acc != row.get("test_acc"):
        differs.insert(0, f"test_acc={quoted(entry.test_acc)} (row: {quoted(row.get('test_acc'))})")
    if differs:
        print(
            f"warning: the shipped {name} is another run ({', '.join(differs)}); its row keeps its "
            "committed locality",
            file=sys.stderr,
        )
    return not differs


def shipped_locality(name: str, entry: ManifestEntry, weights: Path) -> dict[str, Any]:
    """A shipped run's ``layers`` and ``locality_history`` columns, from the locality record in the
    weights file of its manifest ``entry`` (none where it carries no record, or where the file is missing,
    unreadable or malformed)."""
    try:
        history = load_trained(entry_file(name, entry, weights)).history or []
    except CheckpointError as err:
        print(f"warning: {err}; its row keeps its committed locality", file=sys.stderr)
        return {}
    if not history:
        return {}
    events = [asdict(event) for event in sharpening(history)]
    return {
        "layers": final_layers(history),
        "locality_history": locality_curve(history),
        "sharpening": events,
    }


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
    rows: dict[Key, dict[str, Any]] = field(default_factory=dict)  # this process's view, in table order
    own: set[Key] = field(default_factory=set)  # the rows it built from run folders
    seen: dict[Key, Any] = field(default_factory=dict)  # the file's rows as it last read or wrote them

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

    def write(self, unfinished: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
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
            write_json(self.json_path, rows)
            write_text(self.out / f"{self.scale}.md", md)
            self.seen = {key: json.loads(json.dumps(row)) for key, row in self.rows.items()}  # as the file
        return rows


def markdown(
    rows: list[dict[str, Any]],
    scale: str,
    missing: Sequence[str] = (),
    unfinished: Sequence[dict[str, Any]] = (),
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
    machines = sorted({r.get("hardware") or "not recorded (rows marked *)" for r in rows})
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
    if unfinished:
        lines += [
            "",
            "Where the unfinished runs stand at their newest checkpoint (training states, not results):",
            "",
        ]
        lines += [progress_line(u) for u in unfinished]
    sections = [*seed_mean_lines(rows), *locality_lines(rows), *milestone_lines(rows, base.epochs)]
    return "\n".join([*lines, *sections, *comparisons(rows), *rerun_lines(rows)]) + "\n"


def progress_line(state: dict[str, Any]) -> str:
    """Where one unfinished run stands: its step, epochs, last validation accuracy, locality per layer."""
    done, total = state["epochs_completed"], state["epochs"]
    line = f"- {state['name']} seed {state['seed']}: step {state['step']}, {done} of {total} epochs done"
    if state["epoch_acc"] is not None:
        line += f"; {state['epoch_split']} accuracy {100 * state['epoch_acc']:.1f}% after epoch {done}"
    if state["layers"]:
        line += f"; locality at step {state['snapshot_step']}: " + "; ".join(locality_cells(state["layers"]))
    return line


def by_model(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rows grouped by model (entry name), seeds in table order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["name"], []).append(r)
    return groups


def seed_mean_lines(rows: list[dict[str, Any]]) -> list[str]:
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
        accs = [100 * r["test_acc"] for r in runs]
        seeds = ", ".join(str(r["seed"]) for r in runs)
        line = (
            f"- {name} (seeds {seeds}): test accuracy {mean(accs):.1f}% "
            f"(seeds {min(accs):.1f} to {max(accs):.1f})"
        )
        depths = {len(r.get("layers", [])) for r in runs}
        if len(depths) == 1 and (depth := depths.pop()):
            line += "; " + "; ".join(layer_mean_cell(i, [r["layers"][i] for r in runs]) for i in range(depth))
        lines.append(line)
    return lines


def layer_mean_cell(i: int, layers: list[dict[str, Any]]) -> str:
    """One layer's locality averaged over seeds: mean distance, sharp heads, median alpha."""
    cell = (
        f"layer {i + 1}: {mean(x['mean_distance'] for x in layers):.2f} px, "
        f"{mean(x['sharp_heads'] for x in layers):.1f}/{layers[0]['heads']} sharp"
    )
    if all("median_alpha" in x for x in layers):
        cell += f", alpha {mean(x['median_alpha'] for x in layers):.2f}"
    return cell


def locality_lines(rows: list[dict[str, Any]]) -> list[str]:
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
        if cells := locality_cells(r["layers"]):
            lines.append(f"- {r['name']} seed {r['seed']}: " + "; ".join(cells))
    return lines


def locality_cells(layers: list[dict[str, Any]]) -> list[str]:
    """One phrase per layer: mean distance, sharp heads on their distinct taps, median alpha."""
    cells = []
    for i, layer in enumerate(layers):
        alpha = f", alpha {layer['median_alpha']:.2f}" if "median_alpha" in layer else ""
        taps = layer.get("sharp_distinct_taps")
        distinct = f" on {taps} distinct taps" if taps is not None else ""
        if layer.get("sharp_taps"):
            distinct += f" {tap_list(layer['sharp_taps'])}"
        sharp = f"{layer['sharp_heads']}/{layer['heads']} sharp{distinct}"
        motion = ""
        if "overlap" in layer:
            motion += f", overlap {layer['overlap']:.2f}, coverage {layer['coverage']} px"
        if "median_displacement" in layer:
            motion += f", centres moved {layer['median_displacement']:.2f} px (median)"
        if "median_outward" in layer:
            motion += f", {layer['median_outward']:+.2f} px outward (median)"
        cells.append(f"layer {i + 1}: {layer['mean_distance']:.2f} px, {sharp}{alpha}{motion}")
    return cells


def tap_list(taps: list[list[int]]) -> str:
    """Sharp heads' taps as (dy, dx), a shared tap once with its head count: "(0, 0) x2, (-1, 1)"."""
    counts = Counter((dy, dx) for dy, dx in taps)
    cells = [f"({dy}, {dx})" + (f" x{n}" if n > 1 else "") for (dy, dx), n in sorted(counts.items())]
    return "[" + ", ".join(cells) + "]"


def comparisons(rows: list[dict[str, Any]], alpha: float = 0.05, min_seeds: int = 2) -> list[str]:
    """Every pair of entries whose runs all recorded their per-image test results: the seeds' accuracies,
    McNemar's exact test for every pair of seeds, the paired bootstrap interval of the difference of the
    seed means, and an ordering only where every one of them agrees and each entry has ``min_seeds``
    seeds (with fewer, the seed-to-seed spread is not measured)."""
    complete = {k: v for k, v in by_model(rows).items() if all(r.get("test_correct") for r in v)}
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
            sizes = {len(r["test_correct"]) for r in complete[a] + complete[b]}
            if len(sizes) > 1:  # tested on other images: nothing to pair
                out.append(
                    f"- {a} vs {b}: tested on different test sets ({', '.join(map(str, sorted(sizes)))} "
                    "images): not paired"
                )
                continue
            ra = [per_image(r["test_correct"]) for r in complete[a]]
            rb = [per_image(r["test_correct"]) for r in complete[b]]
            acc_a, acc_b = [r["test_acc"] for r in complete[a]], [r["test_acc"] for r in complete[b]]
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
