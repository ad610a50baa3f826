"""The repository a review command reads (its root, from any of its folders) and the commit a
name stands for: a git revision that is a commit, a DVC experiment's name, or `workspace`.

A name that is neither, or names two things, is one error naming it; so are two names of one
commit. Which name wins where git and DVC both have it: docs/operations.md.
"""

from __future__ import annotations

import logging
import shlex
from pathlib import Path
from typing import Any

from sentemb import git
from sentemb.config import UserError

log = logging.getLogger("review")
WORKSPACE = "workspace"  # the working folder, as DVC names it


def root() -> Path:
    """The root of the git and DVC repository the current folder is in, whose config DVC reads
    and whose git has a commit; else one error saying which is missing."""
    from dvc.exceptions import DvcException, NotDvcRepoError
    from dvc.repo import Repo

    try:
        found = Path(Repo.find_root()).resolve()
        Repo(str(found)).close()  # reads every config file
    except NotDvcRepoError:
        raise UserError(
            f"{Path.cwd()}: not inside a DVC repository: run this in a clone of the pipeline"
        ) from None
    except DvcException as err:
        raise UserError(f"{found}/.dvc: {err}") from None
    if not git.succeeds("rev-parse", "--verify", "-q", "HEAD^{commit}", cwd=found):
        raise UserError(f"{found}: not a git repository with a commit: revisions are git's")
    return found


def commits(names: tuple[str, str], repo: Path) -> list[str | None]:
    """The commit each of the two `names` stands for (None: `WORKSPACE`), read with one open of
    the repository; two names of one revision are an error."""
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc:
        found = [None if name == WORKSPACE else resolve(name, dvc) for name in names]
        if WORKSPACE in names and (refs := named_refs(WORKSPACE, dvc)):
            log.warning(
                "%s: read as the working folder, as DVC does; git's ref of that name is %s",
                WORKSPACE,
                " or ".join(refs),
            )
    if names[0] == names[1] or (found[0] is not None and found[0] == found[1]):
        same = f" (both {found[0][:7]})" if found[0] and names[0] != names[1] else ""
        raise UserError(f"{names[0]} and {names[1]}: one revision{same}, compared with itself")
    return found


def named_refs(name: str, dvc: Any) -> list[str]:
    """The git branch, tag and remotes' branches called `name` (not `feature/name`), as
    revisions that reach each (`heads/workspace`, `remotes/origin/workspace`), sorted: git
    lists loose and packed refs in either order."""
    return sorted(
        ref.removeprefix("refs/")
        for ref in dvc.scm.iter_refs()
        if ref in (f"refs/heads/{name}", f"refs/tags/{name}")
        or (ref.startswith("refs/remotes/") and ref.count("/") == 3 and ref.endswith(f"/{name}"))
    )


def resolve(name: str, dvc: Any) -> str:
    """The commit `name` stands for in the open DVC repository `dvc`: a git revision, else a
    DVC experiment's name."""
    try:
        commit = dvc.scm.resolve_rev(name)
    except Exception:  # scmrepo's RevError: not a git revision
        commit = experiment_commit(name, dvc)
    else:
        if name != WORKSPACE and experiments_named(name, dvc):
            log.warning("%s: read as a git revision; a DVC experiment has that name too", name)
        if {"heads/" + name, "tags/" + name} <= set(named_refs(name, dvc)):
            log.warning("%s: read as the tag, as git does; the branch is heads/%s", name, name)
    kind = git.output("cat-file", "-t", commit, cwd=dvc.root_dir)
    if kind != "commit":
        raise UserError(f"{name}: a git {kind or 'object'}, not a commit")
    return commit


def experiments_named(name: str, dvc: Any) -> list[str]:
    """The refs of the DVC experiments called `name`, on any baseline."""
    return [r for r in dvc.scm.iter_refs(base="refs/exps/") if r.endswith("/" + name)]


def experiment_commit(name: str, dvc: Any) -> str:
    """The commit of the one DVC experiment called `name` (DVC itself would read a name two
    experiments share as the one based on HEAD, if one is); else one error."""
    from dvc.repo.experiments.exceptions import AmbiguousExpRefInfo, InvalidExpRefError
    from dvc.repo.experiments.utils import resolve_name

    if len(experiments_named(name, dvc)) > 1:
        raise UserError(
            f"{name}: names more than one DVC experiment (`dvc exp list --all-commits` "
            "lists them): give the one you mean by its commit"
        )
    try:
        ref = resolve_name(dvc.scm, [name])[name]
    except (InvalidExpRefError, AmbiguousExpRefInfo):  # a `refs/...` that is not an experiment's
        ref = None
    commit = None if ref is None else dvc.scm.get_ref(str(ref))  # None: a ref not there
    if commit is None:
        remote = git_remote(Path(dvc.root_dir))
        raise UserError(
            f"{name}: neither a git revision nor a DVC experiment of this repository "
            f"(`dvc exp list --all-commits` lists them; `dvc exp list {remote} --all-commits`"
            f" those of the git remote, and `dvc exp pull {remote} {shlex.quote(name)}` "
            "fetches one)"
        )
    return commit


def git_remote(repo: Path) -> str:
    """The Git remote `dvc exp pull` fetches experiments from: the only one, or `<git remote>`."""
    names = (git.output("remote", cwd=repo) or "").split()
    return shlex.quote(names[0]) if len(names) == 1 else "<git remote>"
