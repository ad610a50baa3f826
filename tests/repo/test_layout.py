"""The house's size limits (issue 55): no module over 450 lines, benchmarks' README at most
15 KB of current figures (history goes to benchmarks/history.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 450
MAX_BENCHMARKS_README = 15_000
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
