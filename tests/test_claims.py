"""README's "Results at a glance" table, held to the committed results files.

``CLAIMS`` maps each row of the table (by the start of its claim cell) to the texts its "at this scale" and
"number" cells must contain, each one formatted here from results/<scale>.json (or the conversion's JSON)
the way the README writes it. The test cannot pass silently:

- every row of the table must match exactly one entry of ``CLAIMS``, and every entry one row (a row added
  or dropped in README, or here, fails);
- every expected text must appear verbatim in its row (a changed number, in README or in the JSON, fails);
- once the expected texts are taken out of those two cells, no digit may remain (a number written into the
  table without an entry here fails);
- the words that carry a count ("one seed", "two seeds each", "seeds 0 and 1") are checked against the rows
  that exist, and the rows whose cells say no ordering is claimed are checked against the paired tests.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import markdown
from helpers.markdown import table_cells
from helpers.orderings import orderable
from helpers.verdicts import GRID_HEADS, SMALL6_GRID_HEADS, forms_grid, grid_layers, long_rows, verdict

from experiments.study.entries import STUDIES

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Results at a glance"
ALLOWED_WITH_DIGITS = ("ResNet18",)  # names, not numbers


def results(name: str) -> Any:
    return json.loads((REPO / "results" / f"{name}.json").read_text())


def runs(scale: str, name: str) -> list[dict[str, Any]]:
    """Every row of ``name`` in results/<scale>.json, by seed."""
    found = sorted((r for r in results(scale) if r["name"] == name), key=lambda r: r["seed"])
    assert found, f"results/{scale}.json has no {name} row"
    return found


def pct(accuracy: float) -> str:
    return f"{100 * accuracy:.1f}%"


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def seeds(rows: list[dict[str, Any]]) -> str:
    """``seeds 0 and 1`` (two or more) or ``seed 0`` (one), as the README writes them."""
    ids = [str(r["seed"]) for r in rows]
    return f"seed {ids[0]}" if len(ids) == 1 else "seeds " + ", ".join(ids[:-1]) + " and " + ids[-1]


def sharp(rows: list[dict[str, Any]], layer: int = 0) -> str:
    return " and ".join(str(r["layers"][layer]["sharp_heads"]) for r in rows)


def theorem1() -> list[str]:
    conversion = results("convert_all_resnet18_tiny")
    return [
        f"predictions agree on {100 * conversion['agreement']:.1f}% of {conversion['n_images']:,} test images"
    ]


def quadratic_localizes() -> list[str]:
    quadratic = runs("small", "quadratic")
    return [
        f"reproduced in part at `small` ({seeds(quadratic)})",
        f"{sharp(quadratic)} of {quadratic[0]['layers'][0]['heads']} layer-1 heads sharp",
    ]


def deeper_layers_wider() -> list[str]:
    quadratic = runs("small6", "quadratic")
    last_sharp = max(
        max(i + 1 for i, layer in enumerate(r["layers"]) if layer["sharp_heads"] > 0) for r in quadratic
    )
    spans = " and ".join(
        f"{r['layers'][0]['mean_distance']:.2f} -> {r['layers'][-1]['mean_distance']:.2f}" for r in quadratic
    )
    return [
        f"reproduced at `small6` ({quadratic[0]['heads']} heads, {seeds(quadratic)})",
        f"no sharp head above layer {last_sharp} in either seed",
        f"mean attention distance, first -> last layer: {spans} px",
    ]


def per_layer(row: dict[str, Any], key: str) -> str:
    """A row's ``key`` in every layer: ``4, 4, 0, 1, 0, 0``."""
    return ", ".join(str(layer[key]) for layer in row["layers"])


def sixteen_heads() -> list[str]:
    rows = runs("small6", "quadratic-16heads")
    heads, half = rows[0]["heads"], len(rows[0]["layers"]) // 2
    lower, upper = (
        [sum(layer["sharp_heads"] for layer in r["layers"][part]) for r in rows]
        for part in (slice(None, half), slice(half, None))
    )
    # "by halves of the depth, not layer by layer": more sharp heads below in every seed, some above in each
    assert all(low > up > 0 for low, up in zip(lower, upper, strict=True)), (lower, upper)
    counts = " and ".join(per_layer(r, "sharp_heads") for r in rows)
    return [
        f"consistent with it at `small6` ({heads} heads, {seeds(rows)}) when counted by halves of the depth",
        f"sharp heads per layer {counts} of {heads}",
        f"layers 1-{half} against {half + 1}-{2 * half}: "
        + " and ".join(f"{low} against {up}" for low, up in zip(lower, upper, strict=True)),
    ]


