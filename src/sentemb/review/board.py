"""The leaderboard's rows: which runs are rows, their scores and paired tests against SimCSE,
and the board JSON read back and checked (`sentemb.review.leaderboard` is the command)."""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sentemb import git
from sentemb.config import ConfigError, UserError, from_dict, run_plan, section
from sentemb.io import flatten, read_json
from sentemb.report.stats import CompareConfig, mean_std
from sentemb.report.summary import headline
from sentemb.results.readers import Reader, lock_stages, revision_reader
from sentemb.results.runs import RUNS, TFIDF, UNTRAINED, Experiment, load, read_params
from sentemb.review.board_file import ROWS, Board
from sentemb.review.paired import compare_pair
from sentemb.training.config import BUILT_IN, TrainConfig

CHAIN = ("train", "refine", "evaluate", "analyze")  # the stages of one seed's run
BASELINE = "simcse"  # the row every other is tested against
# param values an older revision spelled otherwise: {param: {old value: today's}}
RENAMED: dict[str, dict[str, str]] = {"train.corpus": BUILT_IN}


T = TypeVar("T")
log = logging.getLogger("leaderboard")
JSON, REPORT = Path("reports/leaderboard.json"), Path("reports/leaderboard.md")


@dataclass
class Candidate:
    """A revision whose run may be a row: HEAD, an experiment, or a row listed before."""

    commit: str
    experiment: str | None
    created: int  # commit time: the later run of one row wins


def lock_digest(read: Reader, stages: list[str], field: str, under: tuple[str, ...]) -> str:
    """A hash of the files under `under` that the dvc.lock `read` gives records as `field`
    (deps or outs) of `stages`, with their md5."""
    lock = lock_stages(read("dvc.lock"))
    entries = []
    for name in stages:
        if name not in lock:
            raise UserError(f"dvc.lock has no stage {name}: that revision's run is incomplete")
        listed = lock[name].get(field) or []
        if not isinstance(listed, list) or not all(
            isinstance(d, dict) and isinstance(d.get("path"), str) for d in listed
        ):
            raise UserError(f"dvc.lock: {name}: {field}: expected a list of paths")
        entries += [
            (name.split("@")[0], d["path"], str(d.get("md5", "")))
            for d in listed
            if d["path"].startswith(under)
        ]
    return hashlib.sha256(json.dumps(sorted(entries)).encode()).hexdigest()


def code(read: Reader, seed: int) -> str:
    """The code files (`src/`, `stages/`) that one seed's chain ran with."""
    return lock_digest(read, [f"{stage}@{seed}" for stage in CHAIN], "deps", ("src/", "stages/"))


def tested_against(read: Reader, params: dict[str, Any]) -> str:
    """What paired tests against the SimCSE run that `read` gives (run with `params`) rest on:
    its evaluate outputs on all its seeds (predictions, per-seed scores plain and refined, by
    their md5 in dvc.lock) and the `compare` params; a hash."""
    _, seeds = run_plan(params)
    stages = [f"evaluate@{seed}" for seed in seeds]
    outs = lock_digest(read, stages, "outs", ("predictions/", "metrics/runs/"))
    return hashlib.sha256(
        json.dumps([outs, params["compare"]], sort_keys=True).encode()
    ).hexdigest()


def left_out(
    method: str, commit: str, reason: str, params: dict[str, Any] | None = None
) -> dict[str, str]:
    """A run that is not a row: its label (method and the `params` that differ), commit, why,
    and the command that reruns it with those params."""
    params = params or {}
    sets = [f"method={method}"] + [
        f"{key}={value if isinstance(value, str) else json.dumps(value)}"
        for key, value in params.items()
    ]
    rerun = "dvc exp run --queue" + "".join(f" -S {shlex.quote(s)}" for s in sets)
    return {
        "label": variant_label(method, params),
        "commit": commit,
        "reason": reason,
        "rerun": rerun,
    }


def reachable(repo: Path, sha: str) -> bool:
    """Whether a branch, tag, remote branch, DVC experiment or HEAD holds commit `sha`; one
    that none holds was removed here (`dvc exp remove`, a rewritten branch) and is kept only
    until git prunes it."""
    if git.output("for-each-ref", "--contains", sha, "--count=1", "--format=x", cwd=repo):
        return True
    return git.succeeds("merge-base", "--is-ancestor", sha, "HEAD", cwd=repo)


