"""A re-run of a committed row keeps what it replaced, and the tables pair the two on the same test images."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.study import STUDIES, entry_config
from experiments.study.reruns import rerun_lines, with_replaced
from experiments.study.tables import ResultsTables
from sa_conv.training.summary import RunSummary

SCALE = "small"
ENTRY = STUDIES[SCALE][0]  # quadratic, seeds 0 and 1
TABLE = [(e, s) for e in STUDIES[SCALE] for s in e.seeds]


def summary(correct: str) -> RunSummary:
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
            "train_step_seconds": 60.0,
            "run_dir": "results/runs/small/quadratic-seed1/quadratic/version_0",
            "hardware": {"cpu": "Intel Xeon", "cpu_count": 2},
            "test_correct": correct,
        }
    )


def committed(out: Path, correct: str) -> None:
    row = {
        "name": ENTRY.name,
        "model": ENTRY.model,
        "seed": 1,
        "note": "",
        "precision": "32-true",
        "hardware": "AMD EPYC",
        "params": 1000,
        "test_acc": correct.count("1") / len(correct),
        "test_acc_stderr": 0.01,
        "n_test_images": len(correct),
        "train_time_s": 3000.0,
        "train_images_per_s": 200.0,
        "layers": [{"heads": 9, "sharp_heads": 5}],
        "test_correct": correct,
    }
    out.mkdir(exist_ok=True)
    (out / f"{SCALE}.json").write_text(json.dumps([row]))


def write_back(out: Path, run: RunSummary) -> tuple[dict, str]:
    tables = ResultsTables.load(out=out, scale=SCALE, table=TABLE)
    tables.add(ENTRY, 1, run)
    tables.write()
    (row,) = json.loads((out / f"{SCALE}.json").read_text())
    return row, (out / f"{SCALE}.md").read_text()


def test_a_rerun_keeps_the_row_it_replaced_and_pairs_them(tmp_path: Path) -> None:
    out = tmp_path / "results"
    old, new = "1" * 12 + "0" * 8, "1" * 20  # the re-run gets the 8 right the row missed
    committed(out, old)
    row, md = write_back(out, summary(new))
    assert row["test_acc"] == 1.0 and row["replaces"]["test_acc"] == 0.6
    assert row["replaces"]["test_correct"] == old and row["replaces"]["hardware"] == "AMD EPYC"
    assert row["replaces"]["layers"] == [{"heads": 9, "sharp_heads": 5}]
    line = (
        "- quadratic seed 1: 100.00% (32-true, Intel Xeon (2 cores), no GPU) replaces 60.00% (32-true, "
        "AMD EPYC): McNemar p 0.0078 (8 test images right only in the re-run, 0 only in the row it replaced)"
    )
    assert line in md.splitlines()
    # the same run read back later (its row now committed) keeps its record, not one of itself
    again, md_again = write_back(out, summary(new))
    assert again["replaces"]["test_correct"] == old and line in md_again.splitlines()


def test_a_row_read_back_as_itself_replaces_nothing(tmp_path: Path) -> None:
    out = tmp_path / "results"
    committed(out, "1" * 12 + "0" * 8)
    row, md = write_back(out, summary("1" * 12 + "0" * 8))
    assert "replaces" not in row and "Re-runs of committed rows" not in md


def test_a_replaced_row_without_per_image_results_is_said_so() -> None:
    new = {"name": "learned", "seed": 0, "test_acc": 0.7, "precision": "32-true", "hardware": "Xeon"}
    before = {"test_acc": 0.69, "precision": "32-true", "hardware": "EPYC", "test_correct": None}
    row = with_replaced({**new, "test_correct": "1" * 7 + "0" * 3}, before)
    assert rerun_lines([row])[-1] == (
        "- learned seed 0: 70.00% (32-true, Xeon) replaces 69.00% (32-true, EPYC): "
        "no per-image results to pair"
    )
    assert with_replaced(new, None) == new and rerun_lines([new]) == []
