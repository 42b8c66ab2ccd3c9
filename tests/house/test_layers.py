"""The house's layers hold: within ``sa_conv`` every import that runs (at module level or inside a
function; not those only the type checker reads) goes down the layers of shared/DESIGN.md (utils, then nn,
then models; data beside them; analysis over models; training on top), none runs up to the package root,
and no two modules import each other, directly or around a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import REPO

PACKAGE = REPO / "sa_conv"
# each layer and the layers below it that it may import (its own always)
BELOW: dict[str, set[str]] = {
    "utils": set(),
    "nn": {"utils"},
    "models": {"nn", "utils"},
    "data": {"utils"},
    "analysis": {"models", "nn", "utils"},
    "training": {"analysis", "data", "models", "nn", "utils"},
}


def module_name(path: Path) -> str:
    """``sa_conv/training/run.py`` -> ``sa_conv.training.run`` (a package: its folder's name)."""
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of a module but those under ``if TYPE_CHECKING:`` (read by the type checker only)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if test is not None and "TYPE_CHECKING" in ast.unparse(test):
            skipped |= {id(child) for body in node.body for child in ast.walk(body)}
    return [node for node in ast.walk(tree) if id(node) not in skipped]


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The ``sa_conv`` modules a file imports when it runs, anywhere in it, functions included (``from a.b
    import c``: ``a.b.c`` where that is a module, else ``a.b``)."""
    found = set()
    for node in runtime_nodes(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names
            ]
        found |= {name for name in names if name == "sa_conv" or name.startswith("sa_conv.")}
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Every module of the package and the package's modules it imports."""
    files = {module_name(p): p for p in root.rglob("*.py")}
    return {name: imports_of(path, set(files)) for name, path in files.items()}


def layer(module: str) -> str | None:
    """The layer of a module: its sub-package (None for the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import that runs up the layers, or to the package root, as ``a -> b``."""
    wrong = []
    for module, targets in graph.items():
        here = layer(module)
        if here is None:
            continue  # the root: the package's face, it may name anything
        for target in targets:
            there = layer(target)
            if there is None or (there != here and there not in BELOW[here]):
                wrong.append(f"{module} -> {target}")
    return sorted(wrong)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles among the package's modules (each found once, from its first module)."""
    found, done = [], set()

    def visit(module: str, path: list[str]) -> None:
        for target in sorted(graph.get(module, ())):
            if target in path:
                circle = path[path.index(target) :]
                if frozenset(circle) not in done:
                    done.add(frozenset(circle))
                    found.append([*circle, target])
            elif target in graph and target not in seen:
                seen.add(target)
                visit(target, [*path, target])

    for start in sorted(graph):
        seen = {start}
        visit(start, [start])
    return found


def test_every_layer_is_named() -> None:
    assert {layer(m) for m in import_graph()} - {None} == set(BELOW)


def test_no_import_runs_up_the_layers() -> None:
    assert upward(import_graph()) == []


def test_no_two_modules_import_each_other() -> None:
    assert circles(import_graph()) == []


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("from sa_conv.training.run import train\n", "sa_conv.nn.bad -> sa_conv.training.run"),
        ("from sa_conv import __version__\n", "sa_conv.nn.bad -> sa_conv"),
        ("def f():\n    import sa_conv.analysis.maps\n", "sa_conv.nn.bad -> sa_conv.analysis.maps"),
    ],
)
def test_the_check_sees_an_arrow_running_up(tmp_path: Path, source: str, problem: str) -> None:
    graph = import_graph()
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    graph["sa_conv.nn.bad"] = imports_of(bad, set(graph))
    assert problem in upward(graph)


def test_the_check_sees_a_circle() -> None:
    graph = import_graph()
    graph["sa_conv.training.module"] = graph["sa_conv.training.module"] | {"sa_conv.training.run"}
    assert any("sa_conv.training.module" in c and "sa_conv.training.run" in c for c in circles(graph))
