"""A revision's files, as bytes: the workspace's (`folder_reader`, what stage `summary`
reads) or a commit's (`revision_reader`: git for the committed files, the DVC cache or a remote
for the outputs DVC keeps). A file neither has is one error saying which `dvc` command gets it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sentemb import git
from sentemb.config import UserError, parse_yaml
from sentemb.results.revisions import git_remote

Reader = Callable[[str], bytes]  # a path relative to the repository root -> the file's bytes


class MissingResults(UserError, FileNotFoundError):
    """A file of an experiment's results is not where it is read."""


def folder_reader(root: Path) -> Reader:
    """The files under `root` (the workspace); a missing one is an error saying which `dvc`
    command brings it back: `dvc checkout` where its dvc.lock records it, else `dvc repro`."""

    def read(path: str) -> bytes:
        try:
            return (root / path).read_bytes()
        except FileNotFoundError as err:
            if a_lock_output(root, path):
                how = "dvc.lock records it: `dvc checkout` restores it from the DVC cache "
                how += "(`dvc pull`: from a remote), else `dvc repro` writes it again"
            else:
                how = "`dvc repro` writes it (params: method, seeds)"
            raise MissingResults(f"{root / path}: not found; {how}") from err

    return read


def lock_stages(data: bytes) -> dict[str, dict[str, Any]]:
    """The stages of a dvc.lock (its bytes): a mapping of stage names to mappings, or one error
    naming the file."""
    lock = parse_yaml(data, "dvc.lock")
    stages = lock.get("stages") if isinstance(lock, dict) else None
    if not isinstance(stages, dict) or not all(isinstance(s, dict) for s in stages.values()):
        raise UserError("dvc.lock: expected a mapping of stages: `dvc repro` writes it again")
    return stages


def a_lock_output(root: Path, path: str) -> bool:
    """Whether the dvc.lock under `root` names `path`, or a folder that holds it, as an output."""
    try:
        stages = lock_stages((root / "dvc.lock").read_bytes())
    except (OSError, UserError):
        return False
    outs = [
        out.get("path")
        for stage in stages.values()
        if isinstance(stage.get("outs"), list)
        for out in stage["outs"]
        if isinstance(out, dict)
    ]
    return any(isinstance(o, str) and (path == o or path.startswith(f"{o}/")) for o in outs)


def revision_reader(revision: str, repo: Path = Path(), label: str | None = None) -> Reader:
    """The files of `revision` (a commit, branch or DVC experiment's commit; `label`: how the
    user named it) of the repository at `repo`: committed files from git, DVC outputs from its
    cache or, where configured, its default remote (DVC is opened only for those). One that
    neither has is an error saying which `dvc` command gets it."""
    name = label or revision
    dvc_files: list[Any] = []  # the DVC file system, opened at the first DVC output read

    def from_dvc(path: str) -> bytes:
        if not dvc_files:
            from dvc.api import DVCFileSystem

            dvc_files.append(DVCFileSystem(str(repo), rev=revision))
        try:
            return dvc_files[0].read_bytes(path)
        except Exception as err:  # missing from git and the cache, or DVC's own errors
            raise MissingResults(
                f"{name}:{path}: not in git, the DVC cache or a remote ({type(err).__name__});"
                f" {how_to_get(name, repo)}"
            ) from err

    def read(path: str) -> bytes:
        shown = git.run("show", f"{revision}:{path}", cwd=repo)
        return shown.stdout if shown.returncode == 0 else from_dvc(path)

    return read


def how_to_get(name: str, repo: Path) -> str:
    """How a user gets a DVC output of revision `name` that no cache or remote here holds."""
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc:
        remote = dvc.config["core"].get("remote")
    quoted = shlex.quote(name)
    is_commit = ("rev-parse", "--verify", "-q", "--end-of-options", f"{name}^{{commit}}")
    if git.succeeds(*is_commit, cwd=repo):
        pull = f"`git checkout {quoted} && dvc pull`"
        again = f"run that revision's pipeline again (`git checkout {quoted} && dvc repro`)"
    else:  # a DVC experiment's name
        pull = f"`dvc exp pull {git_remote(repo)} {quoted} -r {shlex.quote(str(remote))}`"
        again = f"run it again as a new experiment (`dvc exp apply {quoted} && dvc exp run`)"
    get = "no DVC remote is configured here: add the one that holds it (`dvc remote add -d`)"
    if remote:
        get = f"get it from remote {remote!r}: {pull}"
    return f"{get}; or {again}"


def read_json(read: Reader, path: str) -> Any:
    """A JSON file through `read`; one error naming it when it is not JSON."""
    return parse_json(read(path), path)


def parse_json(data: bytes, where: str) -> Any:
    """The JSON document `data` (read at `where`); one error naming `where` when it is not
    UTF-8 JSON."""
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise UserError(f"{where}: not valid JSON ({err}); it was damaged") from err