def learned_localizes() -> list[str]:
    learned = runs("small", "learned")
    return [
        f"in part at `small` ({seeds(learned)})",
        f"{sharp(learned)} of {learned[0]['layers'][0]['heads']} layer-1 heads sharp",
    ]


def resnet_vs_quadratic() -> list[str]:
    (resnet,) = runs("small", "resnet18")  # "one seed"
    quadratic = runs("small", "quadratic")
    ratio = round(resnet["params"] / quadratic[0]["params"])
    return [
        f"the ResNet18 has {ratio}x the parameters and one seed",
        f"{pct(resnet['test_acc'])} against " + " and ".join(pct(r["test_acc"]) for r in quadratic),
    ]


def quadratic_vs_learned() -> list[str]:
    quadratic, learned = runs("small", "quadratic"), runs("small", "learned")
    assert len(quadratic) == len(learned) == 2, "the row says two seeds each"
    return [
        "two seeds each",
        f"{pct(mean([r['test_acc'] for r in quadratic]))} against "
        f"{pct(mean([r['test_acc'] for r in learned]))} (seed means)",
    ]


def learned_vs_content() -> list[str]:
    learned = runs("small", "learned")
    (content,) = runs("small", "learned-content")  # "one learned-content seed"
    return [
        "one learned-content seed",
        " and ".join(pct(r["test_acc"]) for r in learned) + f" against {pct(content['test_acc'])}",
    ]


def grid_with_more_training() -> list[str]:
    rows, unfinished = long_rows("small", "quadratic-60ep")
    (epochs,) = {r["epochs"] for r in rows}
    said = verdict({r["seed"]: forms_grid(r) for r in rows}, unfinished)
    fewest = max(r["layers"][0]["sharp_heads"] for r in rows) < GRID_HEADS
    short = [f"fewer than {GRID_HEADS} of them"] if fewest else []
    return [
        said,
        *short,
        f"at `small` in {epochs} epochs",
        " and ".join(
            f"{sharp([r])} sharp heads on {r['layers'][0]['sharp_distinct_taps']} distinct taps" for r in rows
        ),
    ]


def middle_grid_with_more_training() -> list[str]:
    rows, unfinished = long_rows("small6", "quadratic-45ep")
    (epochs,) = {r["epochs"] for r in rows}
    said = verdict({r["seed"]: bool(grid_layers(r)) for r in rows}, unfinished)
    grids = sorted({i for r in rows for i in grid_layers(r)})
    where = (
        f"layer {' and '.join(map(str, grids))} with at least {SMALL6_GRID_HEADS} sharp heads on as many taps"
        if grids
        else f"no layer from 3 on has {SMALL6_GRID_HEADS} sharp heads on as many taps"
    )
    return [
        said,
        f"at `small6` in {epochs} epochs",
        where,
        *(
            f"sharp heads per layer {per_layer(r, 'sharp_heads')} of {r['heads']}, "
            f"on {per_layer(r, 'sharp_distinct_taps')} distinct taps"
            for r in rows
        ),
    ]


# the start of each row's claim cell -> the texts its "at this scale" and "number" cells hold
CLAIMS: dict[str, Callable[[], list[str]]] = {
    "Theorem 1:": theorem1,
    "first-layer quadratic heads": quadratic_localizes,
    "deeper layers attend wider": deeper_layers_wider,
    "with 16 heads": sixteen_heads,
    "with 4x the training": grid_with_more_training,
    "with 3x the training": middle_grid_with_more_training,
    "learned relative heads localize": learned_localizes,
    "Table 1: quadratic attention matches ResNet18": resnet_vs_quadratic,
    "Table 1: quadratic above learned relative": quadratic_vs_learned,
    "Table 1: learned relative above learned relative + content": learned_vs_content,
}


def section() -> str:
    return markdown.section((REPO / "README.md").read_text(), SECTION)


def table_rows() -> list[list[str]]:
    """The results table's body rows, as cells (header and separator left out)."""
    table = section()[section().index("\n|") :]
    assert "claim" in table.strip().splitlines()[0], "the results table is missing"
    rows = table_cells(table)
    for row in rows:
        assert len(row) == 4, f"a row of four cells (claim, at this scale, number, evidence): {row}"
    return rows


def row_for(key: str) -> list[str]:
    matches = [row for row in table_rows() if row[0].startswith(key)]
    assert len(matches) == 1, f"{len(matches)} rows of README's results table start with {key!r}"
    return matches[0]


