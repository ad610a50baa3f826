"""dvc.yaml: every stage lists as deps the source files its script imports, so a code change
re-runs exactly the stages it can affect."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"


def module_file(name: str) -> Path | None:
    """The file of module `name` under src/, if it is one of ours."""
    base = SRC / name.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_files(script: Path) -> set[Path]:
    """Our source files `script` imports, transitively (static: every import statement)."""
    seen: set[Path] = set()
    todo = [script]
    while todo:
        tree = ast.parse(todo.pop().read_text(encoding="utf-8"))
        names = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for name in names:
            parts = name.split(".")
            for end in range(2, len(parts) + 1):  # parent packages are imported too
                path = module_file(".".join(parts[:end]))
                if path is not None and path not in seen:
                    seen.add(path)
                    todo.append(path)
    return seen


def stages() -> dict[str, dict]:
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    return {name: stage.get("do", stage) for name, stage in spec.items()}


@pytest.mark.parametrize("name", sorted(stages()))
def test_stage_deps_cover_every_imported_source_file(name: str) -> None:
    stage = stages()[name]
    script = REPO / stage["cmd"].split()[1]
    deps = [REPO / d for d in stage["deps"] if "${" not in d]
    assert script in deps, f"{name}: {script.relative_to(REPO)} is not a dep"
    missing = sorted(
        str(path.relative_to(REPO))
        for path in imported_files(script)
        if not any(path == dep or dep in path.parents for dep in deps)
    )
    assert not missing, f"{name}: imports {missing} but dvc.yaml does not list them as deps"


def test_bytecode_is_not_a_dependency() -> None:
    """Python writes __pycache__/ into the source folders that are deps; DVC must not hash it."""
    pyc = "src/sentemb/methods/__pycache__/base.cpython-311.pyc"
    result = subprocess.run(
        [sys.executable, "-m", "dvc", "check-ignore", pyc],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "DVC_NO_ANALYTICS": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
