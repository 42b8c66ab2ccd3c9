"""The related papers' claims at `small` (docs/results.md): each verdict computed from the committed rows
and the study's entries, in the words the section's table writes."""

from __future__ import annotations

import json
from typing import Any

from experiments.study.entries import STUDIES
from helpers.orderings import orderable
from helpers.paths import REPO


def entry_rows(name: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The committed `small` rows of entry ``name``, by seed, and its seeds that have none yet."""
    rows = json.loads((REPO / "results" / "small.json").read_text())
    found = sorted((r for r in rows if r["name"] == name), key=lambda r: r["seed"])
    (entry,) = (e for e in STUDIES["small"] if e.name == name)
    return found, [s for s in entry.seeds if s not in {r["seed"] for r in found}]


def waiting(*names: str) -> str | None:
    """``not finished (composite seeds 0, 1; absolute-content seed 1)``, or None when every seed is in."""
    parts = []
    for name in names:
        _, missing = entry_rows(name)
        if missing:
            parts.append(f"{name} seed{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}")
    return f"not finished ({'; '.join(parts)})" if parts else None


def accuracies(name: str) -> str:
    """``composite 56.4% and 57.0% (seeds 0 and 1)``, or ``composite: no run yet``."""
    rows, _ = entry_rows(name)
    if not rows:
        return f"{name}: no run yet"
    return f"{name} " + " and ".join(f"{100 * r['test_acc']:.1f}%" for r in rows) + f" ({seeds(rows)})"


def seeds(rows: list[dict[str, Any]]) -> str:
    """``seed 0`` or ``seeds 0 and 1``."""
    ids = [str(r["seed"]) for r in rows]
    return f"seed {ids[0]}" if len(ids) == 1 else "seeds " + ", ".join(ids[:-1]) + " and " + ids[-1]


def ordering(first: str, second: str) -> str:
    """The verdict on "``first`` above ``second``": the suite's rule over every seed of both."""
    pending = waiting(first, second)
    if pending:
        return pending
    a, b = entry_rows(first)[0], entry_rows(second)[0]
    if not orderable(a, b):
        return "not reproduced: level, the paired tests order neither"
    mean_a, mean_b = (sum(r["test_acc"] for r in rows) / len(rows) for rows in (a, b))
    return f"reproduced: {first} above" if mean_a > mean_b else f"reversed: {second} above"


def less_local(first: str, second: str) -> str:
    """The verdict on "``first``'s attention heads attend less locally than ``second``'s": in every layer,
    every seed of ``first`` has a larger mean attention distance than every seed of ``second``."""
    pending = waiting(first, second)
    if pending:
        return pending
    a, b = entry_rows(first)[0], entry_rows(second)[0]
    layers = range(len(a[0]["layers"]))
    wider = all(
        min(r["layers"][i]["mean_distance"] for r in a) > max(r["layers"][i]["mean_distance"] for r in b)
        for i in layers
    )
    return "reproduced: wider in every layer and seed" if wider else "not reproduced in every layer and seed"


def distances(name: str) -> str:
    """``mixed: 2.10 / 3.00 and 2.20 / 3.10 px`` (layer by layer, seed by seed), or ``no run yet``."""
    rows, _ = entry_rows(name)
    if not rows:
        return f"{name}: no run yet"
    per_seed = " and ".join(
        " / ".join(f"{layer['mean_distance']:.2f}" for layer in r["layers"]) for r in rows
    )
    return f"{name}: {per_seed} px ({seeds(rows)})"
