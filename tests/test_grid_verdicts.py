"""docs/results.md "Does the grid form?": each verdict on the longer runs, held to results/<scale>.json.

The section's verdict table asks the grid issue's questions, each with its threshold. For each question
``QUESTIONS`` formats, from the committed rows of the longer runs, the numbers the row must quote and
decides the verdict by the threshold, so the test fails when a number changes (in the docs or in the JSON),
when a verdict is not the one its numbers give, or when a number is written into the table that no results
file backs. Seeds of an entry with no row yet must be named as not finished.

results.md's tables quote each run's final numbers; the same tables in docs/results-notes.md (its section of
the same name) quote them with the numbers at every milestone, and are held to the JSON the same way.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO
from helpers.markdown import section, table_cells
from helpers.verdicts import (
    GRID_HEADS,
    MOVED_PX,
    OUTWARD_PX,
    SMALL6_GRID_HEADS,
    forms_grid,
    grid_layers,
    long_rows,
    moves_outward,
    verdict,
)

from experiments.study.milestones import at_milestones
from experiments.study.row import StudyRow

RESULTS = REPO / "docs" / "results.md"
NOTES = REPO / "docs" / "results-notes.md"  # the verdict tables again, with every milestone
SECTION = "## Does the grid form?"
TABLE = "| question (threshold) | verdict | numbers |"
BUDGET = 15  # the study's epochs: the milestones of a longer run are its multiples


def marks(row: dict[str, Any]) -> str:
    """The epochs of a longer run's milestones: ``15/30/45``."""
    return "/".join(str(epoch) for epoch, _ in at_milestones(StudyRow.from_json(row), BUDGET))


def curve(row: dict[str, Any], key: str, form: str = "{}") -> str:
    """Layer 1's ``key`` at every multiple of the study's budget: ``5 / 6 / 6 / 6``."""
    return " / ".join(
        form.format(getattr(s.layers[0], key)) for _, s in at_milestones(StudyRow.from_json(row), BUDGET)
    )


def grid_in_layer1(milestones: bool) -> list[str]:
    rows, unfinished = long_rows("small", "quadratic-60ep")
    texts = [verdict({r["seed"]: forms_grid(r) for r in rows}, unfinished)]
    for r in rows:
        epochs = marks(r)
        layer = r["layers"][0]
        text = (
            f"seed {r['seed']}: {layer['sharp_heads']} sharp heads on {layer['sharp_distinct_taps']} "
            f"distinct taps at {r['epochs']} epochs"
        )
        if milestones:
            text += (
                f"; at {epochs} epochs: sharp heads {curve(r, 'sharp_heads')}, "
                f"distinct taps {curve(r, 'sharp_distinct_taps')}"
            )
        texts.append(text)
    return texts


def centres_move(milestones: bool) -> list[str]:
    rows, unfinished = long_rows("small", "quadratic-60ep")
    passed = {r["seed"]: r["layers"][0]["median_displacement"] >= MOVED_PX for r in rows}
    texts = [verdict(passed, unfinished)]
    for r in rows:
        moved = [f"{layer['median_displacement']:.2f}" for layer in r["layers"]]
        text = f"seed {r['seed']}: layer 1 {moved[0]} px, layer 2 {moved[1]} px"
        if milestones:
            text += f"; layer 1 over training {curve(r, 'median_displacement', '{:.2f}')} px"
        texts.append(text)
    return texts


def no_overlap(milestones: bool) -> list[str]:  # the final taps only, in both tables
    rows, unfinished = long_rows("small", "quadratic-60ep")
    passed = {
        r["seed"]: r["layers"][0]["sharp_distinct_taps"] == r["layers"][0]["sharp_heads"] > 0 for r in rows
    }
    texts = [verdict(passed, unfinished)]
    for r in rows:
        layer = r["layers"][0]
        taps = ", ".join(f"({y}, {x})" for y, x in sorted({tuple(t) for t in layer["sharp_taps"]}))
        texts.append(f"seed {r['seed']}: taps {taps}")
        texts.append(f"overlap {layer['overlap']:.2f}")
    return texts


