"""Markdown as the docs' claim tests read it: a section of a page and the rows of a table."""

from __future__ import annotations

from itertools import takewhile


def section(text: str, heading: str) -> str:
    """The body of the one section under ``heading`` (a line such as ``## Results at a glance``), to the
    next section of its level."""
    assert text.count(heading) == 1, f"no single {heading!r} section"
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def table_cells(lines: str) -> list[list[str]]:
    """The body rows, as cells, of the table that ``lines`` start with (its separator line first, or its
    header then its separator)."""
    rows = list(takewhile(lambda line: line.startswith("|"), lines.strip().splitlines()))
    if rows and set(rows[0].replace("|", "").split()) != {"---"}:
        rows = rows[1:]  # the header
    separator, *body = rows
    assert set(separator.replace("|", "").split()) == {"---"}, f"not a table's separator: {separator!r}"
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in body]
