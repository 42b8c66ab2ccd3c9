"""docs/results.md "The related papers' claims at `small`": each row's verdict and numbers computed from
results/small.json and the study's entries (a run that lands, or a number that changes, fails it until the
row says so)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from helpers import markdown
from helpers.markdown import table_cells
from helpers.paths import REPO
from helpers.related import accuracies, distances, less_local, ordering

SECTION = "## The related papers' claims at `small`"

# the start of each claim cell -> (its verdict, the texts its number cell holds)
CLAIMS: dict[str, Callable[[], tuple[str, list[str]]]] = {
    "Chang et al.: composite attention above content attention with absolute positions": lambda: (
        ordering("composite", "absolute-content"),
        [accuracies("composite"), accuracies("absolute-content")],
    ),
    "Chang et al.: composite attention against learned relative + content": lambda: (
        ordering("composite", "learned-content"),
        [accuracies("composite"), accuracies("learned-content")],
    ),
    "ConvBERT: mixed attention above its absolute-position baseline": lambda: (
        ordering("mixed", "absolute-content"),
        [accuracies("mixed"), accuracies("absolute-content")],
    ),
    "ConvBERT: beside convolution heads, mixed's attention heads attend less locally": lambda: (
        less_local("mixed", "absolute-content"),
        [distances("mixed"), distances("absolute-content")],
    ),
    "Table 1 at two seeds: quadratic attention against ResNet18": lambda: (
        ordering("quadratic", "resnet18"),
        [accuracies("quadratic"), accuracies("resnet18")],
    ),
}


def rows() -> list[list[str]]:
    body = markdown.section((REPO / "docs" / "results.md").read_text(), SECTION)
    table = table_cells(body[body.index("\n|") :])
    for row in table:
        assert len(row) == 4, f"a row of four cells (claim, verdict, number, evidence): {row}"
    return table


def test_every_claim_has_one_row_and_no_other() -> None:
    found = rows()
    assert len(found) == len(CLAIMS), f"the table has {len(found)} rows, CLAIMS {len(CLAIMS)}"
    for row in found:
        assert [key for key in CLAIMS if row[0].startswith(key)], f"no claim starts {row[0]!r}"


@pytest.mark.parametrize("key", list(CLAIMS))
def test_verdict_and_numbers_equal_their_json(key: str) -> None:
    (row,) = (r for r in rows() if r[0].startswith(key))
    said, numbers = CLAIMS[key]()
    assert row[1] == said, f"row {key!r}: the rows give {said!r}; it says {row[1]!r}"
    rest = row[2]
    for expected in numbers:
        assert expected in row[2], f"row {key!r} should read {expected!r}; it has: {row[2]!r}"
        rest = rest.replace(expected, " ")
    stray = re.findall(r"[^\s|]*\d[^\s|]*", rest)
    assert not stray, f"row {key!r} quotes {stray}, which no results row backs"


def fake_rows(accuracy: float, right: int, distances: list[float], seed: int) -> dict[str, object]:
    """A results row: its accuracy, the first ``right`` of 2,000 test images right, its layers' distances."""
    return {
        "seed": seed,
        "test_acc": accuracy,
        "test_correct": "1" * right + "0" * (2000 - right),
        "layers": [{"mean_distance": d} for d in distances],
    }


@pytest.mark.parametrize(
    ("first", "second", "verdict"),
    [
        ((0.75, 1500), (0.60, 1200), "reproduced: a above"),
        ((0.60, 1200), (0.75, 1500), "reversed: b above"),
        ((0.60, 1200), (0.601, 1202), "not reproduced: level, the paired tests order neither"),
    ],
)
def test_the_ordering_words(monkeypatch: pytest.MonkeyPatch, first, second, verdict) -> None:
    from helpers import related

    table = {
        "a": ([fake_rows(*first, [1.0], s) for s in (0, 1)], []),
        "b": ([fake_rows(*second, [1.0], s) for s in (0, 1)], []),
    }
    monkeypatch.setattr(related, "entry_rows", lambda name: table[name])
    assert related.ordering("a", "b") == verdict


def test_less_local_needs_every_layer_and_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import related

    table = {
        "mixed": ([fake_rows(0.5, 1000, [3.0, 4.0], s) for s in (0, 1)], []),
        "base": ([fake_rows(0.5, 1000, [2.0, 3.9], 0), fake_rows(0.5, 1000, [2.5, 3.5], 1)], []),
    }
    monkeypatch.setattr(related, "entry_rows", lambda name: table[name])
    assert related.less_local("mixed", "base") == "reproduced: wider in every layer and seed"
    table["base"][0][1]["layers"][1]["mean_distance"] = 4.1  # one seed's layer 2 wider than mixed's
    assert related.less_local("mixed", "base") == "not reproduced in every layer and seed"
    table["base"] = ([], [0, 1])
    assert related.less_local("mixed", "base") == "not finished (base seeds 0, 1)"
