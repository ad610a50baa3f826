"""Every method in one table, from DVC experiments: `reports/leaderboard.md` and its JSON.

    dvc exp run --queue -S method=simcse,sscl,iscse,dclr,paser,iscse+dclr
    dvc queue start -j 1                  # 18 chains on a CPU: may be run in parts
    python -m sentemb.leaderboard         # merges every experiment run at today's stage code

A row is one experiment: its method (plain, + RepAL, + whitening), the mean ± std over its seeds
of each suite's average, its paired tests against the SimCSE row (`sentemb.report.compare`), the
commit it ran at, the params that differ from this revision's and the corpus it trained on; then
the reference rows (the untrained model, TF-IDF) of this revision. Rows are merged from HEAD
(its committed run), every DVC experiment of any commit and the rows the leaderboard already
lists. Every row comes from the same stage code as this revision (the code files its dvc.lock
records for train, refine, evaluate and analyze): a row of other code, or of a commit git no
longer has, is left out and named with the command that reruns it, until a row of its method
replaces it. Of two rows of one method and params, the later run is kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sentemb.cli import Parser, run_stage
from sentemb.config import UserError, params_from, parse_yaml, run_plan, section
from sentemb.io import atomic_path, read_json, write_json
from sentemb.registry import SUITES
from sentemb.report.compare import compare
from sentemb.report.markdown import REFINED, leaderboard
from sentemb.report.runs import TFIDF, UNTRAINED, Experiment, Reader, load, revision_reader
from sentemb.report.stats import CompareConfig, mean_std
from sentemb.report.summary import headline
from sentemb.tracking import flatten
from sentemb.training.config import TrainConfig

log = logging.getLogger("leaderboard")
CHAIN = ("train", "refine", "evaluate", "analyze")  # the stages of one seed's run
REFERENCE_STAGES = ("refine_reference", "reference", "baseline", "analyze_reference")
BASELINE = "simcse"  # the row every other is tested against
ROWS = [row for suite in SUITES for row in (suite, *(f"{suite}/{r}" for r in REFINED))]


@dataclass
class Candidate:
    """A revision whose run may be a row: HEAD, an experiment, or a row listed before."""

    commit: str
    experiment: str | None
    created: int  # commit time: the later run of one row wins


def code(read: Reader, stages: tuple[str, ...], seed: int | None) -> str:
    """A hash of the code files (`src/`, `stages/`) that `stages` ran with, from the dvc.lock
    that `read` gives (`<stage>@<seed>` for a per-seed stage)."""
    lock = parse_yaml(read("dvc.lock"), "dvc.lock")["stages"]
    entries = []
    for stage in stages:
        name = f"{stage}@{seed}" if seed is not None else stage
        if name not in lock:
            raise UserError(f"dvc.lock has no stage {name}: that revision's run is incomplete")
        deps = lock[name].get("deps", [])
        entries += [
            (stage, d["path"], d.get("md5", ""))
            for d in deps
            if d["path"].startswith(("src/", "stages/"))
        ]
    return hashlib.sha256(json.dumps(sorted(entries)).encode()).hexdigest()


def left_out(method: str, commit: str, reason: str) -> dict[str, str]:
    """A run that is not a row: its method, commit, why, and the command that reruns it."""
    rerun = f"dvc exp run --queue -S method={method}"
    return {"label": method, "commit": commit, "reason": reason, "rerun": rerun}


def candidates(repo: Path, listed: dict[str, str]) -> tuple[list[Candidate], list[dict[str, str]]]:
    """HEAD (first), every DVC experiment of any commit and the commits listed before (commit:
    method); and the listed runs whose commit git no longer has, left out."""
    from dvc.repo import Repo

    found: dict[str, Candidate] = {}
    gone = []
    with Repo(str(repo)) as dvc:
        head = dvc.scm.get_rev()
        names = {
            sha: name
            for experiments in dvc.experiments.ls(all_commits=True).values()
            for name, sha in experiments
        }
        for sha in [head, *names, *listed]:
            try:
                created = dvc.scm.resolve_commit(sha).commit_time
            except Exception:  # a commit git no longer has (or an experiment's unresolvable)
                if sha in listed:
                    gone.append(left_out(listed[sha], sha, "its commit is not in this repository"))
                else:
                    log.warning("%s: no such commit; skipped", sha)
                continue
            found[sha] = Candidate(sha, names.get(sha), created)
    return list(found.values()), gone


def differing(params: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """The params (dotted) whose value differs from `reference`'s, but `method`."""
    mine, theirs = flatten(params), flatten(reference)
    return {
        key: mine.get(key)
        for key in sorted(set(mine) | set(theirs))
        if key != "method" and mine.get(key) != theirs.get(key)
    }


