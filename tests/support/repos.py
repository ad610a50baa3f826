"""Git + DVC repositories for tests: the one way a test makes one, runs git or DVC in it and
clones it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DVC = [sys.executable, "-m", "dvc"]
IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def repo_env(**extra: str) -> dict[str, str]:
    """The environment git and DVC run in here: a committer, no analytics, this Python's
    folder first on PATH (for the `python` of stage commands), and `extra`."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, **IDENTITY, "DVC_NO_ANALYTICS": "1", "PATH": path, **extra}


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """`command`'s output in `cwd`; a failure fails the test with its output."""
    done = subprocess.run(
        command, cwd=cwd, env=env or repo_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    return done.stdout


def git(repo: Path, *args: str) -> str:
    """git's output in `repo`, stripped."""
    return run(["git", *args], repo).strip()


def git_dvc_repo(folder: Path, env: dict[str, str] | None = None) -> Path:
    """`folder` (made where missing) as a git repository with DVC set up, and no commit."""
    folder.mkdir(parents=True, exist_ok=True)
    run(["git", "init", "-q"], folder, env)
    run([*DVC, "init", "-q"], folder, env)
    return folder


def clone_of(origin: Path, folder: Path) -> Path:
    """A git clone of `origin` in `folder` with its DVC experiments' refs, as `dvc exp pull`
    brings them; no DVC cache."""
    run(["git", "clone", "-q", str(origin), str(folder)], folder.parent)
    for ref in git(origin, "for-each-ref", "--format=%(refname)", "refs/exps").split():
        git(folder, "fetch", "-q", str(origin), f"{ref}:{ref}")
    return folder
