"""The house's shape: no module over 400 lines, the README at most 10 KB, benchmarks' README at
most 15 KB of current figures (history goes to benchmarks/history.md), docs/faults.md one table
of at most 15 KB, and the layers of docs/extending.md: no import runs up a layer, none comes
back in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 400
MAX_BENCHMARKS_README = 15_000
MAX_FAULTS = 15_000  # docs/faults.md: one table of fault classes
MAX_README = 10_000  # the front page: what, quick start, results, commands, map, links
MODULES = sorted(
    path.relative_to(REPO).as_posix()
    for folder in ("src", "stages", "benchmarks", "examples")
    for path in (REPO / folder).rglob("*.py")
)


@pytest.mark.parametrize("module", MODULES)
def test_no_module_over_the_line_limit(module: str) -> None:
    lines = len((REPO / module).read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module}: {lines} lines; split it by job (at most {MAX_LINES})"


def test_benchmarks_readme_holds_current_figures_only() -> None:
    size = (REPO / "benchmarks" / "README.md").stat().st_size
    assert size <= MAX_BENCHMARKS_README, (
        f"benchmarks/README.md: {size} bytes; move older rows to benchmarks/history.md"
    )


def test_the_readme_is_a_front_page() -> None:
    size = (REPO / "README.md").stat().st_size
    assert size <= MAX_README, (
        f"README.md: {size} bytes; details go to docs/, timings to benchmarks/, history to "
        "docs/history.md"
    )


def test_the_fault_table_stays_one_screenful_a_class() -> None:
    size = (REPO / "docs" / "faults.md").stat().st_size
    assert size <= MAX_FAULTS, (
        f"docs/faults.md: {size} bytes; one row a class of fault, one sentence each"
    )


def layers() -> dict[str, int]:
    """Each module or package of `src/sentemb` -> its layer (0 the lowest), from the list in
    docs/extending.md's "Layers"."""
    text = (REPO / "docs" / "extending.md").read_text(encoding="utf-8")
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    lines = [line for line in block.splitlines() if line.strip()]
    return {
        f"sentemb.{name.strip()}": len(lines) - 1 - rank
        for rank, line in enumerate(lines)
        for name in line.split(",")
    }


def imports() -> dict[str, set[str]]:
    """Every module of `src/sentemb` -> the modules of it that it imports anywhere (at the top,
    under `TYPE_CHECKING`, inside a function)."""
    root = REPO / "src"
    modules = {
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
        for path in root.rglob("*.py")
    }

    def module_of(name: str) -> str | None:  # `sentemb.a.b.C` -> `sentemb.a.b`
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            found |= {module_of(t) for t in targets if t.split(".")[0] == "sentemb"}
        graph[name] = found - {name, None}
    return graph


def layer_of(module: str, table: dict[str, int]) -> int | None:
    """The layer of `module`: its own line, else its package's."""
    while module and module not in table:
        module = module.rpartition(".")[0]
    return table.get(module)


def test_every_module_has_a_layer() -> None:
    table = layers()
    unplaced = sorted(m for m in imports() if m != "sentemb" and layer_of(m, table) is None)
    assert not unplaced, f"add them to a line of docs/extending.md's Layers: {unplaced}"


def test_no_import_runs_up_a_layer() -> None:
    table = layers()
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in imports().items()
        for target in targets
        if module != "sentemb" and layer_of(target, table) > layer_of(module, table)
    )
    assert not upward, f"imports from a higher layer (docs/extending.md, Layers): {upward}"


def test_no_circle_of_imports() -> None:
    graph = imports()
    circles = [sorted(group) for group in strongly_connected(graph) if len(group) > 1]
    assert not circles, f"modules that import each other, directly or through others: {circles}"


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of `graph` (iterative, any size)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    group.add(member)
                    if member == node:
                        break
                groups.append(group)
    return groups
