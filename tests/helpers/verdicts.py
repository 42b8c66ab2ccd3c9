"""The grid issue's questions about the longer runs: their thresholds, the committed rows they read, and the
verdict a set of seeds gives (read by docs/results.md's verdict table and README's row, both tested)."""

from __future__ import annotations

import json
from typing import Any

from experiments.study.entries import STUDIES
from helpers.paths import REPO

GRID_HEADS = 8  # layer 1 of `small`: at least this many sharp heads on at least this many distinct taps
MOVED_PX = 1.0  # the centres move: a median displacement from initialization of at least this, in pixels
SMALL6_GRID_HEADS = 6  # a layer >= 3 of `small6` forms a grid: this many sharp heads on as many taps
OUTWARD_PX = 0.5  # `small6`'s later layers (4-6) move outward: each one's median outward shift, pixels


def long_rows(scale: str, name: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The committed rows of a longer entry, by seed, and the entry's seeds that have none yet."""
    path = REPO / "results" / f"{scale}.json"
    rows = sorted((r for r in json.loads(path.read_text()) if r["name"] == name), key=lambda r: r["seed"])
    (entry,) = (e for e in STUDIES[scale] if e.name == name)
    return rows, [s for s in entry.seeds if s not in {r["seed"] for r in rows}]


def forms_grid(row: dict[str, Any]) -> bool:
    """Layer 1 has at least ``GRID_HEADS`` sharp heads on at least as many distinct taps."""
    layer = row["layers"][0]
    return layer["sharp_heads"] >= GRID_HEADS and layer["sharp_distinct_taps"] >= GRID_HEADS


def grid_layers(row: dict[str, Any]) -> list[int]:
    """The layers >= 3 (1-based) with at least ``SMALL6_GRID_HEADS`` sharp heads on as many distinct taps."""
    return [
        i
        for i, layer in enumerate(row["layers"], start=1)
        if i >= 3 and min(layer["sharp_heads"], layer["sharp_distinct_taps"]) >= SMALL6_GRID_HEADS
    ]


def moves_outward(row: dict[str, Any]) -> bool:
    """Each of layers 4-6 moved its heads' median centre at least ``OUTWARD_PX`` farther from the query."""
    assert len(row["layers"]) == 6, "a six-layer row"
    return all(layer["median_outward"] >= OUTWARD_PX for layer in row["layers"][3:6])


def verdict(passed: dict[int, bool], unfinished: list[int]) -> str:
    """``reproduced`` (every finished seed), ``not reproduced`` (none) or ``reproduced in seed k only``,
    then the seeds it rests on and those not finished: ``reproduced (seed 0; seed 1 not finished)``;
    ``not finished (seed 0)`` while no seed has finished."""
    if not passed:
        assert unfinished, "a verdict needs a run"
        return f"not finished (seed{'s' if len(unfinished) > 1 else ''} {', '.join(map(str, unfinished))})"
    held = [s for s, ok in passed.items() if ok]
    if len(held) == len(passed):
        word = "reproduced"
    elif not held:
        word = "not reproduced"
    else:
        word = "reproduced in seed " + ", ".join(map(str, held)) + " only"
    seeds = ", ".join(map(str, passed))
    scope = f"seed {seeds}" if len(passed) == 1 else f"seeds {seeds}"
    if unfinished:
        scope += "; seed " + ", ".join(map(str, unfinished)) + " not finished"
    return f"{word} ({scope})"
