"""The epoch record: every committed results row's epochs read and write back unchanged, keys a later
version adds are kept, and a malformed record is refused by name."""

import json

import pytest
from helpers import REPO

from sa_conv.training.epochs import EpochRecord, epochs_json, read_epochs


def test_every_committed_epoch_history_reads_and_writes_back_unchanged():
    histories = [
        row["epochs_history"]
        for path in sorted((REPO / "results").glob("*.json"))
        if isinstance(rows := json.loads(path.read_text()), list)
        for row in rows
        if isinstance(row, dict) and row.get("epochs_history")
    ]
    assert len(histories) >= 15
    for history in histories:
        records = read_epochs(history, "a results row")
        assert epochs_json(records) == history
        evaluated = [h.get("val_acc", h.get("test_acc")) for h in history]
        assert [r.evaluated_acc for r in records] == evaluated


def test_a_key_this_version_does_not_know_is_kept_and_a_missing_one_left_out():
    entry = {"epoch": 3, "step": 90, "test_acc": 0.5, "grad_norm": 1.5}  # the paper's protocol; a new key
    record = EpochRecord.from_json(entry)
    assert record.test_acc == 0.5 and record.val_acc is None and record.evaluated_acc == 0.5
    assert record.extra == {"grad_norm": 1.5}
    assert record.to_json() == entry


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ([1, 2], "not an object"),
        ({"epoch": 1}, "step is not a count"),
        ({"epoch": "1", "step": 3}, "epoch is not a count"),
        ({"epoch": 1, "step": 3, "val_acc": "high"}, "'val_acc' is not a finite number"),
        ({"epoch": 1, "step": 3, "lr": float("nan")}, "'lr' is not a finite number"),
    ],
)
def test_a_malformed_record_is_refused_by_name(entry, said):
    with pytest.raises(ValueError, match=said):
        read_epochs([entry], "metrics.json")
    with pytest.raises(ValueError, match="not a list"):
        read_epochs({"epoch": 1}, "metrics.json")
