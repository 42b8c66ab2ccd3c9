"""``study --report`` never writes back fewer rows than its results file holds: a file that is not a list
of rows, or a row that is not one of the study's runs (malformed, unknown, repeated), is named in one
line, with a non-zero exit, and both results files are left byte for byte as they were."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, call, one_line_error

from experiments import study


def committed() -> list[dict[str, Any]]:
    """The committed rows of the ``small`` study."""
    return json.loads((REPO / "results" / "small.json").read_text())


def seed_as_word(rows: list[dict[str, Any]]) -> Any:
    rows[3]["seed"] = "zero"
    return rows


def unknown_entry(rows: list[dict[str, Any]]) -> Any:
    rows[5]["name"] = "quadratic-90ep"
    return rows


def repeated(rows: list[dict[str, Any]]) -> Any:
    return [*rows, rows[0]]


def nameless(rows: list[dict[str, Any]]) -> Any:
    del rows[2]["name"]
    return rows


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (seed_as_word, "row 4 is not a run's row"),
        (unknown_entry, "row 6 ('quadratic-90ep' seed 0) is no run of this study"),
        (repeated, "repeats an earlier row"),
        (nameless, "row 3 is not a run's row"),
        (lambda rows: {"rows": rows}, "must be a list of rows, not an object"),
        (lambda rows: [1, 2, 3], "row 1 is not a run's row"),
        (lambda rows: [*rows, None], "is not a run's row"),
    ],
)
def test_a_malformed_results_file_is_named_and_left_as_it_is(tmp_path: Path, capsys, change, named) -> None:
    out = tmp_path / "results"
    out.mkdir()
    text = json.dumps(change(committed()), indent=1)
    (out / "small.json").write_text(text)
    (out / "small.md").write_text("the table as it was\n")
    argv = ["--scale", "small", "--synthetic", "--out", str(out), "--report", "--no-figures"]
    code, _, err = call(study, argv, capsys)
    line = one_line_error(code, err)
    assert named in line and "left as it is" in line and len(line) < 400
    assert (out / "small.json").read_text() == text
    assert (out / "small.md").read_text() == "the table as it was\n"
