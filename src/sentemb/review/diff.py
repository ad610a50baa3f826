"""Every committed number of two revisions compared, with the noise label: what
`sentemb.review.metrics_diff` prints beside `dvc metrics diff`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sentemb import git
from sentemb.clock import SECONDS
from sentemb.config import UserError
from sentemb.io import flatten, numbers
from sentemb.registry import SUITES
from sentemb.results.readers import Reader, folder_reader, revision_reader
from sentemb.results.runs import RUNS, SCORES, check_scores, committed_scores

HEADLINE_ROWS = ("trained", "untrained", "tfidf")  # metrics/summary.json's rows of scores
HEADLINE = "metrics/summary.json"  # the only file declared as DVC metrics


class MetricsDiffError(UserError):
    """`dvc metrics diff` failed (not a DVC repository, an unknown revision)."""


@dataclass
class Change:
    """One metric of one file in the two revisions (None where absent)."""

    path: str
    metric: str
    old: float | None
    new: float | None

    @property
    def difference(self) -> float | None:
        return None if self.old is None or self.new is None else self.new - self.old


def is_score(path: str, metric: str) -> bool:
    """Whether `metric` (DVC's dotted key) of metrics file `path` is a score x 100."""
    name, first, last = PurePosixPath(path).stem, metric.split(".")[0], metric.split(".")[-1]
    if metric == SECONDS:  # the stage's wall time: shown, never a score
        return False
    if name == "summary":  # the headline: a mean over seeds or a single run's score, not a std
        return first in HEADLINE_ROWS and last != "std"
    if name == "refine":
        return last.startswith("dev/")
    return name in SUITES or (name == "train" and metric in ("best_dev", "initial_dev"))


def number(value: Any, where: str = "") -> float | None:
    """`value` as a float (None when it is no number); NaN or infinite is an error at `where`."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if not math.isfinite(value):
        raise MetricsDiffError(f"{where}: {value}: a metric must be a finite number")
    return float(value)


def changes(diff: dict[str, dict[str, dict[str, Any]]], old: str, new: str) -> list[Change]:
    """The numeric metrics of `dvc metrics diff --json` output (`old`, `new`: the revisions'
    names), in the order of their file and metric."""
    rows = [
        Change(
            path,
            metric,
            number(values.get("old"), f"{old}:{path}: {metric}"),
            number(values.get("new"), f"{new}:{path}: {metric}"),
        )
        for path, metrics in diff.items()
        for metric, values in metrics.items()
    ]
    rows = [row for row in rows if row.old is not None or row.new is not None]
    return sorted(rows, key=lambda row: (row.path, row.metric))


def committed(repo: Path, revision: str | None, name: str) -> dict[tuple[str, str], float]:
    """Every committed number at commit `revision` (None: the workspace's files git tracks) of
    `repo`, keyed by (path, dotted key): the JSON files under metrics/ and the records of
    `SCORES`, at a commit the file its dvc.lock says stage summary wrote. A file that is not
    such JSON is an error naming `name` and the file."""
    listing = (
        ["ls-files", "-z"] if revision is None else ["ls-tree", "-rz", "--name-only", revision]
    )
    paths = os.fsdecode(git_listing(repo, *listing, "--", "metrics", SCORES)).split("\0")
    read = reader(repo, revision, name)
    found_numbers: dict[tuple[str, str], float] = {}
    for path in (p for p in paths if p.endswith(".json")):
        where = f"{name}:{path}"
        if path == SCORES:  # the workspace's may be mid-`dvc repro`: not checked against it
            try:
                records = committed_scores(read, where, current=revision is not None)
            except UserError as err:
                raise MetricsDiffError(str(err)) from None
            found = [
                ((f"{RUNS}/{seed}/{file}.json", key), score)
                for (seed, file, key), score in records.items()
            ]
        else:  # numbers keeps the numbers; number refuses NaN and infinity
            data = metrics_file(read, path, name)
            found = [
                ((path, key), number(value, f"{where}: {key}"))
                for key, value in numbers(data, lists=True).items()
            ]
        for (file, key), score in found:
            if (file, key) in found_numbers:
                raise MetricsDiffError(f"{where}: {file}: {key}: recorded twice")
            found_numbers[(file, key)] = score
    return found_numbers


def reader(repo: Path, revision: str | None, name: str) -> Reader:
    """The files of commit `revision` of `repo` (None: the workspace's), as `name` names it."""
    return folder_reader(repo) if revision is None else revision_reader(revision, repo, name)


def metrics_file(read: Reader, path: str, name: str) -> Any:
    """The JSON of metrics file `path` through `read` (of the revision `name`), checked: a
    JSON object, a suite's report columns scores x 100, the headline's every
    value a finite number. Else one error naming `name` and the file."""
    where = f"{name}:{path}"
    try:
        data = json.loads(read(path).decode("utf-8"))
    except UnicodeDecodeError as err:
        raise MetricsDiffError(f"{where}: not UTF-8 text ({err})") from None
    except ValueError as err:
        raise MetricsDiffError(f"{where}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise MetricsDiffError(f"{where}: expected a JSON object")
    stem = PurePosixPath(path).stem
    if stem in SUITES:
        try:
            check_scores(where, stem, data)
        except UserError as err:
            raise MetricsDiffError(str(err)) from None
    if path == HEADLINE:
        for key, value in flatten(data).items():
            if number(value, f"{where}: {key}") is None:
                raise MetricsDiffError(f"{where}: {key}: {value!r} is not a number")
    return data


def git_listing(repo: Path, *args: str) -> bytes:
    """The output of a git command in `repo` (a listing of what it tracks), as bytes; one error
    with git's message when it fails."""
    result = git.run(*args, cwd=repo)
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip()
        raise MetricsDiffError(f"git {args[0]}: {message or 'failed'}")
    return result.stdout


def details(repo: Path, old: str, new: str | None, names: tuple[str, str]) -> list[Change]:
    """The committed numbers that differ between commit `old` and `new` (None: workspace)."""
    before, after = committed(repo, old, names[0]), committed(repo, new, names[1])
    return [
        Change(path, key, before.get((path, key)), after.get((path, key)))
        for path, key in sorted(set(before) | set(after))
        if before.get((path, key)) != after.get((path, key))
    ]


def dvc_metrics_diff(repo: Path, arguments: list[str]) -> dict:
    """The JSON of `dvc metrics diff --json <arguments>` in `repo` (DVC's warnings passed on);
    a metrics file DVC could not read is an error, not metrics shown as removed."""
    command = [sys.executable, "-m", "dvc", "metrics", "diff", "--json", *arguments]
    result = subprocess.run(command, cwd=repo, capture_output=True, text=True)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if result.returncode != 0:
        raise MetricsDiffError(f"dvc metrics diff: {lines[-1] if lines else 'failed'}")
    unread = [line for line in lines if "failed to load" in line]
    if unread:
        raise MetricsDiffError(f"dvc metrics diff: {unread[0].strip()}")
    sys.stderr.write(result.stderr)
    return json.loads(result.stdout or "{}")
