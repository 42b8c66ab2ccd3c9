"""The docs read in minutes: docs/results.md in short paragraphs and table cells, README short, every relative
link in README and docs/ pointing at a file (and a heading) that exists.

A paragraph is a block of lines between blank lines, leaving out fenced code, tables (rows starting ``|``),
headings and images; each item of a bullet or numbered list is a paragraph of its own. Words are counted as
``len(text.split())``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.paths import REPO

RESULTS = REPO / "docs" / "results.md"
PARAGRAPH_WORDS = 150  # the most words a prose paragraph of docs/results.md may hold
CELL_WORDS = 40  # the most words a table cell of docs/results.md may hold
README_WORDS = 1200  # the most words README.md may hold, code and tables included

LINKED = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")


def blocks(text: str) -> list[tuple[int, list[str]]]:
    """The blocks of non-blank lines outside fenced code, each with the number of its first line."""
    found: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start = 0
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            if current:
                found.append((start, current))
            current = []
            continue
        if fenced or not line.strip():
            if current:
                found.append((start, current))
            current = []
            continue
        if not current:
            start = number
        current.append(line)
    if current:
        found.append((start, current))
    return found


def is_prose(line: str) -> bool:
    stripped = line.lstrip()
    return not stripped.startswith(("|", "#", "!["))


def paragraphs(text: str) -> list[tuple[int, str]]:
    """The prose paragraphs of a Markdown text (list items one by one), each with its first line's number."""
    found: list[tuple[int, str]] = []
    for start, lines in blocks(text):
        current: list[str] = []
        first = start
        for offset, line in enumerate(lines):
            if not is_prose(line) or ITEM.match(line):
                if current:
                    found.append((first, " ".join(current)))
                current = []
            if is_prose(line):
                if not current:
                    first = start + offset
                current.append(line)
        if current:
            found.append((first, " ".join(current)))
    return found


def cells(row: str) -> list[str]:
    """A table row's cells, split on the ``|`` not escaped with a backslash."""
    parts = re.split(r"(?<!\\)\|", row.strip())
    if parts and not parts[0].strip():
        parts = parts[1:]
    if parts and not parts[-1].strip():
        parts = parts[:-1]
    return [part.strip() for part in parts]


def table_cells(text: str) -> list[tuple[int, str]]:
    """Every table cell of a Markdown text outside fenced code, each with its row's line number."""
    return [
        (start + offset, cell)
        for start, lines in blocks(text)
        for offset, line in enumerate(lines)
        if line.lstrip().startswith("|")
        for cell in cells(line)
    ]


def words(text: str) -> int:
    return len(text.split())


def test_results_paragraphs_are_short() -> None:
    long = [
        f"docs/results.md:{line}: {words(p)} words: {p[:80]!r}..."
        for line, p in paragraphs(RESULTS.read_text())
        if words(p) > PARAGRAPH_WORDS
    ]
    assert not long, (
        f"paragraphs over {PARAGRAPH_WORDS} words (move the detail to docs/results-notes.md):\n"
        + ("\n".join(long))
    )


def test_results_table_cells_are_short() -> None:
    long = [
        f"docs/results.md:{line}: {words(c)} words: {c[:80]!r}..."
        for line, c in table_cells(RESULTS.read_text())
        if words(c) > CELL_WORDS
    ]
    assert not long, f"table cells over {CELL_WORDS} words:\n" + "\n".join(long)


def test_readme_is_short() -> None:
    count = words((REPO / "README.md").read_text())
    assert count <= README_WORDS, f"README.md has {count} words, at most {README_WORDS}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lowercase, characters other than letters,
    digits, spaces, hyphens and underscores dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file: its headings' slugs (a repeated one numbered, as GitHub does) and any
    explicit ``id``/``name`` of an HTML tag."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    text = path.read_text()
    for _, lines in blocks(text):
        for line in lines:
            heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if heading:
                base = slug(heading.group(1))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
    found.update(re.findall(r"""<[^>]+\b(?:id|name)=["']([^"']+)["']""", text))
    return found


LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)


def links(path: Path) -> list[tuple[int, str]]:
    """The link targets of a Markdown file outside code (fenced blocks and inline code spans), each with
    its line number."""
    found: list[tuple[int, str]] = []
    for start, lines in blocks(path.read_text()):
        for offset, line in enumerate(lines):
            prose = re.sub(r"`[^`]*`", "", line)
            targets = LINK.findall(prose) + REFERENCE.findall(prose)
            found.extend((start + offset, target) for target in targets)
    return found


def broken(path: Path) -> list[str]:
    """Each relative link of ``path`` whose file, or whose anchor in a Markdown file, does not exist."""
    problems = []
    for line, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:, ...
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        where = f"{path.relative_to(REPO)}:{line}: ({target})"
        if not linked.exists():
            problems.append(f"{where}: no file {file!r}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: no heading in {linked.relative_to(REPO)} slugs to #{anchor}")
    return problems


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path: Path) -> None:
    problems = broken(path)
    assert not problems, "broken relative links:\n" + "\n".join(problems)


def test_the_parsers() -> None:
    text = "\n".join(
        [
            "# Title",
            "one two three",
            "",
            "```",
            "code that is long",
            "",
            "more code",
            "```",
            "| a | b \\| c |",
            "| --- | --- |",
            "- item one",
            "  continued",
            "- item two",
            "![figure](x.png)",
        ]
    )
    assert paragraphs(text) == [(2, "one two three"), (11, "- item one   continued"), (13, "- item two")]
    assert [c for _, c in table_cells(text)] == ["a", "b \\| c", "---", "---"]
    assert slug("The paper's phenomenon at `small` scale") == "the-papers-phenomenon-at-small-scale"
    assert slug("Six layers (`small6`)") == "six-layers-small6"
    assert slug("bf16: why it diverged, and the precision contract") == (
        "bf16-why-it-diverged-and-the-precision-contract"
    )
