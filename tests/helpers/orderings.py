"""The suite's ordering rule (docs/results.md), applied to committed rows."""

from __future__ import annotations

from typing import Any

from sa_conv.analysis.statistics import compare


def correct(rows: list[dict[str, Any]]) -> list[list[bool]]:
    """Per row, per test image, whether the row's model got it right."""
    return [[c == "1" for c in r["test_correct"]] for r in rows]


def orderable(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Whether the suite's rule (``sa_conv.analysis.statistics.compare``, as the study's tables apply it)
    orders the two entries' rows."""
    accuracy_a, accuracy_b = [r["test_acc"] for r in a], [r["test_acc"] for r in b]
    return compare(correct(a), correct(b), accuracy_a, accuracy_b).ordered