def row_label(experiment: Experiment, params: dict[str, Any]) -> str:
    """The method, with the params that differ (`paser (train.corpus=sts)`)."""
    extra = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"{experiment.method} ({extra})" if extra else experiment.method


def scores(experiment: Experiment) -> dict[str, dict[str, float]]:
    """Each suite's average (plain and refined rows), mean/std/n over seeds."""
    return {
        row: mean_std(values["avg"])
        for row in ROWS
        if (values := experiment.scores(row)) is not None and "avg" in values
    }


def trained_on(experiment: Experiment) -> str:
    """The corpus the run trained on: `wiki, 11,915 sentences`."""
    corpus = section(experiment.params, "train", TrainConfig).corpus
    return f"{corpus}, {experiment.files[0]['train']['sentences']:,} sentences"


def build(repo: Path, out: Path) -> dict[str, Any]:
    """The leaderboard's JSON (rows merged as the module says)."""
    before = read_json(out) if out.is_file() else {}
    listed = {r["commit"]: r["method"] for r in before.get("rows", [])}
    listed |= {s["commit"]: s["label"] for s in before.get("stale", [])}
    found, gone = candidates(repo, listed)
    head = found[0]
    read_head = revision_reader(head.commit, repo)
    reference = load(read_head, head.commit[:7])  # also HEAD's row: loaded once
    current = code(read_head, CHAIN, reference.seeds[0])
    rows: dict[str, tuple[Candidate, Experiment, dict[str, Any]]] = {}
    stale = []
    for candidate in sorted(found, key=lambda c: (c.created, c.experiment is not None, c.commit)):
        read = revision_reader(candidate.commit, repo)
        ran = params_from(parse_yaml(read("params.yaml"), "params.yaml"), "params.yaml")
        method, seeds = run_plan(ran)
        if code(read, CHAIN, seeds[0]) != current:  # from git alone: its data may be gone
            stale.append(left_out(method, candidate.commit, "ran other stage code"))
            continue
        experiment = (
            reference
            if candidate is head
            else load(read, candidate.experiment or candidate.commit[:7], ran)
        )
        params = differing(experiment.params, reference.params)
        rows[row_label(experiment, params)] = (candidate, experiment, params)
    experiments = {label: experiment for label, (_, experiment, _) in rows.items()}
    current_methods = {experiment.method for experiment in experiments.values()}
    config = section(reference.params, "compare", CompareConfig)
    versus = compare(experiments, BASELINE, config) if BASELINE in experiments else {}
    singles = headline(reference)
    averages = {
        name: {row: values["avg"] for row, values in singles[name].items() if "avg" in values}
        for name in (UNTRAINED, TFIDF)
    }
    return {
        "code": current,
        "reference_commit": head.commit,
        "rows": [
            {
                "label": label,
                "method": experiment.method,
                "experiment": candidate.experiment,
                "commit": candidate.commit,
                "params": params,
                "trained_on": trained_on(experiment),
                "seeds": experiment.seeds,
                "scores": scores(experiment),
                "versus": {row: r["avg"] for row, r in versus.get(label, {}).items() if "avg" in r},
            }
            for label, (candidate, experiment, params) in rows.items()
        ],
        "reference": averages,
        "stale": sorted(  # one per method without a row: of runs still here, the latest
            {s["label"]: s for s in [*gone, *stale] if s["label"] not in current_methods}.values(),
            key=lambda s: s["label"],
        ),
    }


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.output("--json", default="reports/leaderboard.json")
    parser.output("--report", default="reports/leaderboard.md")
    return parser


def main() -> None:
    args = parser().parse_args()
    board = build(Path(), args.json)
    write_json(args.json, board)
    with atomic_path(args.report) as tmp:
        tmp.write_text(leaderboard(board), encoding="utf-8")
    for row in board["stale"]:
        log.warning(
            "%s at %s: %s: left out; rerun it: %s",
            row["label"],
            row["commit"][:7],
            row["reason"],
            row["rerun"],
        )
    log.info("%d row(s): %s", len(board["rows"]), args.report)


if __name__ == "__main__":
    run_stage(main)
