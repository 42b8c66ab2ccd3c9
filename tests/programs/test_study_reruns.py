"""A re-run of a committed row keeps what every row before it recorded, and the tables pair each with it on
the same test images."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers.rows import study_row

from experiments.study import STUDIES, entry_config
from experiments.study.reruns import rerun_lines, with_replaced
from experiments.study.tables import ResultsTables
from sa_conv.training.summary import RunSummary

SCALE = "small"
ENTRY = STUDIES[SCALE][0]  # quadratic, seeds 0 and 1
TABLE = [(e, s) for e in STUDIES[SCALE] for s in e.seeds]
OLD, NEW = "1" * 12 + "0" * 8, "1" * 20  # the re-run gets right the 8 test images the committed row missed
LAYER = {"mean_distance": 4.68, "sharp_heads": 5, "heads": 9, "conv_likeness": 0.5}


def summary(correct: str, seconds: float = 60.0) -> RunSummary:
    """A finished run of the entry's seed 1 with these per-image test results."""
    return RunSummary.from_dict(
        {
            "protocol": "clean",
            "model": ENTRY.model,
            "config": entry_config(ENTRY, SCALE, 1).to_dict(),
            "params": 1000,
            "test_acc": correct.count("1") / len(correct),
            "n_test_images": len(correct),
            "epochs_completed": 15,
            "global_steps": 10,
            "train_images_per_s": 100.0,
            "train_step_seconds": seconds,
            "run_dir": "results/runs/small/quadratic-seed1/quadratic/version_0",
            "hardware": {"cpu": "Intel Xeon", "cpu_count": 2},
            "test_correct": correct,
        }
    )


def commit_row(out: Path, correct: str | None, acc: float = 0.6) -> None:
    """A committed results file with one row of the entry's seed 1 (trained on another machine)."""
    row = {
        "name": ENTRY.name,
        "model": ENTRY.model,
        "seed": 1,
        "note": "",
        "precision": "32-true",
        "hardware": "AMD EPYC",
        "params": 1000,
        "test_acc": acc,
        "test_acc_stderr": 0.01,
        "n_test_images": 20,
        "train_time_s": 3000.0,
        "train_images_per_s": 200.0,
        "layers": [LAYER],
        "test_correct": correct,
    }
    out.mkdir(exist_ok=True)
    (out / f"{SCALE}.json").write_text(json.dumps([row]))


def loaded(out: Path) -> ResultsTables:
    return ResultsTables.load(out=out, scale=SCALE, table=TABLE)


def written(tables: ResultsTables, run: RunSummary) -> tuple[dict[str, Any], str]:
    """The row of ``run`` and the Markdown, once ``tables`` has added and written it."""
    tables.add(ENTRY, 1, run)
    tables.write()
    (row,) = json.loads((tables.out / f"{SCALE}.json").read_text())
    return row, (tables.out / f"{SCALE}.md").read_text()


LINE = (
    "- quadratic seed 1: 100.00% (32-true, Intel Xeon (2 cores), no GPU) replaces 60.00% (32-true, "
    "AMD EPYC): McNemar p 0.0078 (8 test images right only in the re-run, 0 only in the row it replaced)"
)


def test_a_rerun_keeps_the_row_it_replaced_and_pairs_them(tmp_path: Path) -> None:
    out = tmp_path / "results"
    commit_row(out, OLD)
    row, md = written(loaded(out), summary(NEW))
    (record,) = row["replaced"]
    assert row["test_acc"] == 1.0 and record["test_acc"] == 0.6 and record["test_correct"] == OLD
    assert record["hardware"] == "AMD EPYC" and record["layers"] == [LAYER]
    assert LINE in md.splitlines()
    # the same run read back later (its row now committed) keeps its record, not one of itself
    again, md_again = written(loaded(out), summary(NEW))
    assert again["replaced"] == row["replaced"] and LINE in md_again.splitlines()


def test_a_rerun_of_a_rerun_keeps_every_row_before_it(tmp_path: Path) -> None:
    out = tmp_path / "results"
    commit_row(out, OLD)
    written(loaded(out), summary(NEW))
    row, md = written(loaded(out), summary("0" * 20, seconds=90.0))
    assert [r["test_acc"] for r in row["replaced"]] == [0.6, 1.0]
    assert "- quadratic seed 1: 0.00% (32-true, Intel Xeon (2 cores), no GPU) replaces 100.00%" in md
    assert "- quadratic seed 1: 0.00% (32-true, Intel Xeon (2 cores), no GPU) replaces 60.00%" in md


def test_a_rerun_another_process_wrote_meanwhile_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "results"
    commit_row(out, OLD)
    mine, theirs = loaded(out), loaded(out)  # both read the committed row
    written(theirs, summary(NEW))
    row, _ = written(mine, summary("0" * 20, seconds=90.0))
    assert [r["test_acc"] for r in row["replaced"]] == [0.6, 1.0]


def test_a_row_read_back_as_itself_replaces_nothing(tmp_path: Path) -> None:
    for committed in (OLD, None):  # a row written before the per-image results were recorded has none
        out = tmp_path / f"results-{committed is None}"
        commit_row(out, committed)
        row, md = written(loaded(out), summary(OLD, seconds=3000.0))
        assert "replaced" not in row and "Re-runs of committed rows" not in md


def test_a_replaced_row_that_cannot_be_paired_is_said_so() -> None:
    new = {"name": "learned", "seed": 0, "test_acc": 0.7, "precision": "32-true", "hardware": "Xeon"}
    head = "- learned seed 0: 70.00% (32-true, Xeon) replaces 69.00% (32-true, EPYC): "
    before = {"name": "learned", "seed": 0, "test_acc": 0.69, "precision": "32-true", "hardware": "EPYC"}
    for committed, said in (
        (None, "no per-image results to pair"),
        ("1" * 4, "tested on different images (10 and 4)"),
    ):
        replaced = with_replaced(
            study_row({**new, "test_correct": "1" * 7 + "0" * 3}),
            study_row({**before, "test_correct": committed}),
        )
        assert rerun_lines([replaced])[-1] == head + said
    assert with_replaced(study_row(new), None) == study_row(new) and rerun_lines([study_row(new)]) == []


def test_a_rerun_that_repeated_its_row_exactly_is_said_so() -> None:
    new = {"name": "learned", "seed": 0, "test_acc": 0.7, "precision": "32-true", "hardware": "Xeon"}
    head = "- learned seed 0: 70.00% (32-true, Xeon) replaces 70.00% (32-true, Xeon): "
    same = "right and wrong on the same 10 test images (no image to pair)"
    correct, layers = "1" * 7 + "0" * 3, [{**LAYER, "sharp_heads": 1}]
    before = {**new, "test_correct": correct, "layers": layers}
    later = [layers[0] | {"overlap": 0.06}]  # a later row records more; the kept numbers are equal
    for new_layers, said in (
        (later, same + ", and the same locality in every layer: the same run again"),
        ([layers[0] | {"mean_distance": 4.69}], same),  # one number differs: not a reproduction
        (None, same),
    ):
        rerun = {**new, "train_time_s": 1.0, "test_correct": correct, "layers": new_layers}
        assert rerun_lines([with_replaced(study_row(rerun), study_row(before))])[-1] == head + said