def candidates(repo: Path, commits: set[str]) -> tuple[list[Candidate], set[str]]:
    """HEAD (first), every DVC experiment of any commit and the listed `commits` a ref still
    holds; and the listed `commits` git no longer has. A listed commit that git has but no ref
    holds was removed here: its rows and left-out entries are dropped."""
    from dvc.repo import Repo

    found: dict[str, Candidate] = {}
    gone = set()
    with Repo(str(repo)) as dvc:
        head = dvc.scm.get_rev()
        names = {
            sha: name
            for experiments in dvc.experiments.ls(all_commits=True).values()
            for name, sha in experiments
        }
        for sha in [head, *names, *commits]:
            try:
                created = dvc.scm.resolve_commit(sha).commit_time
            except Exception:  # a commit git no longer has (or an experiment's unresolvable)
                if sha in commits:
                    gone.add(sha)
                else:
                    log.warning("%s: no such commit; skipped", sha)
                continue
            if sha not in names and sha != head and not reachable(repo, sha):
                log.info("%s: no branch, tag or experiment holds it (removed): dropped", sha[:7])
                continue
            found[sha] = Candidate(sha, names.get(sha), created)
    return list(found.values()), gone


def differing(mine: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """The params (dotted keys) whose value differs from `reference`'s, but `method`. A key
    only one side has is a param added or removed between the two revisions (their stage code
    differs, so the run is stale anyway), not a choice of the run: it neither names the run nor
    goes into its rerun command, which today's params would refuse. A value renamed since
    (`RENAMED`) is compared, and named, as today's spelling."""
    today = {
        key: RENAMED.get(key, {}).get(value, value) if isinstance(value, str) else value
        for key, value in mine.items()
    }
    return {
        key: today[key]
        for key in sorted(set(mine) & set(reference))
        if key != "method" and today[key] != reference[key]
    }


def listed_runs_gone(
    before: dict[str, Any], gone: set[str], today: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The rows `before` (the board as it was) lists whose commit is in `gone`: kept, their params
    made relative to today's, where they ran today's stage code and their paired tests read
    today's SimCSE run (`today`: the board's `code`, `params` and `tested_against` now); else
    left out, as are the runs `before` left out whose commit is gone."""
    stale = [s for s in before["stale"] if s["commit"] in gone]
    rows = [r for r in before["rows"] if r["commit"] in gone]
    if not rows:
        return [], stale
    if before["code"] != today["code"]:
        reason = "ran other stage code"
    elif before["tested_against"] != today["tested_against"]:
        reason = "its commit is not in this repository and it was tested against another SimCSE run"
    else:
        kept = [
            r | {"params": differing(before["params"] | r["params"], today["params"])} for r in rows
        ]
        return kept, stale
    return [], [*stale, *(left_out(r["method"], r["commit"], reason, r["params"]) for r in rows)]


def variant_label(method: str, params: dict[str, Any]) -> str:
    """The method, with the params that differ (`paser (train.max_length=64)`)."""
    extra = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"{method} ({extra})" if extra else method


def board_entries(row: str, values: Mapping[str, T]) -> dict[str, T]:
    """A suite row's entries on the board: its average under the row's name; of a suite with no
    average (eval.own), each set under `<row>:<set>`."""
    if "avg" in values:
        return {row: values["avg"]}
    return {f"{row}:{column}": value for column, value in values.items()}


def scores(experiment: Experiment) -> dict[str, dict[str, float]]:
    """Each suite's average, or each own set (plain and refined rows), mean/std/n over seeds."""
    return {
        key: mean_std(values)
        for row in ROWS
        for key, values in board_entries(row, experiment.scores(row) or {}).items()
    }


def trained_on(experiment: Experiment, listed_rows: Sequence[dict[str, Any]] = ()) -> str:
    """The corpus the run trained on and the autocast its seeds trained under, as train.json
    records it (another CPU may resolve `auto` to another one): `wiki1m_for_simcse.txt, 11,915
    sentences, fp32`. Git holds a run's scores, not its autocast: a run read from git alone
    takes it from a row of the same run in `listed_rows` (the board before; same method, seeds
    and every mean, std and n), read where that run's files were."""
    corpus = Path(section(experiment.params, "train", TrainConfig).corpus).name
    sentences = experiment.files[0]["train"]["sentences"]
    known = f"{corpus}, {sentences:,} sentences, "
    if experiment.scores_from != RUNS:
        run = (experiment.method, experiment.seeds, scores(experiment))
        same = [
            r["trained_on"] for r in listed_rows if (r["method"], r["seeds"], r["scores"]) == run
        ]
        if same and same[0].startswith(known):
            return same[0]
    return known + experiment.autocast


def listed(out: Path) -> dict[str, Any]:
    """The board as `out` holds it (no file: none); one error naming what is wrong where it is
    not one this code wrote."""
    if not out.is_file():
        return {"rows": [], "stale": []}
    before = read_json(out)
    try:
        from_dict(Board, before, "board")
    except ConfigError as err:
        raise UserError(
            f"{out}: {err}: not a leaderboard this command wrote (its default: "
            f"{JSON}); restore it from git, or give --json the board's path"
        ) from None
    return before


def build(repo: Path, out: Path) -> dict[str, Any]:
    """The leaderboard's JSON (rows merged as the module says)."""
    before = listed(out)
    found, gone = candidates(repo, {r["commit"] for r in [*before["rows"], *before["stale"]]})
    head = found[0]
    read_head = revision_reader(head.commit, repo)
    reference = load(read_head, head.commit[:7], from_git=True)  # also HEAD's row: loaded once
    current = code(read_head, reference.seeds[0])
    flat = flatten(reference.params)
    rows: dict[str, tuple[Candidate, Experiment, dict[str, Any]]] = {}
    stale = []
    for candidate in sorted(found, key=lambda c: (c.created, c.experiment is not None, c.commit)):
        name = candidate.experiment or candidate.commit[:7]
        method = name  # until its params say
        params: dict[str, Any] = {}
        try:
            read = revision_reader(candidate.commit, repo)
            ran = read_params(read)
            method, seeds = run_plan(ran)
            params = differing(flatten(ran), flat)
            if code(read, seeds[0]) != current:  # from git alone: its data may be gone
                stale.append(left_out(method, candidate.commit, "ran other stage code", params))
                continue
            experiment = reference if candidate is head else load(read, name, ran, from_git=True)
        except UserError as err:  # an experiment that cannot be a row blocks no other row
            if candidate is head:
                raise
            entry = left_out(method, candidate.commit, f"cannot be read: {err}", params)
            if method == name:  # its params could not say its method
                entry["rerun"] = f"dvc exp remove {name}, or: dvc exp run --queue -S method=..."
            stale.append(entry)
            continue
        rows[variant_label(method, params)] = (candidate, experiment, params)
    config = section(reference.params, "compare", CompareConfig)
    tested, versus = None, {}
    if BASELINE in rows:
        simcse = rows[BASELINE][1]
        for label, (candidate, experiment, params) in list(rows.items()):
            if label == BASELINE:
                continue
            try:  # each row on the seeds it shares with SimCSE's
                versus[label] = compare_pair(simcse, experiment, BASELINE, label, config)
            except UserError as err:
                del rows[label]
                reason = f"cannot be tested against SimCSE's row: {err}"
                stale.append(left_out(experiment.method, candidate.commit, reason, params))
        read = revision_reader(rows[BASELINE][0].commit, repo)
        tested = tested_against(read, simcse.params)
    today = {"code": current, "params": flat, "tested_against": tested}
    kept, gone_stale = listed_runs_gone(before, gone, today)
    board_rows = [
        {
            "label": label,
            "method": experiment.method,
            "experiment": candidate.experiment,
            "commit": candidate.commit,
            "params": params,
            "trained_on": trained_on(experiment, before["rows"]),
            "seeds": experiment.seeds,
            "notes": experiment.notes,
            "scores": scores(experiment),
            "versus": {
                key: result
                for row, results in versus.get(label, {}).items()
                for key, result in board_entries(row, results).items()
            },
        }
        for label, (candidate, experiment, params) in rows.items()
    ]
    labels = set(rows)
    for row in kept:  # a run git has replaces a kept row of its label; of two kept, the first
        label = variant_label(row["method"], row["params"])
        if label not in labels:
            labels.add(label)
            board_rows.append(row | {"label": label})
            log.info("%s at %s: its commit is not here: kept as recorded", label, row["commit"][:7])
    singles = headline(reference)
    return today | {
        "reference_commit": head.commit,
        "rows": board_rows,
        "reference": {
            name: {
                key: value
                for row, values in singles[name].items()
                for key, value in board_entries(row, values).items()
            }
            for name in (UNTRAINED, TFIDF)
        },
        "stale": sorted(  # one per label without a row: of runs still here, the latest
            {s["label"]: s for s in [*gone_stale, *stale] if s["label"] not in labels}.values(),
            key=lambda s: s["label"],
        ),
    }
