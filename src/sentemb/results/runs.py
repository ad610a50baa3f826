"""One experiment's results, read from the workspace or from any revision or DVC experiment.

An experiment is one method run once per seed (params `method`, `seeds`) with the pipeline's
layout (`dvc.yaml`): per seed, `metrics/runs/<seed>/<suite>.json` and the train, refine and
analysis records, the pair suites' `predictions/<seed>/<suite>.npz` and the training curves in
`plots/runs/<seed>/`; and the reference rows in `metrics/reference/` and `metrics/tfidf/`.
`load` reads them through a `readers.Reader`: a folder's files (what stage `summary` reads) or a
revision's (git for the committed files, the DVC cache or a remote for the predictions).

Where a revision's per-seed metrics files are in neither the DVC cache nor a remote (a fresh
clone), the per-seed scores come from git: stage `summary` commits every number of them in
`SCORES`. Where its predictions are missing, the experiment has none and says why
(`Experiment.predictions_missing`): the paired t-test over seeds still runs, the bootstrap over
test pairs does not.
"""

from __future__ import annotations

import hashlib
import io
import math
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from sentemb.config import ConfigError, UserError, params_from, parse_yaml, run_plan, section
from sentemb.evaluation.base import ITEMS
from sentemb.registry import REFINEMENTS, SUITES
from sentemb.results.readers import MissingResults, Reader, lock_stages, parse_json, read_json

RUNS, PREDICTIONS, CURVES = "metrics/runs", "predictions", "plots/runs"
REFERENCE_DIR, TFIDF_DIR = "metrics/reference", "metrics/tfidf"
RECORDS = {  # a run's metrics files besides its suites', and the fields the reports read
    "train": {"sentences": int, "autocast": str},
    "refine": {"fit_on": str},
    "analysis": {"alignment": float, "uniformity": float},
}
CURVE_KINDS = ("loss", "dev")
SCORES = "plots/summary/scores.json"  # every number of every seed's metrics files, in git
RECORD = ("seed", "file", "key", "score")  # the keys of each of its records
UNTRAINED, TFIDF = "untrained", "tfidf"  # the reference rows


@dataclass
class Experiment:
    """Everything the summary, the comparison and the leaderboard read of one experiment.

    `files[i]` maps each suite and each of `RECORDS` to seed i's metrics file; `predictions[s][i]`
    holds seed i's arrays of pair suite `s`; `curves` the seeds' loss and dev records,
    concatenated; `singles` the reference rows' metrics per suite; `before` the untrained model's
    analysis."""

    label: str
    params: dict[str, Any]
    method: str
    seeds: list[int]
    files: list[dict[str, Any]]
    predictions: dict[str, list[dict[str, np.ndarray]]]
    curves: dict[str, list[dict]]
    singles: dict[str, dict[str, Any]]
    before: dict[str, Any]
    scores_from: str = RUNS  # the per-seed files, or `SCORES` where only git holds them
    predictions_missing: str | None = None  # why no predictions were read (no bootstrap)

    @property
    def autocast(self) -> str:
        """The autocast the seeds trained under, as their train.json files record it: `fp32`,
        or `bf16/fp32` where seeds ran on CPUs that resolve `auto` differently; `autocast not
        in git` where the scores come from `SCORES`, which holds numbers only."""
        found = {f["train"]["autocast"] for f in self.files}
        return "/".join(sorted(map(str, found))) if None not in found else "autocast not in git"

    @property
    def notes(self) -> list[str]:
        """What a comparison of this experiment must say where it read less than its own
        files: its per-seed scores from git, and why its predictions (and so the bootstrap over
        test pairs) are missing."""
        notes = []
        if self.scores_from != RUNS:
            notes.append(
                f"per-seed scores from git ({self.scores_from}): its per-seed metrics files "
                "are in neither the DVC cache nor a remote"
            )
        if self.predictions_missing:
            notes.append(
                "no verdict rests on the bootstrap over test pairs (the t-test over seeds decides,"
                f" where it can run), whose predictions are missing: {self.predictions_missing}"
            )
        return notes

    def scores(self, row: str) -> dict[str, list[float]] | None:
        """Per column of `row` (`sts`, `sts/repal`, ...), the score of each seed; None when a
        seed lacks the row."""
        suite, _, refinement = row.partition("/")
        found = [f[suite].get(refinement) if refinement else f[suite] for f in self.files]
        if any(values is None for values in found):
            return None
        columns = SUITES[suite].cls.report_columns(found[0])
        columns = [c for c in columns if all(c in values for values in found)]
        return {c: [float(values[c]) for values in found] for c in columns}


