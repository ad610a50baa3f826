"""`python -m sentemb.review.metrics_diff`: `dvc metrics diff` with the scores that moved by less
than `compare.noise` labelled noise; DVC's JSON read without DVC, then a real git + DVC repo."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from sentemb.review.diff import (
    Change,
    MetricsDiffError,
    changes,
    committed,
    is_score,
)
from sentemb.review.render import diff_label, metrics_table

from support.repos import git, git_dvc_repo
from support.stages import run_module

DIFF = {
    "metrics/runs/1/sts.json": {
        "avg": {"old": 76.3217, "new": 76.3251, "diff": 0.0034},
        "repal.avg": {"old": 76.9, "new": 76.84, "diff": -0.06},
        "STS12": {"old": None, "new": 70.1},
    },
    "metrics/runs/1/train.json": {
        "best_dev": {"old": 84.3456, "new": 84.3439, "diff": -0.0017},
        "final_loss": {"old": 0.0037, "new": 0.0036, "diff": -0.0001},
        "method": {"old": "simcse", "new": "sscl"},
    },
    "metrics/summary.json": {
        "trained.sts.avg.mean": {"old": 76.32, "new": 76.325, "diff": 0.005},
        "trained.sts.avg.std": {"old": 0.151, "new": 0.152, "diff": 0.001},
    },
}


def test_only_scores_below_the_noise_are_noise() -> None:
    rows = changes(DIFF, "HEAD", "workspace")
    assert [(r.path.split("/")[-1], r.metric) for r in rows] == [
        ("sts.json", "STS12"),
        ("sts.json", "avg"),
        ("sts.json", "repal.avg"),
        ("train.json", "best_dev"),
        ("train.json", "final_loss"),
        ("summary.json", "trained.sts.avg.mean"),
        ("summary.json", "trained.sts.avg.std"),
    ]  # in the order of file and metric; the string `method` is not a metric to compare
    assert [diff_label(r, 0.01) for r in rows] == ["", "noise", "", "noise", "", "noise", ""]
    assert [diff_label(r, 0.001) for r in rows] == [""] * 7
    assert diff_label(Change("metrics/tfidf/sts.json", "avg", 80.0, 80.0 + 0.01), 0.01) == ""


def test_rows_keep_one_order_whatever_order_dvc_gives() -> None:
    shuffled = {path: dict(reversed(metrics.items())) for path, metrics in reversed(DIFF.items())}
    assert changes(shuffled, "a", "b") == changes(DIFF, "a", "b")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_metric_that_is_no_finite_number_is_an_error_naming_it(value: float) -> None:
    diff = {"metrics/summary.json": {"trained.sts.avg.mean": {"old": 76.3, "new": value}}}
    with pytest.raises(MetricsDiffError, match=r"^workspace:metrics/summary\.json: trained\.sts"):
        changes(diff, "HEAD", "workspace")


@pytest.mark.parametrize(
    ("path", "metric", "score"),
    [
        ("metrics/reference/transfer.json", "MR/dev", True),
        ("metrics/tfidf/retrieval.json", "QQP-protocol/BQ/map", True),
        ("metrics/runs/a-1/chinese.json", "whitening.avg", True),
        ("metrics/runs/a-1/refine.json", "english.dev/repal", True),
        ("metrics/runs/a-1/refine.json", "english.lambda2", False),
        ("metrics/runs/a-1/refine.json", "english.cosine/none", False),
        ("metrics/runs/a-1/train.json", "steps", False),
        ("metrics/runs/a-1/train.json", "initial_dev", True),  # the untrained model's dev
        ("metrics/runs/a-1/analysis.json", "uniformity", False),
        ("metrics/summary.json", "trained.sts/repal.STS12.mean", True),
        ("metrics/summary.json", "trained.chinese.avg.std", False),  # a spread, not a score
        ("metrics/summary.json", "tfidf.retrieval.avg", True),
        ("metrics/phrases.json", "phrases", False),
        ("metrics/runs/a-1/sts.json", "seconds", False),  # the stage's wall time
    ],
)
def test_scores_are_the_x100_metrics(path: str, metric: str, score: bool) -> None:
    assert is_score(path, metric) is score


def test_table_is_dvcs_with_a_note_column() -> None:
    text = metrics_table(changes(DIFF, "HEAD", "workspace"), 0.01, "HEAD", "workspace")
    lines = text.splitlines()
    assert lines[0] == "| Path | Metric | HEAD | workspace | Change | Note |"
    assert "| metrics/runs/1/sts.json | avg | 76.3217 | 76.3251 | +0.0034 | noise |" in lines
    assert "| metrics/runs/1/sts.json | STS12 | - | 70.1 | - |  |" in lines
    assert lines[-1] == (
        "7 metric(s) changed; 3 of the 4 changed score(s) moved by less than 0.01 points"
        " (`compare.noise`): noise"
    )
    assert metrics_table([], 0.01, "HEAD", "workspace") == "no metric changed"


def test_a_pipe_in_a_path_or_metric_keeps_the_columns() -> None:
    """A metrics file or key of the user's may hold `|`: escaped, the row keeps its 6 cells."""
    diff = {"metrics/a|b.json": {"x|y": {"old": 1.0, "new": 2.0, "diff": 1.0}}}
    row = metrics_table(changes(diff, "HEAD", "workspace"), 0.01, "HEAD", "workspace").splitlines()[
        2
    ]
    assert row == "| metrics/a\\|b.json | x\\|y | 1.0 | 2.0 | +1.0 |  |"
    assert len(re.split(r"(?<!\\)\|", row)) == 8


