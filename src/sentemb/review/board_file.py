"""The leaderboard's JSON (`reports/leaderboard.json`) as typed records, so that a board read
back is checked field by field (`from_dict(Board, ...)`): each row's scores and paired tests,
the runs left out, and the reference rows."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sentemb.config import Count
from sentemb.registry import SUITES
from sentemb.report.markdown import REFINED
from sentemb.review.paired import TESTS

ROWS = [row for suite in SUITES for row in (suite, *(f"{suite}/{r}" for r in REFINED))]


@dataclass
class Spread:
    """A row's score in one column: mean ± std over `n` seeds."""

    mean: float
    std: float
    n: Count


@dataclass
class Versus:
    """A row's paired test against SimCSE in one column (`sentemb.review.paired`'s result)."""

    difference: float
    low: float | None
    high: float | None
    significant: bool
    below_noise: bool
    p_seeds: float | None
    test: str | None = None  # one of `paired.TESTS`; None: a board written before tests said

    def validate(self) -> list[str]:
        problems = []
        if (self.low is None) != (self.high is None):
            problems.append("low: an interval needs both low and high, or neither")
        if self.test is not None and self.test not in TESTS:
            problems.append(f"test: {self.test!r} is none of {list(TESTS)}")
        return problems


def commit_problems(commit: str) -> list[str]:
    """A row runs at one commit: a full hash, not a name that moves."""
    if re.fullmatch("[0-9a-f]{40}", commit):
        return []
    return [f"commit: {commit!r} is not a full commit hash"]


@dataclass
class Row:
    """One experiment's row."""

    label: str
    method: str
    experiment: str | None
    commit: str
    params: dict[str, Any]
    trained_on: str
    seeds: list[int]
    scores: dict[str, Spread]
    versus: dict[str, Versus]
    notes: list[str] = field(default_factory=list)  # `Experiment.notes`: what its tests read

    def validate(self) -> list[str]:
        unplaced = [
            f"{name}.{key}: not a suite row; rows are {ROWS}"
            for name in ("scores", "versus")
            for key in getattr(self, name)
            if key.partition(":")[0] not in ROWS
        ]
        return commit_problems(self.commit) + unplaced


@dataclass
class Stale:
    """A run left out, with why and the command that reruns it."""

    label: str
    commit: str
    reason: str
    rerun: str

    def validate(self) -> list[str]:
        return commit_problems(self.commit)


@dataclass
class Board:
    """reports/leaderboard.json: what a later call reads back, each part typed and checked."""

    code: str
    params: dict[str, Any]
    tested_against: str | None
    rows: list[Row]
    stale: list[Stale]
    reference_commit: str | None = None
    reference: dict[str, Any] = field(default_factory=dict)