def per_layer(snapshot: dict[str, Any], key: str, form: str = "{}", layers: slice = slice(None)) -> str:
    """One snapshot's ``key`` in each of ``layers``: ``4 / 3 / 0 / 1 / 0 / 0``."""
    return " / ".join(form.format(layer[key]) for layer in snapshot["layers"][layers])


TRAINING = "training, carried in `weights/unfinished/`"  # the numbers cell while no seed has finished


def grid_in_a_middle_layer(milestones: bool) -> list[str]:
    rows, unfinished = long_rows("small6", "quadratic-45ep")
    texts = [verdict({r["seed"]: bool(grid_layers(r)) for r in rows}, unfinished)]
    for r in rows:
        epochs = marks(r)
        most = " / ".join(
            str(max(la.sharp_distinct_taps or 0 for la in s.layers[2:]))
            for _, s in at_milestones(StudyRow.from_json(r), BUDGET)
        )
        text = (
            f"seed {r['seed']}, layers 1-6 at {r['epochs']} epochs: sharp heads "
            f"{per_layer(r, 'sharp_heads')} on {per_layer(r, 'sharp_distinct_taps')} distinct taps"
        )
        if milestones:
            text += f"; the most distinct taps of sharp heads in a layer >= 3 at {epochs} epochs: {most}"
        texts.append(text)
    return texts if rows else [*texts, TRAINING]


def later_layers_move_outward(milestones: bool) -> list[str]:
    rows, unfinished = long_rows("small6", "quadratic-45ep")
    texts = [verdict({r["seed"]: moves_outward(r) for r in rows}, unfinished)]
    for r in rows:
        text = (
            f"seed {r['seed']}, median outward of layers 4 / 5 / 6 at {r['epochs']} epochs: "
            f"{per_layer(r, 'median_outward', '{:+.2f}', slice(3, 6))} px"
        )
        if milestones:
            snapshots = [snapshot for _, snapshot in at_milestones(StudyRow.from_json(r), BUDGET)]
            for i in (4, 5, 6):
                over = " / ".join(f"{s.layers[i - 1].median_outward:+.2f}" for s in snapshots)
                text += f"; layer {i} at {marks(r)} epochs {over} px"
        texts.append(text)
    return texts if rows else [*texts, TRAINING]


# the start of each question's cell -> its verdict (the verdict cell starts with it), then the texts its
# numbers cell holds: each run's final numbers, or (given True) each one with its numbers at every milestone
QUESTIONS: dict[str, Callable[[bool], list[str]]] = {
    "layer 1 of `small` forms a grid": grid_in_layer1,
    "the centres move": centres_move,
    "the sharp heads do not overlap": no_overlap,
    "a layer >= 3 of `small6` forms a grid": grid_in_a_middle_layer,
    "layers 4-6 of `small6` move outward": later_layers_move_outward,
}


DOCS = [RESULTS, NOTES]  # results.md quotes the final numbers, the notes every milestone too


def name(doc: Path) -> str:
    return f"docs/{doc.name}"


def table_rows(doc: Path = RESULTS) -> list[list[str]]:
    """The body rows, as cells, of the section's verdict tables (one per longer entry) in ``doc``."""
    body = section(doc.read_text(), SECTION)
    assert body.count(TABLE) >= 1, f"{name(doc)}: the section has no table headed {TABLE!r}"
    return [row for after in body.split(TABLE)[1:] for row in table_cells(after)]


@pytest.mark.parametrize("doc", DOCS, ids=name)
def test_every_question_has_one_row_and_no_other(doc: Path) -> None:
    rows = table_rows(doc)
    assert len(rows) == len(QUESTIONS), (
        f"{name(doc)}: the table has {len(rows)} rows, QUESTIONS {len(QUESTIONS)}"
    )
    for row in rows:
        assert len(row) == 3, f"{name(doc)}: a row of three cells (question, verdict, numbers): {row}"
        assert [key for key in QUESTIONS if row[0].startswith(key)], (
            f"{name(doc)}: no question starts {row[0]!r}"
        )