def read_npz(read: Reader, path: str) -> dict[str, np.ndarray]:
    """The arrays of an evaluate `--predictions` file through `read`: per task `<task>/predicted`
    and `<task>/gold`, finite and of one length, and per set scored over items `<set>/items`,
    finite; anything else is one error naming the file."""
    data = read(path)
    try:
        with np.load(io.BytesIO(data)) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise UserError(f"{path}: not a predictions archive ({err}); it was damaged") from None
    for name in arrays:
        task, _, kind = name.rpartition("/")
        if not task or kind not in ("predicted", "gold", ITEMS):
            raise UserError(
                f"{path}: {name}: expected only <task>/predicted, <task>/gold and <set>/{ITEMS}"
            )
        if kind == ITEMS and not (arrays[name].ndim == 1 and arrays[name].dtype.kind == "f"):
            raise UserError(f"{path}: {name}: expected the items' scores in one row")
        if kind == ITEMS and not np.isfinite(arrays[name]).all():
            raise UserError(f"{path}: {name}: expected finite numbers")
    pairs = {name for name in arrays if not name.endswith(f"/{ITEMS}")}
    for task in sorted({name.rpartition("/")[0] for name in pairs}):
        pair = [arrays.get(f"{task}/{kind}") for kind in ("predicted", "gold")]
        if any(a is None for a in pair):
            raise UserError(f"{path}: {task}: expected {task}/predicted and {task}/gold")
        predicted, gold = pair
        if not all(a.ndim == 1 and a.dtype.kind == "f" and np.isfinite(a).all() for a in pair):
            raise UserError(f"{path}: {task}: expected finite numbers in one row each")
        if predicted.shape != gold.shape:
            raise UserError(
                f"{path}: {task}: {predicted.size} predicted scores for {gold.size} gold ones"
            )
    return arrays


def asked_suites(params: dict[str, Any]) -> set[str]:
    """The suites whose params section asks for a task (`Evaluator.asks_for_tasks`)."""
    return {
        name
        for name, suite in SUITES.items()
        if suite.cls.asks_for_tasks(section(params, f"eval.{name}", suite.config))
    }


def read_scores(read: Reader, path: str, suite: str, asked: set[str]) -> dict[str, Any]:
    """A suite's metrics file through `read`, checked (`check_scores`); for a suite not `asked`
    for a task, its file or none (a revision before the suite)."""
    try:
        metrics = read_json(read, path)
    except MissingResults:
        if suite in asked:
            raise
        return {}
    check_scores(path, suite, metrics)
    return metrics


def check_scores(path: str, suite: str, metrics: Any) -> None:
    """A suite's metrics file (`path`) is a JSON object whose report columns, plain and refined,
    are scores x 100 (finite, within ±100); else one error naming the file and column."""
    if not isinstance(metrics, dict):
        raise UserError(f"{path}: expected a JSON object of scores; it was damaged")
    rows = [("", metrics)] + [(f"{r}: ", metrics[r]) for r in REFINEMENTS if r in metrics]
    for row, values in rows:
        if not isinstance(values, dict):
            raise UserError(f"{path}: {row}expected a JSON object of scores; it was damaged")
        for column in SUITES[suite].cls.report_columns(values):
            value = values[column]
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) and abs(value) <= 100)
            ):
                raise UserError(
                    f"{path}: {row}{column}: {value!r} is not a score x 100 (a finite number "
                    "within ±100); it was damaged"
                )


