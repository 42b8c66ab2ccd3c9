"""A re-run of a committed row (its weights were not kept, its machine is gone): the new row keeps what it
replaced (accuracy, per-image test results, precision, machine), and the tables pair the two on the same
test images, so that a replaced number is never lost silently."""

from __future__ import annotations

from typing import Any

from sa_conv.analysis.statistics import mcnemar

__all__ = ["REPLACED", "rerun_lines", "with_replaced"]

REPLACED = (
    "test_acc",
    "test_correct",
    "precision",
    "hardware",
    "best_val_acc",
    "layers",
)  # what a re-run keeps


def with_replaced(row: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    """``row`` with ``replaces``: what the row ``before`` it recorded, when ``row`` is another run of it
    (other per-image test results); the same run read back again keeps its own record of what it replaced."""
    if before is None:
        return row
    same = before.get("test_correct") == row.get("test_correct") and before.get("test_acc") == row.get(
        "test_acc"
    )
    if same:
        return row | ({"replaces": before["replaces"]} if "replaces" in before else {})
    return row | {"replaces": {key: before.get(key) for key in REPLACED}}


def rerun_lines(rows: list[dict[str, Any]]) -> list[str]:
    """For every row that replaced a committed one: both accuracies and machines, and McNemar's exact test
    on the same test images where both recorded their per-image results."""
    reruns = [r for r in rows if r.get("replaces")]
    if not reruns:
        return []
    out = [
        "",
        "Re-runs of committed rows (the table has the re-run; the row it replaced, paired with it on the "
        "same test images):",
        "",
    ]
    for r in reruns:
        old = r["replaces"]
        line = (
            f"- {r['name']} seed {r['seed']}: {100 * r['test_acc']:.2f}% ({r.get('precision')}, "
            f"{r.get('hardware') or 'machine not recorded'}) replaces {100 * old['test_acc']:.2f}% "
            f"({old.get('precision')}, {old.get('hardware') or 'machine not recorded'})"
        )
        if r.get("test_correct") and old.get("test_correct"):
            new_only, old_only, p = mcnemar(
                [c == "1" for c in r["test_correct"]], [c == "1" for c in old["test_correct"]]
            )
            line += (
                f": McNemar p {p:.2g} ({new_only} test images right only in the re-run, {old_only} only in "
                "the row it replaced)"
            )
        else:
            line += ": no per-image results to pair"
        out.append(line)
    return out
