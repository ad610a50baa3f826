"""docs/faults.md cites a test for every row, and every test it cites exists; every relative link
of the README, docs/ and benchmarks/ reaches its file and heading.

A row is `| fault class | what happens | test |`. Its test cell holds only citations,
comma-separated: `tests/<path>.py::<name>` (a parametrized `<name>[<id>]` is checked by its
name), `::<name>` for another test of the file cited before it in the cell, or a bare
`tests/<path>.py`. A test renamed or removed fails `test_every_cited_test_exists`, naming the
row's fault class.
"""

from __future__ import annotations

import ast
import re
from functools import cache

import pytest

from support import REPO

PAGE = REPO / "docs" / "faults.md"
HEADER = ["fault class", "what happens", "test"]
CITATION = re.compile(r"(?P<path>tests/[\w/.-]+\.py)?(?:::(?P<name>\w+)(?:\[[^\]]+\])?)?")
MENTION = re.compile(r"tests/[\w/.-]+\.py(?:::\w+)?")  # a citation anywhere on the page


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table row below a header, the header and separators left out."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or re.fullmatch(r"\|[-:| ]+\|", line):
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells != HEADER:
            rows.append(cells)
    return rows


@cache
def defined_tests(path: str) -> frozenset[str] | None:
    """The test functions defined in `path` (module level or in a class); None if no file."""
    file = REPO / path
    if not file.is_file():
        return None
    tree = ast.parse(file.read_text(encoding="utf-8"))
    nodes = [*tree.body, *(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body)]
    functions = [n for n in nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return frozenset(f.name for f in functions if f.name.startswith("test"))


def cell_problems(cell: str) -> list[str]:
    """What is wrong with a test cell: empty, text besides citations, or a citation of a file
    or test that does not exist."""
    tokens = re.findall(r"`([^`]*)`", cell)
    if not tokens:
        return ["cites no test"]
    if re.sub(r"`[^`]*`", "", cell).strip(", "):
        return [f"holds text besides citations: {cell!r}"]
    problems, path = [], None
    for token in tokens:
        match = CITATION.fullmatch(token)
        if not token or match is None or not (match["path"] or match["name"]):
            problems.append(f"`{token}` is no citation of a test")
            continue
        if match["path"]:
            path = match["path"]
        if path is None:
            problems.append(f"`{token}`: no file cited before it")
        elif defined_tests(path) is None:
            problems.append(f"`{token}`: no such file")
        elif match["name"] and match["name"] not in defined_tests(path):
            problems.append(f"`{token}`: {path} defines no test {match['name']}")
    return problems


def page_problems(text: str) -> list[str]:
    """Each problem of the page, with the row (its fault class) or the citation it concerns."""
    problems, prose = [], [line for line in text.splitlines() if not line.startswith("|")]
    for cells in table_rows(text):
        if len(cells) != len(HEADER):
            problems.append(f"{cells[0]}: {len(cells)} cells, not {len(HEADER)}")
            continue
        problems += [f"{cells[0]}: {problem}" for problem in cell_problems(cells[-1])]
        prose += cells[:-1]
    for mention in MENTION.findall("\n".join(prose)):  # tests named outside the test cells
        path, _, name = mention.partition("::")
        tests = defined_tests(path)
        if tests is None or (name and name not in tests):
            problems.append(f"{mention}: no such test")
    return problems


def test_every_row_cites_a_test() -> None:
    rows = table_rows(PAGE.read_text(encoding="utf-8"))
    assert len(rows) > 20, "docs/faults.md has lost its tables"
    bare = [cells[0] for cells in rows if len(cells) != 3 or not cells[-1].strip("` ,")]
    assert not bare, f"rows with no test: {bare}"


def test_every_cited_test_exists() -> None:
    problems = page_problems(PAGE.read_text(encoding="utf-8"))
    assert not problems, "docs/faults.md:\n" + "\n".join(problems)


def test_a_stale_citation_fails() -> None:
    """The check catches a renamed test, a missing file, a `::name` with no file before it,
    an empty test cell, text in it and a row with a cell too few."""
    stale = [
        "| a | b | `tests/repo/test_docs.py::test_no_such_test` |",
        "| a | b | `tests/no_such_file.py` |",
        "| a | b | `tests/repo/test_docs.py`, `::test_renamed[x]` |",
        "| a | b | `::test_every_cited_test_exists` |",
        "| a | b |  |",
        "| a | b | see `tests/repo/test_docs.py` |",
        "| a | `tests/repo/test_docs.py` |",
        "See `tests/repo/test_docs.py::test_gone`.",
    ]
    for line in stale:
        assert page_problems(line), line
    good = (
        "| a | b | `tests/repo/test_docs.py::test_a_stale_citation_fails`,"
        " `::test_every_cited_test_exists[x]` |"
    )
    assert page_problems(good) == []


LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
PAGES = sorted(
    path
    for path in [REPO / "README.md", *REPO.glob("docs/*.md"), *REPO.glob("benchmarks/*.md")]
    if path.is_file()
)


def anchors(path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page: lower case, punctuation
    dropped, spaces as hyphens, a repeated one suffixed `-1`, `-2`, ..."""
    found: set[str] = set()
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in found:
            n += 1
            anchor = f"{slug}-{n}"
        found.add(anchor)
    return found


def broken_links(path) -> list[str]:
    """The relative links of a page whose file, or whose heading anchor, is not there."""
    broken = []
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    for match in LINK.finditer(text):
        target = match["target"]
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading of {linked.name} has that anchor")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_reaches_its_file_and_heading(page) -> None:
    """No page links to a file that moved or a section that was renamed."""
    assert not broken_links(page), f"{page.relative_to(REPO)}: {broken_links(page)}"


def test_a_link_to_a_moved_section_fails(tmp_path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Title\n\n## The papers' setting on one GPU\n")
    page.write_text(
        "[ok](other.md#the-papers-setting-on-one-gpu) [ok](#here)\n\n## Here\n"
        "[gone](other.md#time) [missing](nowhere.md) [web](https://example.org/x#y)\n"
    )
    assert broken_links(page) == [
        "other.md#time: no heading of other.md has that anchor",
        "nowhere.md: no such file",
    ]
