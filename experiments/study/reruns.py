"""A re-run of a committed row (its weights were not kept, its machine is gone): the new row keeps what
every row before it recorded (accuracy, per-image test results, precision, machine, best validation
accuracy, locality per layer), and the tables pair each with it on the same test images, so that a replaced
number is never lost silently."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from experiments.study.row import StudyRow
from sa_conv.analysis.statistics import mcnemar, per_image

__all__ = ["KEPT", "one_run", "rerun_lines", "same_locality", "with_replaced"]

KEPT = ("test_acc", "test_correct", "precision", "hardware", "best_val_acc", "layers")  # of a replaced row


def one_run(a: StudyRow, b: StudyRow) -> bool:
    """Whether two rows are one run read back twice: the same accuracy and training time, and the same
    per-image test results where both recorded them (a row written before they were recorded has none)."""
    correct_a, correct_b = a.test_correct, b.test_correct
    return (
        a.test_acc == b.test_acc
        and a.train_time_s == b.train_time_s
        and (correct_a is None or correct_b is None or correct_a == correct_b)
    )


def same_locality(new: Sequence[dict[str, object]], old: object) -> bool:
    """Whether a re-run's locality per layer equals a replaced row's in every number the replaced row
    recorded (a later row may record more)."""
    if not new or not isinstance(old, list) or len(new) != len(old):
        return False
    return all(
        isinstance(o, dict) and all(n.get(key) == value for key, value in o.items())
        for n, o in zip(new, old, strict=True)
    )


def with_replaced(row: StudyRow, before: StudyRow | None) -> StudyRow:
    """``row`` with ``replaced``: the records of every row it replaced, oldest first, ``before`` last when
    ``row`` is another run of it; the same run read back keeps the records it has."""
    if before is None:
        return row
    if one_run(row, before):
        return _replacing(row, before.replaced) if before.replaced else row
    kept = before.to_json()
    record = {key: kept.get(key) for key in KEPT}
    return _replacing(row, (*before.replaced, record))


def _replacing(row: StudyRow, replaced: tuple[dict[str, object], ...]) -> StudyRow:
    """``row`` with its ``replaced`` column."""
    return replace(row, replaced=replaced, absent=row.absent - {"replaced"})


def rerun_lines(rows: Sequence[StudyRow]) -> list[str]:
    """For every row that replaced committed ones: its accuracy and machine against each replaced row's,
    with McNemar's exact test where both recorded their per-image results on the same test images."""
    reruns = [r for r in rows if r.replaced]
    if not reruns:
        return []
    out = [
        "",
        "Re-runs of committed rows (the table has the re-run; each row it replaced, paired with it on the "
        "same test images):",
        "",
    ]
    for r in reruns:
        layers = [layer.to_json() for layer in r.layers]
        for old in reversed(r.replaced):  # the row it replaced first, then the ones before that
            old_acc = old.get("test_acc")
            old_acc_text = f"{100 * old_acc:.2f}%" if isinstance(old_acc, int | float) else "?"
            line = (
                f"- {r.name} seed {r.seed}: {100 * r.test_acc:.2f}% ({r.precision}, "
                f"{r.hardware or 'machine not recorded'}) replaces {old_acc_text} "
                f"({old.get('precision')}, {old.get('hardware') or 'machine not recorded'})"
            )
            old_correct = old.get("test_correct")
            old_correct = old_correct if isinstance(old_correct, str) else None
            new_correct = r.test_correct
            if not (new_correct and old_correct):
                line += ": no per-image results to pair"
            elif len(new_correct) != len(old_correct):
                line += f": tested on different images ({len(new_correct)} and {len(old_correct)})"
            elif new_correct == old_correct:
                line += f": right and wrong on the same {len(new_correct)} test images (no image to pair)"
                if same_locality(layers, old.get("layers")):
                    line += ", and the same locality in every layer: the same run again"
            else:
                new_only, old_only, p = mcnemar(per_image(new_correct), per_image(old_correct))
                line += (
                    f": McNemar p {p:.2g} ({new_only} test images right only in the re-run, {old_only} only "
                    "in the row it replaced)"
                )
            out.append(line)
    return out