def test_every_row_is_covered_and_no_other() -> None:
    rows = table_rows()
    assert len(rows) == len(CLAIMS), f"README's table has {len(rows)} rows, CLAIMS covers {len(CLAIMS)}"
    for row in rows:
        keys = [key for key in CLAIMS if row[0].startswith(key)]
        assert len(keys) == 1, f"row {row[0]!r} matches {keys} in CLAIMS"
        assert re.search(r"\d", row[2]), f"row {row[0]!r} quotes no number"
        assert row[3].count("](") == 1, f"row {row[0]!r}: one evidence link"


@pytest.mark.parametrize("key", list(CLAIMS))
def test_row_numbers_equal_their_json(key: str) -> None:
    row = row_for(key)
    cells = " | ".join(row[1:3])
    rest = cells
    for expected in CLAIMS[key]():
        assert expected in cells, f"README row {key!r} should read {expected!r}; it has: {cells!r}"
        rest = rest.replace(expected, " ")
    for name in ALLOWED_WITH_DIGITS:
        rest = rest.replace(name, " ")
    stray = re.findall(r"[^\s|]*\d[^\s|]*", rest)
    assert not stray, (
        f"README row {key!r} quotes {stray}, which no results file backs here (add it to CLAIMS)"
    )


def test_the_scale_the_table_states() -> None:
    """The section's opening: the study's budget (15 epochs) for every `small`/`small6` row but the longer
    runs (whose rows state their own epochs), 2,000 test images, the hardware."""
    longer = {e.name for scale in ("small", "small6") for e in STUDIES[scale] if "epochs" in e.overrides}
    text = " ".join(section().split())
    rows = [r for r in results("small") + results("small6") if r["name"] not in longer]
    epochs = {r["epochs"] for r in rows}
    assert len(epochs) == 1 and f"for {epochs.pop()} epochs" in text
    images = {r["n_test_images"] for r in rows}
    assert len(images) == 1 and f"holds {images.pop():,} JPEG images" in text
    assert f"({machines_of_the_rows()})" in text


CPU = {"Intel(R) Xeon(R) Processor": "Intel Xeon", "AMD EPYC": "AMD EPYC"}


def machines_of_the_rows() -> str:
    """Where each study's rows ran, as README's opening says it: "the `small` rows on AMD EPYC, the `small6`
    rows on Intel Xeon"; a study's rows on a second CPU are named, "(quadratic seed 0 on AMD EPYC)"."""
    parts = []
    for scale in ("small", "small6"):
        rows = results(scale)
        unknown = sorted({r["hardware"] for r in rows if r["hardware"].split(" (")[0] not in CPU})
        assert not unknown, f"name these CPUs in CPU (how README's opening says them): {unknown}"
        cpu = [CPU[r["hardware"].split(" (")[0]] for r in rows]
        usual, *others = [m for m, _ in Counter(cpu).most_common()]
        seeds_of = Counter(r["name"] for r in rows)
        part = f"the `{scale}` rows on {usual}"
        for other in others:
            named = [
                r["name"] if seeds_of[r["name"]] == 1 else f"{r['name']} seed {r['seed']}"
                for r, m in zip(rows, cpu, strict=True)
                if m == other
            ]
            listed = ", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else named[0]
            part += f" ({listed} on {other})"
        parts.append(part)
    return ", ".join(parts)


@pytest.mark.parametrize(
    ("key", "first", "second"),
    [
        ("Table 1: quadratic attention matches ResNet18", "quadratic", "resnet18"),
        ("Table 1: quadratic above learned relative", "quadratic", "learned"),
        ("Table 1: learned relative above learned relative + content", "learned", "learned-content"),
    ],
)
def test_no_ordering_where_the_table_claims_none(key: str, first: str, second: str) -> None:
    row = row_for(key)
    assert "no ordering" in row[1] or "order neither" in row[1]
    assert not orderable(runs("small", first), runs("small", second)), f"{key}: the rule now orders them"


@pytest.mark.parametrize(
    ("key", "texts"),
    [
        ("with 4x the training", grid_with_more_training),
        ("with 3x the training", middle_grid_with_more_training),
    ],
)
def test_the_grid_rows_lead_with_their_verdict(key: str, texts: Callable[[], list[str]]) -> None:
    """The verdict is the cell's first words ("reproduced (...)" is also inside "not reproduced (...)")."""
    said = texts()[0]
    row = row_for(key)
    assert row[1].startswith(said), f"the grid row's verdict is {said!r}; it says {row[1]!r}"
