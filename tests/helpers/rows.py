"""A study's results row for a test: the run's own columns over the ones every row has."""

from __future__ import annotations

from typing import Any

from experiments.study.row import StudyRow

# the columns every row has, beside the run's own
COLUMNS = {"note": "", "params": 1, "train_flops_per_image": 1, "eval_flops_per_image": 1}
COLUMNS |= {"train_time_s": 60.0, "train_images_per_s": 1.0, "test_acc_stderr": 0.01}


def study_row(data: dict[str, Any]) -> StudyRow:
    """A results row as the study reads it: ``data`` over ``COLUMNS``."""
    return StudyRow.from_json({**COLUMNS, **data})