@pytest.mark.parametrize("key", list(QUESTIONS))
@pytest.mark.parametrize("doc", DOCS, ids=name)
def test_verdict_and_numbers_equal_their_json(doc: Path, key: str) -> None:
    (row,) = (r for r in table_rows(doc) if r[0].startswith(key))
    cells = " | ".join(row[1:])
    rest = cells
    said, *numbers = QUESTIONS[key](doc == NOTES)
    where = f"{name(doc)}, row {key!r}"
    assert row[1].startswith(said), f"{where}: the verdict its numbers give is {said!r}; it says {row[1]!r}"
    if TRAINING not in numbers:  # a finished run's numbers replace the unfinished one's words
        assert TRAINING not in cells, f"{where} still says {TRAINING!r}"
    for expected in [said, *numbers]:
        assert expected in cells, f"{where} should read {expected!r}; it has: {cells!r}"
        rest = rest.replace(expected, " ")
    stray = re.findall(r"[^\s|]*\d[^\s|]*", rest)
    assert not stray, f"{where} quotes {stray}, which no results file backs here (add it to QUESTIONS)"


@pytest.mark.parametrize("doc", DOCS, ids=name)
def test_the_thresholds_the_questions_state(doc: Path) -> None:
    questions = " ".join(" ".join(r[0] for r in table_rows(doc)).split())
    assert f"at least {GRID_HEADS} sharp heads on at least {GRID_HEADS} distinct taps" in questions
    assert f"at least {MOVED_PX:g} pixel" in questions
    assert (
        f"at least {SMALL6_GRID_HEADS} sharp heads on at least {SMALL6_GRID_HEADS} distinct taps" in questions
    )
    assert f"median outward shift at least {OUTWARD_PX:+g} pixel" in questions


def six_layers(sharp: list[int], taps: list[int], outward: list[float]) -> dict[str, Any]:
    """A `small6` row's final layers with these sharp heads, distinct taps and median outward shifts."""
    keys = ("sharp_heads", "sharp_distinct_taps", "median_outward")
    return {
        "layers": [dict(zip(keys, values, strict=True)) for values in zip(sharp, taps, outward, strict=True)]
    }


def test_the_six_layer_thresholds() -> None:
    outward = [-0.5, 0.0, 0.1, 0.5, 0.7, 1.2]
    grid = six_layers([9, 2, 6, 7, 0, 0], [8, 2, 6, 5, 0, 0], outward)
    assert grid_layers(grid) == [3] and moves_outward(grid)  # layer 1's grid does not count; 4's 7 on 5 not
    short = six_layers([9, 2, 6, 7, 0, 0], [8, 2, 5, 5, 0, 0], [*outward[:5], 0.49])
    assert grid_layers(short) == [] and not moves_outward(short)


@pytest.mark.parametrize(
    ("passed", "unfinished", "expected"),
    [
        ({0: True}, [1], "reproduced (seed 0; seed 1 not finished)"),
        ({0: False, 1: False}, [], "not reproduced (seeds 0, 1)"),
        ({0: False, 1: True}, [], "reproduced in seed 1 only (seeds 0, 1)"),
        ({}, [0], "not finished (seed 0)"),
    ],
)
def test_verdict_words(passed: dict[int, bool], unfinished: list[int], expected: str) -> None:
    assert verdict(passed, unfinished) == expected


def section_text() -> str:
    """The section's prose, its whitespace folded."""
    text = RESULTS.read_text()
    return " ".join(text.split(SECTION, 1)[1].split("\n## ", 1)[0].split())


def test_the_small6_questions_state_their_thresholds() -> None:
    text = section_text()
    assert f"(>= {SMALL6_GRID_HEADS} sharp heads on >= {SMALL6_GRID_HEADS} distinct taps)" in text
    assert f"each of layers 4-6: its heads' median outward shift at least {OUTWARD_PX:+g} pixel" in text


