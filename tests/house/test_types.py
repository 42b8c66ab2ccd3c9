"""The library's types hold: ``typing.Any`` (and every alias of it) appears at most ``MOST_ANY`` times in
``sa_conv/``, counted with ``ast`` (half the 192 it had when its records were dicts); where it is left it
is a library's own type (a Lightning hook's, torch's parameter groups) or a checked reader's inside."""

from __future__ import annotations

import ast

from helpers import REPO

MOST_ANY = 96


def any_names(source: str) -> int:
    """How many times a module names ``typing.Any``: ``Any``, ``typing.Any``, or an alias imported as."""
    tree = ast.parse(source)
    aliases = {"Any"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "typing":
            aliases |= {a.asname or a.name for a in node.names if a.name == "Any"}
    return sum(
        (isinstance(node, ast.Name) and node.id in aliases)
        or (isinstance(node, ast.Attribute) and node.attr == "Any")
        for node in ast.walk(tree)
    )


def test_the_count_sees_every_form_of_any() -> None:
    source = (
        "from typing import Any\nfrom typing import Any as A\nimport typing\nx: Any\ny: A\nz: typing.Any\n"
    )
    assert any_names(source) == 3  # every use (x, y, z), not the imports


def test_any_is_at_most_half_what_it_was() -> None:
    count = sum(any_names(path.read_text()) for path in (REPO / "sa_conv").rglob("*.py"))
    assert count <= MOST_ANY, f"typing.Any appears {count} times in sa_conv/ (at most {MOST_ANY})"
