"""docs/results.md's paired comparisons between the six-layer models and others, held to the committed rows:
each bullet's verdict follows the suite's ordering rule, and every number it quotes is recomputed here."""

from __future__ import annotations

import json
from typing import Any

from helpers.orderings import correct, orderable
from helpers.paths import REPO

from sa_conv.analysis.statistics import mcnemar, paired_bootstrap


def rows(scale: str, name: str) -> list[dict[str, Any]]:
    """The committed rows of ``name`` at ``scale``, by seed."""
    found = json.loads((REPO / "results" / f"{scale}.json").read_text())
    return sorted((r for r in found if r["name"] == name), key=lambda r: r["seed"])


def text() -> str:
    """docs/results.md, its whitespace folded."""
    return " ".join((REPO / "docs" / "results.md").read_text().split())


def p_values(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[str]:
    """McNemar's p for every pair of seeds (each of ``a`` against each of ``b``), as the report writes it."""
    return [f"{mcnemar(x, y)[2]:.2g}" for x in correct(a) for y in correct(b)]


def test_six_layers_against_two() -> None:
    six, two = rows("small6", "quadratic"), rows("small", "quadratic")
    assert orderable(six, two), "the rule no longer orders six layers above two: reword the bullet"
    doc = text()
    assert "**Six layers above two: an ordering at this scale.**" in doc
    gaps = [100 * (s["test_acc"] - t["test_acc"]) for s in six for t in two]
    assert f"six layers are {min(gaps):.1f} to {max(gaps):.2f} points higher for each of the four" in doc
    p = p_values(six, two)
    assert (
        f"McNemar p {p[0]} (6-layer seed 0 against 2-layer seed 0), {p[1]} (0 against 1), {p[2]} (1 against "
        f"0) and {p[3]} (1 against 1)"
    ) in doc
    diff, low, high = paired_bootstrap(correct(six), correct(two))
    assert (
        f"difference of the seed means {100 * diff:+.1f} points, 95% bootstrap interval "
        f"[{100 * low:+.1f}, {100 * high:+.1f}]"
    ) in doc


def test_nine_heads_against_sixteen() -> None:
    nine, sixteen = rows("small6", "quadratic"), rows("small6", "quadratic-16heads")
    doc = text()
    ordered = orderable(nine, sixteen)
    heading = "**9 heads above 16: an ordering" if ordered else "**9 heads against 16: no ordering claimed.**"
    assert heading in doc
    diff, low, high = paired_bootstrap(correct(nine), correct(sixteen))
    assert f"9 heads are {100 * diff:.1f} points higher on the seed means" in doc
    p = p_values(nine, sixteen)
    assert (
        f"McNemar p {p[0]} and {p[1]} (9-head seed 0 against 16-head seeds 0 and 1), {p[2]} and {p[3]} "
        f"(9-head seed 1 against them), 95% bootstrap interval [{100 * low:+.1f}, {100 * high:+.1f}]"
    ) in doc
    float32 = [[x, y] for x in nine for y in sixteen if x["precision"] == y["precision"] == "32-true"]
    gaps = [f"{100 * (x['test_acc'] - y['test_acc']):+.1f}" for x, y in float32]
    ps = [f"{mcnemar(*correct(pair))[2]:.2g}" for pair in float32]
    close = f"({gaps[0]} points, p {ps[0]}; {gaps[1]}, p {ps[1]})"
    assert f"The two float32 pairs are the close ones {close}" in doc