def read_record(read: Reader, path: str, name: str) -> dict[str, Any]:
    """A run's train, refine or analysis record through `read`: a JSON object holding the fields
    the reports read (`RECORDS`), of their type; else one error naming the file and field."""
    record = read_json(read, path)
    if not isinstance(record, dict):
        raise UserError(f"{path}: expected a JSON object; it was damaged")
    for field, kind in RECORDS[name].items():
        value = record.get(field)
        wrong = isinstance(value, bool) or not isinstance(
            value, int | float if kind is float else kind
        )
        if wrong or (kind is float and not math.isfinite(value)):
            raise UserError(f"{path}: {field}: {value!r} is not a {kind.__name__}; it was damaged")
    return record


def check_columns(seeds: list[int], files: list[dict[str, Any]]) -> None:
    """Every seed scores the columns of the first seed that has the row (`sts`, `sts`'s
    `repal`, ...): otherwise one error naming the file and the columns."""
    for suite, declared in SUITES.items():
        for refinement in ("", *REFINEMENTS):
            found = {}
            for seed, run in zip(seeds, files, strict=True):
                values = run[suite].get(refinement) if refinement else run[suite]
                if values is not None:
                    found[seed] = set(declared.cls.report_columns(values))
            if not found:
                continue
            first, expected = next(iter(found.items()))
            for seed, columns in found.items():
                if columns != expected:
                    raise UserError(
                        f"{RUNS}/{seed}/{suite}.json: {refinement + ': ' if refinement else ''}"
                        f"seed {seed} scores other columns than seed {first} (missing: "
                        f"{', '.join(sorted(expected - columns)) or '-'}; extra: "
                        f"{', '.join(sorted(columns - expected)) or '-'}): `dvc repro` it again"
                    )


def read_params(read: Reader) -> dict:
    """The params.yaml that `read` gives, checked."""
    return params_from(parse_yaml(read("params.yaml"), "params.yaml"), "params.yaml")


def load(
    read: Reader, label: str | None = None, params: dict | None = None, from_git: bool = False
) -> Experiment:
    """The experiment `read` gives, run with `params` (default: its params.yaml), which say the
    method and seeds; `label` names it in reports (default: its method). One error names the
    first file that is missing; where `from_git` (a revision), missing per-seed files are read
    from `SCORES` and missing predictions leave the experiment without them."""
    if params is None:
        params = read_params(read)
    method, seeds = run_plan(params)
    asked = asked_suites(params)
    scores_from, files = RUNS, None
    try:
        files = [
            {
                suite: read_scores(read, f"{RUNS}/{seed}/{suite}.json", suite, asked)
                for suite in SUITES
            }
            | {name: read_record(read, f"{RUNS}/{seed}/{name}.json", name) for name in RECORDS}
            for seed in seeds
        ]
    except MissingResults as err:
        if not from_git:
            raise
        scores_from, files = SCORES, committed_files(read, seeds, asked, err)
    check_columns(seeds, files)
    pair_suites = [suite for suite, declared in SUITES.items() if declared.cls.pairs]
    try:
        predictions = {
            suite: [
                read_npz(read, f"{PREDICTIONS}/{seed}/{suite}.npz") if suite in asked else {}
                for seed in seeds
            ]
            for suite in pair_suites
        }
        missing = None
    except MissingResults as err:
        if not from_git:
            raise
        predictions = {suite: [{} for _ in seeds] for suite in pair_suites}
        missing = str(err)
    if missing is None and "STSBenchmark/predicted" not in predictions["sts"][0]:
        raise ConfigError("eval.sts.tasks: the cosine density plot needs STSBenchmark")
    curves = {
        kind: [p for seed in seeds for p in read_json(read, f"{CURVES}/{seed}/{kind}_curve.json")]
        for kind in CURVE_KINDS
    }
    singles = {
        row: {suite: read_scores(read, f"{folder}/{suite}.json", suite, asked) for suite in SUITES}
        for row, folder in ((UNTRAINED, REFERENCE_DIR), (TFIDF, TFIDF_DIR))
    }
    before = read_record(read, f"{REFERENCE_DIR}/analysis.json", "analysis")
    return Experiment(
        label or method,
        params,
        method,
        seeds,
        files,
        predictions,
        curves,
        singles,
        before,
        scores_from,
        missing,
    )


