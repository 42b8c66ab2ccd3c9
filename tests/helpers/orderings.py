"""The suite's ordering rule (docs/results.md), applied to committed rows."""

from __future__ import annotations

from typing import Any

from sa_conv.analysis.statistics import mcnemar, paired_bootstrap


def correct(rows: list[dict[str, Any]]) -> list[list[bool]]:
    """Per row, per test image, whether the row's model got it right."""
    return [[c == "1" for c in r["test_correct"]] for r in rows]


def orderable(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Every seed of one above every seed of the other, McNemar p < 0.05 for every pair, the bootstrap
    interval of the difference of the seed means excluding 0, two seeds each."""
    ra, rb = correct(a), correct(b)
    above = all(x["test_acc"] > y["test_acc"] for x in a for y in b) or all(
        x["test_acc"] < y["test_acc"] for x in a for y in b
    )
    cleared = all(mcnemar(x, y)[2] < 0.05 for x in ra for y in rb)
    _, low, high = paired_bootstrap(ra, rb)
    return above and cleared and (low > 0 or high < 0) and len(a) >= 2 and len(b) >= 2
