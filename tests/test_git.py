"""sentemb.git: the one place git runs; a failure reads as an answer, never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentemb import git


def test_a_command_git_answers(tmp_path: Path) -> None:
    assert git.succeeds("init", "-q", str(tmp_path))
    assert git.output("rev-parse", "--show-toplevel", cwd=tmp_path) == str(tmp_path.resolve())
    assert git.output("status", "--porcelain", cwd=tmp_path, strip=False) == ""


@pytest.mark.parametrize("where", ["no repository", "no git"])
def test_a_failure_is_none_or_false(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if where == "no git":
        monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git.output("rev-parse", "HEAD", cwd=tmp_path) is None
    assert not git.succeeds("rev-parse", "HEAD", cwd=tmp_path)
    assert git.run("rev-parse", "HEAD", cwd=tmp_path).returncode != 0