def committed_files(
    read: Reader, seeds: list[int], asked: set[str], missing: MissingResults
) -> list[dict[str, Any]]:
    """Each seed's metrics files as git holds their numbers (`SCORES`, keys dotted: a
    refinement's `repal.<column>`), checked as the files would be and against dvc.lock
    (`committed_scores`); the records' text fields (train's `autocast`, refine's
    `fit_on`) are not there: None. A revision without `SCORES` raises `missing`, the error of
    the per-seed file that was not found."""
    try:
        records = committed_scores(read)
    except MissingResults:
        raise missing from None
    found: dict[tuple[Any, Any], dict[str, Any]] = {}
    for (seed, file, key), score in records.items():
        values = found.setdefault((seed, file), {})
        head, dot, rest = key.partition(".")
        if dot and head in REFINEMENTS:
            values.setdefault(head, {})[rest] = score
        else:
            values[key] = score
    files = []
    for seed in seeds:
        run: dict[str, Any] = {}
        for suite in SUITES:
            values = found.get((seed, suite), {})
            if not values and suite in asked:
                raise MissingResults(f"{SCORES}: no {suite} scores of seed {seed}")
            check_scores(f"{SCORES}: seed {seed}: {suite}", suite, values)
            run[suite] = values
        for name, fields in RECORDS.items():
            values = dict(found.get((seed, name), {}))
            for field, kind in fields.items():
                if kind is str:
                    values[field] = None
                elif not isinstance(values.get(field), int | float):
                    raise MissingResults(f"{SCORES}: no {name} {field} of seed {seed}")
                elif kind is int:
                    values[field] = int(values[field])
            run[name] = values
        files.append(run)
    return files


def committed_scores(
    read: Reader, where: str = SCORES, current: bool = True
) -> dict[tuple[Any, str, str], float]:
    """The records of `SCORES` through `read` (`where` names it in errors), read once and
    checked (`score_records`); where `current`, also that it is the file the revision's
    dvc.lock says stage `summary` wrote (its md5), else one error: it was edited, or committed
    with another run's dvc.lock. That is not checked where dvc.lock is missing or records no
    `summary`."""
    data = read(SCORES)
    records = score_records(parse_json(data, where), where)
    try:
        stages = lock_stages(read("dvc.lock")) if current else {}
    except MissingResults:
        stages = {}
    summary = stages.get("summary", {})
    outs = summary.get("outs") if isinstance(summary.get("outs"), list) else []
    written = [o.get("md5") for o in outs if isinstance(o, dict) and o.get("path") == SCORES]
    if summary and written != [hashlib.md5(data).hexdigest()]:
        raise UserError(
            f"{where}: not the file dvc.lock records stage summary wrote (it was edited, or "
            "committed with another run's dvc.lock): `dvc repro` at that revision writes both"
        )
    return records


def score_records(data: Any, where: str) -> dict[tuple[Any, str, str], float]:
    """The records of `SCORES` (`data`, read at `where`) by (seed, file, key): a list of objects
    with `RECORD`'s keys, each score a finite number, none recorded twice; else one error naming
    `where`, the seed's file and the key."""
    if not isinstance(data, list) or not all(
        isinstance(r, dict) and set(r) >= set(RECORD) for r in data
    ):
        raise UserError(f"{where}: expected a list of records with {list(RECORD)}; it was damaged")
    found: dict[tuple[Any, str, str], float] = {}
    for r in data:
        key, score = (r["seed"], str(r["file"]), str(r["key"])), r["score"]
        file = f"{RUNS}/{r['seed']}/{r['file']}.json"
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise UserError(f"{where}: {file}: {key[2]}: {score!r} is not a number; it was damaged")
        if not math.isfinite(score):
            raise UserError(f"{where}: {file}: {key[2]}: {score}: a metric must be a finite number")
        if key in found:
            raise UserError(f"{where}: {file}: {key[2]}: recorded twice")
        found[key] = score
    return found
