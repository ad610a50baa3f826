"""`dvc metrics diff` with the differences below the noise level labelled `noise`.

    python -m sentemb.metrics_diff                 # HEAD against the workspace: the headline
    python -m sentemb.metrics_diff main            # main against the workspace
    python -m sentemb.metrics_diff befd762 HEAD    # two commits
    python -m sentemb.metrics_diff main --all      # every number: per seed, task, subset, dev

The headline (metrics/summary.json) is the only file declared as DVC metrics; `--all` diffs
every committed number instead: each seed's scores per task and STS subset, dev scores and λs
(the records of plots/summary/scores.json, shown under the per-seed file DVC caches them in,
`metrics/runs/<seed>/<file>.json`) and every other JSON file under metrics/, read from git.

The same run moves its scores by up to about `compare.noise` points on another CPU, bf16 kernel
or GPU (README: "Which results are bit-identical"), so a changed score closer than that to the
old one says nothing about the change under review. DVC cannot be told so; this runs
`dvc metrics diff --json` and prints its table (changed metrics only, as DVC does) with a last
column that says `noise` where |Δ| < `compare.noise` for a score (Spearman, accuracy, MAP/MRR
x 100). Other metrics (losses, counts, λs, alignment) are shown without a label.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sentemb.cli import Parser, points, run_stage
from sentemb.config import UserError, load_params, section
from sentemb.evaluation.suites import SUITES
from sentemb.io import leaves
from sentemb.report.stats import NOISE, CompareConfig
from sentemb.tracking import SECONDS

HEADLINE_ROWS = ("trained", "untrained", "tfidf")  # metrics/summary.json's rows of scores
SCORES = "plots/summary/scores.json"  # every number of every seed (stage summary)


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


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def changes(diff: dict[str, dict[str, dict[str, Any]]]) -> list[Change]:
    """The numeric metrics of `dvc metrics diff --json` output, in its order."""
    return [
        Change(path, metric, number(values.get("old")), number(values.get("new")))
        for path, metrics in diff.items()
        for metric, values in metrics.items()
        if number(values.get("old")) is not None or number(values.get("new")) is not None
    ]


def label(change: Change, noise: float) -> str:
    """`noise` for a score that moved by less than `noise` points, else empty."""
    difference = change.difference
    if difference is None or not is_score(change.path, change.metric):
        return ""
    return NOISE if abs(difference) < noise else ""


def cell(value: float | None, sign: str = "") -> str:
    """`value` rounded to 5 decimals as `dvc metrics diff` shows it, `-` when absent."""
    return "-" if value is None else f"{round(value, 5):{sign}}"


def table(rows: list[Change], noise: float, old: str, new: str) -> str:
    """A Markdown table like `dvc metrics diff --md`'s, with the noise label, and a count."""
    if not rows:
        return "no metric changed"
    lines = [
        f"| Path | Metric | {old} | {new} | Change | Note |",
        "|---|---|---:|---:|---:|---|",
    ]
    labels = [label(row, noise) for row in rows]
    lines += [
        f"| {r.path} | {r.metric} | {cell(r.old)} | {cell(r.new)} | {cell(r.difference, '+')}"
        f" | {mark} |"
        for r, mark in zip(rows, labels, strict=True)
    ]
    scores = sum(1 for r in rows if r.difference is not None and is_score(r.path, r.metric))
    lines.append(
        f"\n{len(rows)} metric(s) changed; {labels.count(NOISE)} of the {scores} changed"
        f" score(s) moved by less than {noise:g} points (`compare.noise`): {NOISE}"
    )
    return "\n".join(lines)


def committed(revision: str | None) -> dict[tuple[str, str], float]:
    """Every committed number at `revision` (None: the workspace's files git tracks), keyed by
    (path, dotted key): the JSON files under metrics/ and the records of `SCORES`."""
    listing = ["ls-files"] if revision is None else ["ls-tree", "-r", "--name-only", revision]
    paths = git(*listing, "--", "metrics", SCORES).split()
    numbers: dict[tuple[str, str], float] = {}
    for path in paths:
        text = (
            Path(path).read_text("utf-8") if revision is None else git("show", f"{revision}:{path}")
        )
        data = json.loads(text)
        if path == SCORES:
            for r in data:
                numbers[(f"metrics/runs/{r['seed']}/{r['file']}.json", r["key"])] = r["score"]
        elif path.endswith(".json"):
            numbers.update(((path, key), value) for key, value in leaves(data))
    return numbers


def git(*args: str) -> str:
    """The output of a git command; one error with git's message when it fails."""
    result = subprocess.run(["git", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise MetricsDiffError(f"git {args[0]}: {result.stderr.strip() or 'failed'}")
    return result.stdout


def details(old: str, new: str | None) -> list[Change]:
    """The committed numbers that differ between revision `old` and `new` (None: workspace)."""
    before, after = committed(old), committed(new)
    return [
        Change(path, key, before.get((path, key)), after.get((path, key)))
        for path, key in sorted(set(before) | set(after))
        if before.get((path, key)) != after.get((path, key))
    ]


def dvc_metrics_diff(arguments: list[str]) -> dict:
    """The JSON of `dvc metrics diff --json <arguments>` (DVC's warnings passed on)."""
    command = [sys.executable, "-m", "dvc", "metrics", "diff", "--json", *arguments]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise MetricsDiffError(f"dvc metrics diff: {lines[-1] if lines else 'failed'}")
    sys.stderr.write(result.stderr)
    return json.loads(result.stdout or "{}")


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.revision("a_rev", nargs="?", default="HEAD", help="old revision (default HEAD)")
    parser.revision("b_rev", nargs="?", help="new revision (default the workspace)")
    parser.add_argument("--noise", type=points, help="score points (default compare.noise)")
    parser.add_argument("--all", action="store_true", help="every metrics file under metrics/")
    parser.input("--params", default="params.yaml", folder=False)
    return parser


def main() -> None:
    args = parser().parse_args()
    noise = args.noise
    if noise is None:
        noise = section(load_params(args.params), "compare", CompareConfig).noise
    revisions = [args.a_rev, *([args.b_rev] if args.b_rev else [])]
    rows = details(args.a_rev, args.b_rev) if args.all else changes(dvc_metrics_diff(revisions))
    print(table(rows, noise, args.a_rev, args.b_rev or "workspace"))


if __name__ == "__main__":
    run_stage(main)