def metrics_diff(repo: Path, *args: str, process: bool = False) -> subprocess.CompletedProcess:
    """`python -m sentemb.review.metrics_diff <args>` run from `repo` (in this process unless
    `process`): its exit status, stdout and stderr."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    return run_module("sentemb.review.metrics_diff", list(args), repo, env, process=process)


@pytest.mark.slow
def test_metrics_diff_in_a_git_and_dvc_repo(tmp_path: Path) -> None:
    """The headline through `dvc metrics diff`; `--all` every committed number, the per-seed
    records of plots/summary/scores.json under their seed's file; errors in one line."""

    git_dvc_repo(tmp_path)
    summary, scores = tmp_path / "metrics/summary.json", tmp_path / "plots/summary/scores.json"
    scores.parent.mkdir(parents=True)
    summary.parent.mkdir(parents=True)
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"metrics": ["metrics/summary.json"]}))
    (tmp_path / "params.yaml").write_text("compare:\n  noise: 0.01\n")

    def write(avg: float, std: float, stsb: float, steps: int) -> None:
        summary.write_text(json.dumps({"trained": {"sts": {"avg": {"mean": avg, "std": std}}}}))
        records = [
            {"seed": 1, "file": "sts", "key": "STSBenchmark", "score": stsb},
            {"seed": 1, "file": "train", "key": "steps", "score": steps},
        ]
        scores.write_text(json.dumps(records))

    write(76.3217, 0.1, 80.0, 10)
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "first")
    write(76.3251, 0.2, 80.5, 10)

    result = metrics_diff(tmp_path, process=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    path = "metrics/summary.json"
    assert f"| {path} | trained.sts.avg.mean | 76.3217 | 76.3251 | +0.0034 | noise |" in lines
    assert f"| {path} | trained.sts.avg.std | 0.1 | 0.2 | +0.1 |  |" in lines
    assert "STSBenchmark" not in result.stdout  # details: with --all
    assert "noise |" not in metrics_diff(tmp_path, "HEAD", "--noise", "0.001").stdout
    detailed = metrics_diff(tmp_path, "--all").stdout.splitlines()
    assert "| metrics/runs/1/sts.json | STSBenchmark | 80.0 | 80.5 | +0.5 |  |" in detailed
    assert f"| {path} | trained.sts.avg.mean | 76.3217 | 76.3251 | +0.0034 | noise |" in detailed
    assert not any("steps" in line for line in detailed)  # unchanged

    (tmp_path / "sub").mkdir()  # from any folder of the repository: the same diff
    assert metrics_diff(tmp_path / "sub", "--all").stdout.splitlines() == detailed

    for odd in ("my run.json", "é.json"):  # git quotes such names unless asked for -z
        (tmp_path / "metrics" / odd).write_text('{"avg": 12.5}')
        git(tmp_path, "add", f"metrics/{odd}")
        rows = metrics_diff(tmp_path, "--all").stdout.splitlines()
        assert f"| metrics/{odd} | avg | - | 12.5 | - |  |" in rows, rows
        git(tmp_path, "rm", "-q", "--cached", f"metrics/{odd}")
        (tmp_path / "metrics" / odd).unlink()

    other = tmp_path / "metrics" / "other.json"  # any tracked metrics file: NaN is an error
    for value in ("NaN", "-Infinity"):
        other.write_text(f'{{"a": {{"b": [1.0, {value}]}}}}')
        git(tmp_path, "add", "metrics/other.json")
        failed = metrics_diff(tmp_path, "--all")
        assert failed.returncode == 1 and failed.stdout == ""
        assert failed.stderr.startswith("error: workspace:metrics/other.json: a.b[1]: "), value
        git(tmp_path, "rm", "-q", "--cached", "metrics/other.json")
    other.unlink()

    unknown = "error: no-such-rev: neither a git revision nor a DVC experiment"
    for args, message, status in (
        (["no-such-rev"], unknown, 1),
        (["no-such-rev", "--all"], unknown, 1),
        *(  # a `refs/` name DVC cannot parse as an experiment's, or an experiment not there
            ([name], f"error: {name}: neither a git revision nor a DVC experiment", 1)
            for name in ("refs/heads/mian", "refs/exps", "refs/exps/ab/cdef/nope", "refs/x/y/z")
        ),
        (["HEAD", "HEAD~0", "--all"], "error: HEAD and HEAD~0: one revision (both ", 1),
        (["HEAD:params.yaml"], "error: HEAD:params.yaml: a git blob, not a commit", 1),
        (["--noise", "-1"], "error: argument --noise: must be a finite number >= 0", 2),
    ):
        failed = metrics_diff(tmp_path, *args)
        assert failed.returncode == status and failed.stdout == ""
        assert failed.stderr.startswith(message) and len(failed.stderr.splitlines()) == 1

    full = (
        subprocess.run(
            ["git", "rev-parse", "--symbolic-full-name", "HEAD"], cwd=tmp_path, capture_output=True
        )
        .stdout.decode()
        .strip()
    )  # refs/heads/<its branch>: a git revision, not an experiment
    same = metrics_diff(tmp_path, full).stdout.replace(full, "HEAD")
    assert same == metrics_diff(tmp_path, "HEAD").stdout

    # a damaged file is one error naming it, never metrics shown as removed
    scores.write_text("{}")
    failed = metrics_diff(tmp_path, "--all")
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr.startswith("error: workspace:plots/summary/scores.json: expected a list")
    write(76.3251, 0.2, 80.5, 10)
    records = json.loads(scores.read_text())
    scores.write_text(json.dumps([*records, records[0] | {"score": 1.0}]))
    failed = metrics_diff(tmp_path, "--all")
    assert failed.stderr.startswith("error: workspace:plots/summary/scores.json: metrics/runs/")
    assert failed.stderr.rstrip().endswith(": STSBenchmark: recorded twice")
    write(76.3251, 0.2, 80.5, 10)
    where = "error: workspace:metrics/summary.json: "
    headline = summary.read_text()
    for damaged, message in (
        (headline[:20], where + "not valid JSON"),
        (b"\xff\xfe{}", where + "not UTF-8 text"),
        ("[1, 2, 3]", where + "expected a JSON object"),
        *(
            (headline.replace("76.3251", value), where + "trained.sts.avg.mean: ")
            for value in ('"abc"', "null", "true", "NaN", "Infinity", "{}")
        ),
    ):
        if isinstance(damaged, bytes):
            summary.write_bytes(damaged)
        else:
            summary.write_text(damaged)
        for args in ([], ["--all"]):  # DVC would show a number turned to text as removed
            failed = metrics_diff(tmp_path, *args)
            assert failed.returncode == 1 and failed.stdout == "", (damaged, failed.stdout)
            assert failed.stderr.splitlines()[-1].startswith(message), failed.stderr


def test_a_commits_scores_are_the_file_its_lock_says_summary_wrote(tmp_path: Path) -> None:
    """`--all` reads a commit's plots/summary/scores.json only where its dvc.lock records that
    file (md5) as stage summary's; the workspace's, perhaps mid-`dvc repro`, is not checked."""
    git_dvc_repo(tmp_path)
    scores = tmp_path / "plots/summary/scores.json"
    scores.parent.mkdir(parents=True)
    scores.write_text(json.dumps([{"seed": 1, "file": "sts", "key": "avg", "score": 80.0}]))

    def commit(data: bytes) -> None:
        outs = [{"path": "plots/summary/scores.json", "md5": hashlib.md5(data).hexdigest()}]
        lock = {"schema": "2.0", "stages": {"summary": {"cmd": "x", "outs": outs}}}
        (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
        git(tmp_path, "add", "-A")
        git(tmp_path, "commit", "-qm", "results")

    commit(b"[]")  # another run's lock
    message = r"^HEAD:plots/summary/scores\.json: not the file dvc\.lock records stage summary"
    with pytest.raises(MetricsDiffError, match=message):
        committed(tmp_path, "HEAD", "HEAD")
    expected = {("metrics/runs/1/sts.json", "avg"): 80.0}
    assert committed(tmp_path, None, "workspace") == expected
    commit(scores.read_bytes())
    assert committed(tmp_path, "HEAD", "HEAD") == expected