def test_the_outward_shifts_the_section_quotes() -> None:
    """Layer 2 moves out, layer 1 hardly: the medians quoted for the 15-epoch seed 0 and the 60-epoch runs."""
    text = section_text()
    (budget,) = (
        r
        for r in json.loads((REPO / "results/small.json").read_text())
        if r["name"] == "quadratic" and r["seed"] == 0
    )
    first, second = (layer["median_outward"] for layer in budget["layers"])
    assert f"(median outward {first:+.2f} pixels) while layer 2's moved out ({second:+.2f})" in text
    rows, _ = long_rows("small", "quadratic-60ep")
    (first0, second0), (first1, second1) = ((la["median_outward"] for la in r["layers"]) for r in rows)
    assert f"outward (median {second0:+.2f} and {second1:+.2f} px farther from the query)" in text
    assert f"Layer 1 drew in toward the query in seed 0 (median outward {first0:+.2f} px)" in text
    assert f"moved out a little in seed 1 ({first1:+.2f} px)" in text
    assert first0 < 0 <= first1 < 0.5  # "drew in" and "moved out a little"


@pytest.mark.parametrize("seed", [0, 1])
def test_the_six_layer_motion_the_section_quotes(seed: int) -> None:
    """A six-layer 9-head run's median displacement and outward shift per layer, and which of layers 4-6
    already meet the 45-epoch question's outward threshold at 15 epochs."""
    text = section_text()
    (row,) = (
        r
        for r in json.loads((REPO / "results/small6.json").read_text())
        if r["name"] == "quadratic" and r["seed"] == seed
    )
    layers = row["layers"]
    moved = ", ".join(f"{la['median_displacement']:.2f}" for la in layers)
    outward = ", ".join(f"{la['median_outward']:+.2f}" for la in layers)
    assert f"median displacement per layer {moved} px, median outward {outward} px" in text
    meets = [i for i in (4, 5, 6) if layers[i - 1]["median_outward"] >= OUTWARD_PX]
    assert meets == [5, 6] and layers[0]["median_outward"] < 0  # "layer 1 draws in"
    assert f"layers 5 and 6 already move outward by the {OUTWARD_PX:+g} px" in text
    assert f"layer 4 does not ({layers[3]['median_outward']:+.2f})" in text


def test_the_longer_schedule_against_the_budget_runs() -> None:
    """The 60-epoch runs' accuracies and their paired tests against the 15-epoch runs of the same seeds."""
    from sa_conv.analysis.statistics import mcnemar, paired_bootstrap

    text = section_text()
    rows, unfinished = long_rows("small", "quadratic-60ep")
    assert not unfinished
    budget = {
        r["seed"]: r
        for r in json.loads((REPO / "results/small.json").read_text())
        if r["name"] == "quadratic"
    }
    short = [budget[r["seed"]] for r in rows]
    quoted = " and ".join(f"{100 * r['test_acc']:.2f}%" for r in rows)
    before = " and ".join(f"{100 * r['test_acc']:.2f}%" for r in short)
    assert f"Test accuracy is {quoted}, against {before} for the 15-epoch runs of the same seeds" in text
    longer, shorter = ([[c == "1" for c in r["test_correct"]] for r in group] for group in (rows, short))
    worst = max(mcnemar(a, b)[2] for a in longer for b in shorter)
    assert worst < 0.05 and min(map(sum, longer)) > max(map(sum, shorter))
    difference, high, low = (-v for v in paired_bootstrap(shorter, longer))  # as results/small.md computes it
    assert f"+{100 * difference:.1f} points, 95% interval [+{100 * low:.1f}, +{100 * high:.1f}]" in text
    assert f"McNemar p at most {worst:.2g} for each of the four pairs" in text


