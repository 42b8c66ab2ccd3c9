"""A study's results row is read by one reader and written back as it came: every row of every committed
results file, rows of older layouts (columns added since are not written into them), and a malformed
row refused in one line that says what is wrong."""

from __future__ import annotations

import json

import pytest
from helpers import REPO

from experiments.study.row import StudyRow

COMMITTED = [
    row
    for path in sorted((REPO / "results").glob("*.json"))
    if isinstance(rows := json.loads(path.read_text()), list)
    for row in rows
]
# a row as the first studies wrote it: no precision, machine, history or per-image results
OLDER = {
    "name": "quadratic",
    "model": "quadratic",
    "seed": 0,
    "note": "",
    "test_acc": 0.7135,
    "test_acc_stderr": 0.0101,
    "params": 117376,
    "flops_per_image": 44434688,
    "train_time_s": 3000.0,
    "train_images_per_s": 200.0,
    "layers": [{"mean_distance": 2.5, "sharp_heads": 3, "heads": 9, "conv_likeness": 0.4}],
}


def test_every_committed_row_reads_and_writes_back_as_it_came() -> None:
    assert len(COMMITTED) >= 20
    for row in COMMITTED:
        read = StudyRow.from_json(row)
        assert read.to_json() == row and read.key == (row["name"], row["seed"])


def test_an_older_row_writes_back_without_the_columns_it_lacked() -> None:
    read = StudyRow.from_json(OLDER)
    assert read.to_json() == OLDER  # results files are written with sorted keys: no order to keep
    assert read.precision is None and read.epochs_history == ()
    assert read.extra == {"flops_per_image": 44434688}
    assert read.layers[0].sharp_heads == 3 and read.params == 117376 and isinstance(read.params, int)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"seed": "zero"}, "not a run's row"),
        ({"test_acc": 1.5}, "'test_acc' is 1.5, not a number in [0, 1]"),
        ({"note": 3}, "its note is 3, not a string"),
        ({"epochs": "15"}, "its 'epochs' is '15', not a number"),
        ({"layers": {"mean_distance": 1}}, "its 'layers'"),
        ({"layers": [{"heads": 9}]}, "lacks mean_distance"),
        ({"rechecked": "yes"}, "'rechecked' is 'yes', not a boolean"),
    ],
)
def test_a_malformed_row_is_refused_saying_what_is_wrong(change: dict, said: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        StudyRow.from_json({**OLDER, **change})
    assert said in str(refused.value)