def test_the_45_epoch_run_against_the_budget_runs() -> None:
    """The 45-epoch run's accuracy and its paired tests against the 15-epoch `small6` runs (its own seed's
    schedule, and the other seed)."""
    from sa_conv.analysis.statistics import mcnemar, per_image

    rows, unfinished = long_rows("small6", "quadratic-45ep")
    assert not unfinished
    (row,) = rows
    budget = sorted(
        (r for r in json.loads((REPO / "results/small6.json").read_text()) if r["name"] == "quadratic"),
        key=lambda r: r["seed"],
    )
    tests = [mcnemar(per_image(row["test_correct"]), per_image(r["test_correct"])) for r in budget]
    before = " and ".join(f"{100 * r['test_acc']:.2f}%" for r in budget)
    counts = "; ".join(f"{a} against {b} images right only in one, p {p:.2g}" for a, b, p in tests)
    assert (
        f"Test accuracy is {100 * row['test_acc']:.2f}%, against {before} for the 15-epoch runs of seeds "
        f"{' and '.join(str(r['seed']) for r in budget)} (McNemar: {counts})"
    ) in section_text()


def independent_runs(scales: tuple[str, ...] = ("small", "small6")) -> list[dict[str, Any]]:
    """The Gaussian-head rows with an initialization of their own, scale by scale: the budget runs, not a
    bf16 or longer run of a seed (those share their budget run's initialization)."""
    budget_runs = ("quadratic", "quadratic-16heads", "gaussian")
    return [
        row
        for scale in scales
        for row in json.loads((REPO / "results" / f"{scale}.json").read_text())
        if row["name"] in budget_runs
    ]


NUMBER_WORDS = {6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def sign_test(wins: int, runs: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven among ``runs`` fair coins."""
    tail = sum(math.comb(runs, k) for k in range(min(wins, runs - wins) + 1)) / 2**runs
    return min(1.0, 2 * tail)


def test_where_the_sharp_heads_sit() -> None:
    runs = independent_runs()
    taps = [[tuple(t) for layer in r["layers"] for t in layer["sharp_taps"]] for r in runs]
    up, down = ([sum(f(dy) for dy, _ in run) for run in taps] for f in (lambda v: v < 0, lambda v: v > 0))
    right, left = ([sum(f(dx) for _, dx in run) for run in taps] for f in (lambda v: v > 0, lambda v: v < 0))
    above = sum(u > d for u, d in zip(up, down, strict=True))
    assert not any(u == d for u, d in zip(up, down, strict=True))
    sides = [(r > lt) for r, lt in zip(right, left, strict=True) if r != lt]
    text = section_text()
    count = NUMBER_WORDS[len(runs)]  # a run added to the JSON must be counted in the text
    assert f"Over the {count} independent quadratic and Gaussian runs" in text
    counts = (
        f"{sum(up)} of the {sum(map(len, taps))} sharp heads (every layer) attend to a pixel above the query "
        f"and {sum(down)} to one below, {sum(right)} to the right and {sum(left)} to the left"
    )
    assert counts in text
    assert (
        above == len(runs) and f"Every one of the {count} runs has more sharp heads above than below" in text
    )
    on_row, on_column = (sum(t[axis] == 0 for run in taps for t in run) for axis in (0, 1))
    assert f"(the other {on_row} on the query's row, the other {on_column} on its column)" in text
    p_up = sign_test(above, len(runs))
    assert f"two-sided p {p_up:.3f})" in text
    assert f"(Bonferroni: p {2 * p_up:.2f} for the up-down one)" in text
    assert "This is an exploratory finding, not a preregistered one" in text
    wins = sum(sides)
    assert f"splits the runs {max(wins, len(sides) - wins)} to {min(wins, len(sides) - wins)}" in text
    assert f"(p {sign_test(wins, len(sides)):.2f})" in text


def test_layer_1_draws_in_and_layer_2_moves_out_in_every_small_run() -> None:
    runs = independent_runs(("small",))
    inward, outward = ([r["layers"][i]["median_outward"] for r in runs] for i in (0, 1))
    assert len(runs) == 3 and max(inward) < 0 < min(outward)
    text = section_text()
    assert (
        "median outward {}, {} and {} pixels in quadratic seeds 0 and 1 and Gaussian seed 0".format(
            *(f"{v:.2f}" for v in inward)
        )
        in text
    )
    assert "layer 2 moved out ({}, {} and {})".format(*(f"{v:+.2f}" for v in outward)) in text
